"""What the miner's own bookkeeping costs around the search: corpora in, pairs out.

    .venv/bin/python bench/mine_corpus_bench.py --peer-repo /tmp/peer [--sizes 1000000 3000000]

``mining mine`` reads both corpora (``mining.corpus.read_corpus``), drops empty rows and folds
duplicates (``prepare_side`` with ``unify``), and after the search gathers and writes the output rows
(``mining.mine.write_outputs``: Parquet, TSV, histogram, stats). This bench runs
exactly that sequence on two generated Parquet corpora of N distinct sentences (5% duplicated,
1% empty) with one mined pair per source row, each in a fresh child process, and reports wall
time and peak RSS (``ru_maxrss``) per size, for this checkout and for the named peer: the same
code from another checkout (``--peer-repo``, e.g. ``git worktree add /tmp/peer 16f9dc5``: the
list-based corpus this replaced). The vectors are a constant column (the search is not
measured: its memory is the planner's to predict). Ratios are this / peer, same input, same run.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
log = logging.getLogger("mine_corpus_bench")

CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np
from labse_common.stats import StageCounter
from mining.corpus import prepare_side, read_corpus
from pathlib import Path
from labse_common.sections.mining import MiningConfig
from mining.mine import write_outputs
from mining.retrieval import Pairs

src_path, trg_path, out = sys.argv[2], sys.argv[3], sys.argv[4]
t0 = time.perf_counter()
rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
src_c, trg_c = read_corpus(src_path, "en"), read_corpus(trg_path, "de")
after_read = rss()
counter = StageCounter()
sides = []
for name, c in (("src", src_c), ("trg", trg_c)):
    texts = c.text if hasattr(c, "text") else c.texts
    n = len(c.texts) if not hasattr(c, "table") else c.table.num_rows
    blocks = [np.ones((n, 4), np.float32)]
    sides.append(prepare_side(texts, blocks, True, counter, name, materialize=False))
src, trg = sides
m = min(len(src.offsets), len(trg.offsets)) - 1
pairs = Pairs(np.arange(m), np.arange(m), np.linspace(2.0, 1.0, m, dtype=np.float32))
after_prepare = rss()
# What `mining mine` does after the search: the output rows, Parquet + TSV, histogram, stats.
report = write_outputs(Path(out), pairs, np.full(m, 0.9, np.float32), src, trg, src_c, trg_c,
                       counter, MiningConfig(progress=False), t0, {})
print(json.dumps({"rows_out": report["rows_written"], "seconds": time.perf_counter() - t0,
                  "rss_after_read": after_read, "rss_after_prepare": after_prepare,
                  "peak_rss": rss()}))
"""


def write_corpus(path: Path, n: int, seed: int) -> None:
    """N sentences of 12 words from a 20k-word list (distinct but for the planted 5%
    duplicates and 1% whitespace-only rows), with ids and a url column."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    words = np.array([f"word{i}" for i in range(20000)], dtype=object)
    writer = None
    step = 200_000
    for lo in range(0, n, step):
        k = min(step, n - lo)
        idx = rng.integers(0, len(words), size=(k, 12))
        text = [" ".join(r) for r in words[idx]]
        for j in range(0, k, 20):  # 5%: the previous row again
            if j:
                text[j] = text[j - 1]
        for j in range(7, k, 100):  # 1%: whitespace only
            text[j] = " \u3000 "
        t = pa.table(
            {
                "text": text,
                "id": [f"doc{lo + i}" for i in range(k)],
                "url_or_title": [f"https://example.org/{lo + i}" for i in range(k)],
            }
        )
        if writer is None:
            writer = pq.ParquetWriter(path, t.schema, compression="zstd")
        writer.write_table(t, row_group_size=65536)
    writer.close()


def run_child(repo: Path, src: Path, trg: Path, out: Path) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(repo)}
    r = subprocess.run(
        [sys.executable, "-c", CHILD, str(repo), str(src), str(trg), str(out)],
        capture_output=True,
        text=True,
        env=env,
        cwd=repo,
    )
    if r.returncode:
        raise SystemExit(f"child failed in {repo}:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--peer-repo",
        required=True,
        help="another checkout of this project to compare with (the named peer)",
    )
    p.add_argument(
        "--sizes", type=int, nargs="+", default=[1_000_000, 3_000_000], help="sentences per side"
    )
    p.add_argument(
        "--workdir", default=None, help="where the corpora are written (default: a temp dir)"
    )
    p.add_argument("--json", default=None, help="also write the rows here")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    peer = Path(args.peer_repo)
    if not (peer / "mining" / "corpus.py").is_file():
        p.error(f"--peer-repo {peer}: not a checkout of this project (no mining/corpus.py)")
    rows = []
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        for n in args.sizes:
            src, trg = Path(tmp) / f"src{n}.parquet", Path(tmp) / f"trg{n}.parquet"
            write_corpus(src, n, 1)
            write_corpus(trg, n, 2)
            for name, repo in (("this", ROOT), ("peer", peer)):
                out = Path(tmp) / f"out-{name}-{n}"
                r = run_child(repo, src, trg, out)
                r.update(code=name, sentences=n)
                rows.append(r)
                log.info("%s %d: %s", name, n, r)
    # Peaks (ru_maxrss) up to the end of each phase: reading, cleaning, writing.
    print(
        f"{'sentences/side':>14} {'code':>5} {'pairs out':>10} {'s':>7} {'peak read MiB':>14}"
        f" {'peak clean MiB':>15} {'peak MiB':>9} {'B/sentence':>11}"
    )
    for r in rows:
        print(
            f"{r['sentences']:>14,} {r['code']:>5} {r['rows_out']:>10,} {r['seconds']:>7.1f}"
            f" {r['rss_after_read'] / 2**20:>14,.0f} {r['rss_after_prepare'] / 2**20:>15,.0f}"
            f" {r['peak_rss'] / 2**20:>9,.0f} {r['peak_rss'] / (2 * r['sentences']):>11,.0f}"
        )
    for n in args.sizes:
        a, b = (
            next(r for r in rows if r["sentences"] == n and r["code"] == c)
            for c in ("this", "peer")
        )
        print(
            f"{n:,}/side: this/peer time {a['seconds'] / b['seconds']:.2f}x, "
            f"peak RSS {a['peak_rss'] / b['peak_rss']:.2f}x"
        )
    if len(args.sizes) > 1:
        lo, hi = min(args.sizes), max(args.sizes)
        for c in ("this", "peer"):
            a, b = (
                next(r for r in rows if r["sentences"] == s and r["code"] == c) for s in (lo, hi)
            )
            grow = (b["peak_rss"] - a["peak_rss"]) / (2 * (hi - lo))
            print(f"{c}: peak RSS grows {grow:,.0f} B per added sentence (both sides counted)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
