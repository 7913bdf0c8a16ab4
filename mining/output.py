"""Writers of mined pairs: Parquet and TSV.gz sorted by score, and a score histogram PNG."""

from __future__ import annotations

import gzip
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

# TSV column order: LASER's "score<TAB>src<TAB>trg" first, then the rest.
TSV_COLUMNS = ("margin", "src", "trg", "src_lang", "trg_lang", "src_id", "trg_id", "cosine")
# Rows per Parquet row group and per TSV slice: bounds the writer's memory at any output size.
WRITE_SLICE_ROWS = 65536


def _clean_field(value: object) -> str:
    # A tab or newline inside a sentence would shift every later column.
    return str(value).replace("\t", " ").replace("\r", " ").replace("\n", " ")


def write_pairs(
    table: pa.Table | Iterable[pa.Table],
    out_dir: str | os.PathLike,
    rows_per_slice: int = WRITE_SLICE_ROWS,
) -> tuple[Path, Path]:
    """Write ``mined.parquet`` and ``mined.tsv.gz`` (no header; columns as TSV_COLUMNS + extra).

    ``table`` is the whole output or its slices in order (``mining.mine.pairs_slices``: then
    only one slice is in memory at a time; they must share one schema and not be empty unless
    the output is). Both files are written ``rows_per_slice`` rows at a time (Parquet row groups
    of that size), so writing does not grow with the number of pairs."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pq_path, tsv_path = out / "mined.parquet", out / "mined.tsv.gz"
    parts = [table] if isinstance(table, pa.Table) else table
    writer = None
    with gzip.open(tsv_path, "wt", encoding="utf-8", newline="\n") as f:
        for t in parts:
            if writer is None:
                writer = pq.ParquetWriter(pq_path, t.schema)
            writer.write_table(t, row_group_size=rows_per_slice)
            cols = [c for c in TSV_COLUMNS if c in t.column_names]
            cols += [c for c in t.column_names if c not in cols]
            ordered = t.select(cols)
            for off in range(0, ordered.num_rows, rows_per_slice):
                # Only this slice becomes Python objects (slicing itself copies nothing).
                part = ordered.slice(off, rows_per_slice)
                data = [part.column(i).to_pylist() for i in range(part.num_columns)]
                f.writelines("\t".join(_clean_field(v) for v in row) + "\n" for row in zip(*data))
    if writer is None:
        raise ValueError("write_pairs: no table given (pass an empty table for no pairs)")
    writer.close()
    return pq_path, tsv_path


def write_histogram(
    scores: np.ndarray, path: str | os.PathLike, threshold: float | None = None, title: str = ""
) -> None:
    """Histogram of the margin scores of the mined pairs (threshold drawn when given)."""
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    # float64: numpy builds the bin edges in the data's type, and float32 edges over a range of
    # ~1e-6 (near-identical margins of a tiny model) collide ("Too many bins for data range").
    finite = scores[np.isfinite(scores)].astype(np.float64)
    if finite.size:
        lo, hi = float(finite.min()), float(finite.max())
        if hi - lo < 1e-6:  # all scores equal: matplotlib cannot bin a zero-width range
            lo, hi = lo - 0.5, hi + 0.5
        bins = min(100, max(10, finite.size // 20))
        ax.hist(finite, bins=bins, range=(lo, hi), color="#4477aa")
    if threshold is not None:
        ax.axvline(threshold, color="#cc3311", linestyle="--", label=f"threshold {threshold:g}")
        ax.legend()
    ax.set_xlabel("margin score")
    ax.set_ylabel("pairs")
    ax.set_title(title or f"{finite.size} mined pairs")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
