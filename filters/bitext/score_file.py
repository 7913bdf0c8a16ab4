"""Add score columns to a pair file, chunk by chunk: what ``cds-score`` and ``lexicon`` share.

:func:`score_pairs_file` streams ``--pairs`` (Parquet or TSV, :mod:`filters.bitext.pair_io`),
calls a scorer on each chunk's src and trg columns and writes every input column plus the
scores to one Parquet file, counting pairs in and out under the input's unit. A Parquet row group
that does not decode costs its own pairs (counted ``damaged_row_group``), not the run: each pair's
score stands alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from filters.bitext.pair_io import PAIRS, iter_pair_batches, no_pairs
from labse_common.stats import StageCounter

#: A scorer: (src texts, trg texts) -> {column name: one value per pair}.
Scorer = Callable[[Sequence[str], Sequence[str]], Mapping[str, "np.ndarray | Sequence[float]"]]


def with_scores(batch: pa.RecordBatch, scores: Mapping) -> pa.RecordBatch:
    """``batch`` plus the score columns (replacing same-named ones from an earlier run)."""
    names = [n for n in batch.schema.names if n not in scores]
    cols = [batch.column(batch.schema.names.index(n)) for n in names]
    for name, values in scores.items():
        names.append(name)
        cols.append(pa.array(values, pa.float32()))
    return pa.RecordBatch.from_arrays(cols, names=names)


def score_pairs_file(
    scorer: Scorer,
    path: str,
    flag: str,
    unit: str,
    dest: Path,
    counter: StageCounter,
    batch_rows: int,
    layout: str = "auto",
    show: bool = False,
    desc: str = "score",
) -> None:
    """Score every pair of ``path`` into ``dest``; a file with no readable pair is an error."""
    reader = StageCounter()
    writer = None
    counter.add_in("files")
    try:
        with tqdm(unit=" pairs", desc=f"{desc} {unit}", disable=not show) as bar:
            for batch in iter_pair_batches(
                path, reader, batch_rows, layout, flag=flag, survive_damage=True
            ):
                if batch.num_rows == 0:
                    continue
                src = batch.column(0).to_pylist()
                trg = batch.column(1).to_pylist()
                scored = with_scores(batch, scorer(src, trg))
                if writer is None:
                    writer = pq.ParquetWriter(dest, scored.schema)
                writer.write_batch(scored)
                counter.add_in(unit, batch.num_rows)
                counter.add_out(unit, batch.num_rows)
                bar.update(batch.num_rows)
    finally:
        if writer is not None:
            writer.close()
    if writer is None:
        raise no_pairs(path, flag)
    counter.add_out("files")
    for key, n in reader.counts.items():
        what, rest = key.split("/", 1)
        if what == PAIRS:  # a damaged row group's pairs: this input's unit
            counter.counts[f"{unit}/{rest}"] += n
        elif what == "files":
            counter.counts[key] += n
        else:  # the TSV reader's "lines", named per input
            counter.counts[f"{unit}_{key}"] += n
