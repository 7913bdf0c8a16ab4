"""The training stream's block table at scale: columns against one dataclass per block.

    .venv/bin/python bench/block_table_bench.py --peer-repo /tmp/peer [--blocks 1000000 4000000]
        [--ranks 8] [--lanes 256]

Every rank of ``labse_model pretrain``/``train`` holds every block of the corpus: the paper
preset (``block_rows`` 1,000) makes 17M blocks of its 17B sentences. This bench builds N
blocks the way the scan does (files of 200 blocks, the ranks' shares), then times and sizes,
each in a fresh process (kernel high-water RSS):

  held      RSS added by the N blocks once built (bytes per block);
  exchange  what ``scan_distributed`` does on every rank: each of ``--ranks`` shares pickled
            (``all_gather_object``), all unpickled and merged, then sorted; its seconds and the
            process's peak RSS after it;
  deal      one lane's blocks of one epoch (``_GroupLane._epoch_blocks`` with ``--lanes``
            lanes) and their record count: what a lane computes at every epoch and resume.

The peer is the same steps on the previous code (``--peer-repo``: a checkout of the commit
before the block table, e.g. ``git worktree add /tmp/peer <commit>``), whose blocks were a
list of frozen dataclasses exchanged through ``dataclasses.asdict``. Ratios are ours / peer's
in the same run.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
log = logging.getLogger("block_table_bench")
BLOCKS_PER_FILE = (
    200  # a 200k-row corpus file (the paper preset's rows_per_file) at block_rows 1,000
)

CHILD = r"""
import json, pickle, resource, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np
from labse_model import stream
try:
    from labse_model.lanes import _GroupLane
except ImportError:  # a peer checkout from before the lanes left stream.py
    _GroupLane = stream._GroupLane

n, ranks, lanes, per_file, columnar = (int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]),
                                      int(sys.argv[5]), hasattr(stream, "BlockList"))

def rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

def make_share(rank):
    # The blocks of the files dealt to ``rank`` (files round-robin, as stream.scan deals them).
    res = stream.ScanResult()
    files = -(-n // per_file)
    for f in range(rank, files, ranks):
        path = f"s3://corpus/sentences/de/part-{f // 1000:05d}-{f % 1000:05d}.parquet"
        blocks = [stream.Block(path, "parquet", k // 10, 1000, (k % 10) * 1000)
                  for k in range(min(per_file, n - f * per_file))]
        part = stream.ScanResult({"de": stream.BlockList(blocks) if columnar else blocks})
        res.merge(part)
    return res

base = rss()
t = time.perf_counter()
shares = [make_share(r) for r in range(ranks)]
build_s = time.perf_counter() - t
held = rss() - base

t = time.perf_counter()
if columnar:
    sent = [pickle.dumps(s, protocol=pickle.HIGHEST_PROTOCOL) for s in shares]
else:
    from dataclasses import asdict
    sent = [pickle.dumps(asdict(s), protocol=pickle.HIGHEST_PROTOCOL) for s in shares]
wire = sum(len(x) for x in sent)
del shares
total = stream.ScanResult()
for x in sent:
    p = pickle.loads(x)
    if not columnar:
        p = stream.ScanResult({g: [stream.Block(**b) for b in bl] for g, bl in p["groups"].items()},
                              p["counts"], p["heldout"], p.get("sample_bytes", 0), p.get("sample_n", 0))
    total.merge(p)
del sent, p
total.sort()
exchange_s = time.perf_counter() - t
assert len(total.groups["de"]) == n

lane = _GroupLane(total.groups["de"], 0, 0, lanes, 0, 4, stream.SENTENCES, 0.0)
t = time.perf_counter()
eb = lane._epoch_blocks(0)
rows = total.groups["de"].rows[eb] if columnar else [b.rows for b in eb]
size = int(sum(rows))
deal_s = time.perf_counter() - t
print(json.dumps({"n": n, "held_bytes_per_block": held / n, "build_s": build_s, "wire_bytes": wire,
                  "exchange_s": exchange_s, "peak_rss": rss(), "deal_s": deal_s,
                  "lane_records": size}))
"""


def run(repo: Path, n: int, ranks: int, lanes: int) -> dict:
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD,
            str(repo),
            str(n),
            str(ranks),
            str(lanes),
            str(BLOCKS_PER_FILE),
        ],
        capture_output=True,
        text=True,
    )
    if r.returncode:
        raise SystemExit(f"{repo}: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--peer-repo",
        required=True,
        help="a checkout of the code before the block table (the peer)",
    )
    ap.add_argument(
        "--blocks",
        type=int,
        nargs="+",
        default=[1_000_000, 4_000_000],
        help="blocks per run (17M = the paper's 17B sentences at block_rows 1,000)",
    )
    ap.add_argument("--ranks", type=int, default=8, help="shares exchanged (ranks of the job)")
    ap.add_argument("--lanes", type=int, default=256, help="lanes the blocks are dealt to")
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    peer = Path(args.peer_repo)
    if not (peer / "labse_model" / "stream.py").is_file():
        ap.error(f"--peer-repo {peer}: no labse_model/stream.py there")
    rows = []
    for n in args.blocks:
        for name, repo in (("peer (dataclass list)", peer), ("ours (block table)", REPO)):
            log.info("%s, %d blocks ...", name, n)
            rows.append({"code": name, **run(repo, n, args.ranks, args.lanes)})
    print(f"\n{args.ranks} ranks' shares exchanged, {args.lanes} lanes\n")
    print(
        "| blocks | code | held B/block | pickled B/block | exchange + sort s | peak RSS MiB | "
        "one lane's epoch deal ms |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['n']:,} | {r['code']} | {r['held_bytes_per_block']:.0f} | "
            f"{r['wire_bytes'] / r['n']:.1f} | {r['exchange_s']:.2f} | {r['peak_rss'] / 2**20:,.0f} | "
            f"{1e3 * r['deal_s']:.1f} |"
        )
    print("\nours / peer, same run:")
    for i in range(0, len(rows), 2):
        p, o = rows[i], rows[i + 1]
        if p["lane_records"] != o["lane_records"]:
            raise SystemExit(
                f"{p['n']} blocks: the lane's records differ ({o['lane_records']} "
                f"against the peer's {p['lane_records']})"
            )
        print(
            f"  {p['n']:,} blocks: held {o['held_bytes_per_block'] / p['held_bytes_per_block']:.3f}x, "
            f"exchange {o['exchange_s'] / p['exchange_s']:.3f}x, peak RSS "
            f"{o['peak_rss'] / p['peak_rss']:.3f}x, epoch deal {o['deal_s'] / p['deal_s']:.3f}x"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
