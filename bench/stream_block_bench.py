"""What a training stream's block costs to read, by the corpus files' row-group size.

    .venv/bin/python bench/stream_block_bench.py [--rows 200000] [--block-rows 1000]
        [--row-groups 0 50000 10000] [--blocks 30] [--seed 0]

``labse_model.stream.read_block`` reads one block of ``block_rows`` records from a Parquet row
group by decoding the group from its start (Parquet has no row-level seek here), so its cost
per record kept follows the row-group size. One file of ``--rows`` distinct sentences (random
words with non-ASCII letters, sorted by text as the corpus writer sorts them, zstd) is written
once per row-group size (0 = one group per file: the named peer, how the corpus jobs wrote
until ``corpus.row_group_rows``); for each it prints the file size, a whole-file read through
``labse_common.datafiles.iter_parquet_batches`` and the µs per record of ``--blocks`` random
blocks, with the ratios to the peer.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

log = logging.getLogger("stream_block_bench")
WORDS = (
    "Straße über Bäume Haus Stadt Land Fluss Wasser gehen kommen sehen grün "
    "maison rivière été città perché río año"
).split()


def measure(
    texts: list[str], row_group: int, block_rows: int, blocks: int, seed: int, workdir: Path
) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from labse_common.datafiles import iter_parquet_batches
    from labse_model import stream

    d = workdir / f"rg{row_group}"
    (d / "xx").mkdir(parents=True)
    path = d / "xx" / "part-00000-00000.parquet"
    pq.write_table(
        pa.table({"text": texts}), path, compression="zstd", row_group_size=row_group or None
    )
    t = time.perf_counter()
    for _ in range(3):
        n = sum(b.num_rows for b in iter_parquet_batches(path))
    assert n == len(texts)
    whole = (time.perf_counter() - t) / 3
    res = stream.scan(stream.expand_inputs([str(d)]), stream.SENTENCES, block_rows=block_rows)
    found = res.groups["xx"]
    pick = [
        found[i] for i in random.Random(seed).sample(range(len(found)), min(blocks, len(found)))
    ]
    t = time.perf_counter()
    kept = sum(len(stream.read_block(b, stream.SENTENCES, 0.0)) for b in pick)
    per = (time.perf_counter() - t) / kept
    return {
        "row_group": row_group,
        "mb": path.stat().st_size / 1e6,
        "whole_s": whole,
        "us_per_record": per * 1e6,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", type=int, default=200_000, help="sentences in the file")
    ap.add_argument(
        "--block-rows", type=int, default=1000, help="the stream's block_rows (the paper preset's)"
    )
    ap.add_argument(
        "--row-groups",
        type=int,
        nargs="+",
        default=[0, 50_000, 10_000],
        help="row-group sizes to compare; 0 = one per file (the peer, measured first)",
    )
    ap.add_argument("--blocks", type=int, default=30, help="random blocks read per layout")
    ap.add_argument("--seed", type=int, default=0, help="seed of the text and of the blocks")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if a.rows < a.block_rows or a.block_rows < 1 or a.blocks < 1:
        ap.error("need --rows >= --block-rows >= 1 and --blocks >= 1")
    rng = random.Random(a.seed)
    texts = sorted(" ".join(rng.choice(WORDS) for _ in range(12)) + f" {i}" for i in range(a.rows))
    layouts = [0] + [g for g in a.row_groups if g != 0]
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure(texts, g, a.block_rows, a.blocks, a.seed, Path(tmp)) for g in layouts]
    peer = rows[0]
    log.info(
        "%d sentences, block_rows %d, %d random blocks per layout", a.rows, a.block_rows, a.blocks
    )
    log.info(
        "| row groups | file MB | whole-file read ms | read_block µs/record | size vs peer | "
        "whole read vs peer | block read vs peer |"
    )
    log.info("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        name = "one per file (peer)" if r["row_group"] == 0 else f"{r['row_group']:,} rows"
        log.info(
            "| %s | %.2f | %.0f | %.2f | %.2f | %.2f | %.2f |",
            name,
            r["mb"],
            r["whole_s"] * 1e3,
            r["us_per_record"],
            r["mb"] / peer["mb"],
            r["whole_s"] / peer["whole_s"],
            r["us_per_record"] / peer["us_per_record"],
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
