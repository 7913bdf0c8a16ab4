"""The damage-surviving Parquet reader against the stopping one, same file, same run.

    .venv/bin/python bench/parquet_read_bench.py [--rows 1000000] [--group-rows 65536,1048576]

``labse_common.datafiles.iter_parquet_surviving`` (what the vocabulary job, the pair filter and
the embedding path read with: one ``iter_batches`` per row group, so a damaged group costs only
its rows) against ``iter_parquet_batches`` (one ``iter_batches`` over the whole file, stopping
at the first damage; the reader those stages used before), on a generated sentence file written
with each row-group size. Each reader decodes the ``text`` column to Python strings, as the
stages do; the best of ``--repeat`` runs is reported, and the ratio surviving / stopping (1.00 =
the same cost).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _write(path: str, rows: int, group_rows: int) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    words = np.array([f"w{i}" for i in range(5000)])
    text = [" ".join(rng.choice(words, 12)) for _ in range(rows)]
    pq.write_table(
        pa.table({"text": text, "id": [str(i) for i in range(rows)]}),
        path,
        compression="zstd",
        row_group_size=group_rows,
    )


def _time(reader, path: str, batch_rows: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        n = 0
        for batch in reader(path, ["text"], None, batch_rows):
            if hasattr(batch, "column"):
                n += len(batch.column(0).to_pylist())
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv: list[str] | None = None) -> int:
    from labse_common.datafiles import iter_parquet_batches, iter_parquet_surviving

    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", type=int, default=1_000_000, help="sentences in the file (1000000)")
    ap.add_argument(
        "--group-rows",
        default="65536,1048576",
        help="row-group sizes to write the file with, comma-separated",
    )
    ap.add_argument("--batch-rows", type=int, default=8192, help="rows per batch read (8192)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per reader; the best is kept")
    a = ap.parse_args(argv)
    print(f"{'row group':>10}{'stopping s':>12}{'surviving s':>13}{'surviving/stopping':>20}")
    with tempfile.TemporaryDirectory() as tmp:
        for g in (int(x) for x in a.group_rows.split(",")):
            path = os.path.join(tmp, f"s{g}.parquet")
            _write(path, a.rows, g)
            stop = _time(iter_parquet_batches, path, a.batch_rows, a.repeat)
            surv = _time(iter_parquet_surviving, path, a.batch_rows, a.repeat)
            print(f"{g:>10}{stop:>12.2f}{surv:>13.2f}{surv / stop:>19.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
