"""Translation pairs for training: reading TSV/Parquet files and a resumable batch order.

Pairs live in one Arrow table (compact strings, cheap ``take``). The batch order is a pure
function of (seed, epoch), so the data position after a crash is recovered from the number of
micro-batches already consumed: no iterator state to save, and the same global batches come out
whatever the number of ranks (each rank takes its contiguous slice).
"""

from __future__ import annotations

import gzip
import io
import logging
import os
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from labse_common import filesystems
from labse_common.formats import PAIR_REQUIRED
from labse_common.output_dir import is_remote
from labse_common.stats import StageCounter

log = logging.getLogger(__name__)

PAIR_UNIT = "pairs"
FILE_UNIT = "files"


def _open_text(path: str) -> io.TextIOBase:
    # errors="replace": a stray invalid byte costs one character, not the whole file.
    raw = _open_binary(path)
    if path.endswith(".gz"):
        raw = gzip.open(raw, "rb")
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="\n")


def _open_binary(path: str):
    """Local files directly; s3://, gs:// ... through Beam's FileSystems (configured from
    ``LABSE_BEAM_OPTIONS`` or the AWS environment, see labse_common/filesystems.py)."""
    if is_remote(path):
        return filesystems.open_read(path)
    return open(path, "rb")


def pair_file_exists(path: str) -> bool:
    return filesystems.exists(path) if is_remote(path) else os.path.isfile(path)


def _read_tsv(path: str, counter: StageCounter) -> pa.Table:
    src: list[str] = []
    trg: list[str] = []
    with _open_text(path) as f:
        for line in f:
            line = line.rstrip("\r\n")
            if not line.strip():
                continue  # blank lines are layout, not records
            counter.add_in(PAIR_UNIT)
            cols = line.split("\t")
            if len(cols) not in (2, 4):
                counter.add_dropped(PAIR_UNIT, "malformed")
                continue
            s, t = cols[0].strip(), cols[1].strip()
            if not s or not t:
                counter.add_dropped(PAIR_UNIT, "empty_side")
                continue
            src.append(s)
            trg.append(t)
    return pa.table(
        {"src": pa.array(src, pa.large_string()), "trg": pa.array(trg, pa.large_string())}
    )


def _read_parquet(path: str, counter: StageCounter) -> pa.Table:
    if is_remote(path):
        with _open_binary(path) as f:
            path = io.BytesIO(f.read())  # type: ignore[assignment]
    schema = pq.read_schema(path)
    missing = set(PAIR_REQUIRED) - set(schema.names)
    if missing:
        raise ValueError(f"{path}: Parquet pair file lacks column(s) {sorted(missing)}")
    table = pq.read_table(path, columns=["src", "trg"])
    counter.add_in(PAIR_UNIT, table.num_rows)
    src = pc.utf8_trim_whitespace(table["src"].cast(pa.large_string()))
    trg = pc.utf8_trim_whitespace(table["trg"].cast(pa.large_string()))
    # Nulls count as empty sides.
    empty = pc.or_(
        pc.fill_null(pc.equal(pc.utf8_length(src), 0), True),
        pc.fill_null(pc.equal(pc.utf8_length(trg), 0), True),
    )
    n_empty = pc.sum(empty).as_py() or 0
    if n_empty:
        counter.add_dropped(PAIR_UNIT, "empty_side", n_empty)
    keep = pc.invert(empty)
    return pa.table({"src": pc.filter(src, keep), "trg": pc.filter(trg, keep)})


def read_pairs(paths: Sequence[str], counter: StageCounter) -> pa.Table:
    """Read every pair file into one table (columns ``src``, ``trg``), counting what is dropped."""
    if not paths:
        raise ValueError("no pair files given (--pairs FILE)")
    tables = []
    for path in paths:
        if not pair_file_exists(path):
            raise FileNotFoundError(f"pair file not found: {path}")
        counter.add_in(FILE_UNIT)
        if path.endswith(".parquet"):
            table = _read_parquet(path, counter)
        else:
            table = _read_tsv(path, counter)
        if table.num_rows == 0:
            log.warning("%s holds no usable pairs", path)
            counter.add_dropped(FILE_UNIT, "empty")
            continue
        counter.add_out(FILE_UNIT)
        counter.add_out(PAIR_UNIT, table.num_rows)
        tables.append(table)
    if not tables:
        return pa.table(
            {"src": pa.array([], pa.large_string()), "trg": pa.array([], pa.large_string())}
        )
    return pa.concat_tables(tables).combine_chunks()


def write_tsv_pairs(path: str, src: Sequence[str], trg: Sequence[str]) -> None:
    """Write ``src<TAB>trg`` lines (used to build training input from two aligned files)."""
    with open(path, "w", encoding="utf-8") as f:
        for s, t in zip(src, trg, strict=True):
            f.write(f"{s.replace(chr(9), ' ')}\t{t.replace(chr(9), ' ')}\n")


class BatchOrder:
    """Global micro-batch ``m`` -> row indices; deterministic in (seed, epoch)."""

    def __init__(self, num_pairs: int, batch_size: int, seed: int) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if num_pairs < batch_size:
            raise ValueError(
                f"{num_pairs} usable pairs is fewer than one batch of {batch_size}: "
                "lower train.batch_size or give more pairs"
            )
        self.num_pairs = num_pairs
        self.batch_size = batch_size
        self.seed = seed
        # The last partial batch of an epoch is dropped so every rank gets equal rows.
        self.batches_per_epoch = num_pairs // batch_size
        self._epoch = -1
        self._perm: np.ndarray | None = None

    def indices(self, micro_batch: int) -> np.ndarray:
        epoch, k = divmod(micro_batch, self.batches_per_epoch)
        if epoch != self._epoch:
            rng = np.random.default_rng([self.seed, epoch])
            self._perm = rng.permutation(self.num_pairs)
            self._epoch = epoch
        assert self._perm is not None
        return self._perm[k * self.batch_size : (k + 1) * self.batch_size]

    def local_indices(self, micro_batch: int, rank: int, world_size: int) -> np.ndarray:
        idx = self.indices(micro_batch)
        per_rank = self.batch_size // world_size
        return idx[rank * per_rank : (rank + 1) * per_rank]
