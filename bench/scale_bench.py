"""Scale benchmark: cost per unit and peak memory of a stage as its input grows.

    .venv/bin/python bench/scale_bench.py mining --n 100000 [--n-trg N] [--dim 768] [--k 4]
        [--mem-gb 2] [--index auto|flat|ivf_flat|ivf_sq8|ivf_pq|ivf_pqfs|opq_ivf_pq|FACTORY]
        [--nprobe 16] [--shards 1] [--workers 1] [--sample 1000] [--in-memory-max 200000]
        [--workdir bench_out/scale_mining] [--fresh]

``mining``: synthetic float16 embedding stores (clustered 768-d unit vectors; the first 10% of
the target rows are noisy copies of the same source rows: planted pairs), written chunk by
chunk. Then, each in its own process so its peak RSS (VmHWM) is its own:

  bounded    mining.bounded.mine_bounded on the stores (the planner's index for ``auto``);
  in-memory  mining.mine.mine_vectors on both matrices loaded (the named peer), only where it
             fits (n_src + n_trg <= --in-memory-max), same index settings.

Printed: time per source sentence and per mined pair, peak RSS, the planner's predicted time and
memory against the measured ones, recall@k of the bounded neighbour lists against exact search
on --sample source rows, the agreement of the mined (fwd, margin) pair of those rows with exact
search, planted pairs found, and the bounded/in-memory ratios. Absolute times on a shared
machine are noise; ratios measured back to back in one run are the result.
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

log = logging.getLogger("scale_bench")


def peak_rss_bytes() -> int:
    """Peak resident memory of this process (VmHWM)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def mib(b: float) -> str:
    return f"{b / 2**20:,.0f} MiB"


# ---------------------------------------------------------------------------------------------
# Data: two stores with planted pairs, generated and written chunk by chunk.


def make_stores(work: Path, n_src: int, n_trg: int, dim: int, seed: int = 0) -> tuple[str, str]:
    from mining.embeddings import EmbeddingStore, StoreWriter

    xs, ys = work / f"src_{n_src}_{dim}", work / f"trg_{n_trg}_{dim}"
    try:
        if len(EmbeddingStore(xs)) == n_src and len(EmbeddingStore(ys)) == n_trg:
            return str(xs), str(ys)
    except (FileNotFoundError, ValueError):
        pass
    rng = np.random.default_rng(seed)
    # Topical clusters (cos ~0.5 inside one), as real sentence embeddings have.
    centres = rng.standard_normal((max(1, max(n_src, n_trg) // 100), dim), dtype=np.float32)
    n_par = min(n_src, n_trg) // 10
    step = 50_000
    wx = StoreWriter(xs, dim, "float16", rows_per_shard=250_000)
    wy = StoreWriter(ys, dim, "float16", rows_per_shard=250_000)
    for a in range(0, max(n_src, n_trg), step):
        bx, by = min(n_src, a + step), min(n_trg, a + step)
        x = None
        if bx > a:
            x = centres[rng.integers(0, len(centres), bx - a)]
            x = x + rng.standard_normal(x.shape, dtype=np.float32)
            wx.add(x / np.linalg.norm(x, axis=1, keepdims=True), [str(i) for i in range(a, bx)])
        if by > a:
            y = centres[rng.integers(0, len(centres), by - a)]
            y = y + rng.standard_normal(y.shape, dtype=np.float32)
            p = max(0, min(n_par, by) - a)  # planted: noisy copies of the same source rows
            if p and x is not None:
                y[:p] = x[:p] + 0.5 * rng.standard_normal((p, dim), dtype=np.float32)
            wy.add(y / np.linalg.norm(y, axis=1, keepdims=True), [str(i) for i in range(a, by)])
    wx.close()
    wy.close()
    return str(xs), str(ys)


# ---------------------------------------------------------------------------------------------
# Peers (run as ``scale_bench.py _peer NAME JSON``).


def _cfg(a: dict):
    from labse_common.sections.mining import MiningConfig

    return MiningConfig(k=a["k"], index=a["index"], mem_gb=a["mem_gb"], nprobe=a["nprobe"],
                        train_size=a["train_size"], progress=False)  # fmt: skip


def peer_bounded(a: dict) -> dict:
    from mining.bounded import Layout, mine_bounded

    t0 = time.perf_counter()
    r = mine_bounded(a["src"], a["trg"], _cfg(a),
                     Layout(shards=a["shards"], workers=a["workers"], resume=True,
                            workdir=a["lists"]))  # fmt: skip
    secs = time.perf_counter() - t0
    nb = r.scored.neighbours
    q = np.asarray(a["sample_rows"], np.int64)
    np.savez(a["out"], pairs_src=r.pairs.src, pairs_trg=r.pairs.trg, fwd_inds=nb.fwd_inds[q],
             fwd_scores=r.scored.fwd_scores[q])  # fmt: skip
    return {"seconds": secs, "phases": r.seconds, "factories": r.factories, "pairs": len(r.pairs)}


def peer_in_memory(a: dict) -> dict:
    from mining.embeddings import load_vectors, normalized
    from mining.mine import mine_vectors

    t0 = time.perf_counter()
    x = normalized(np.concatenate([np.asarray(b) for b in load_vectors(a["src"], mmap=False)]))
    y = normalized(np.concatenate([np.asarray(b) for b in load_vectors(a["trg"], mmap=False)]))
    cfg = _cfg(a)
    if a.get("factory"):  # the bounded run's index, so both search the same way
        import dataclasses

        cfg = dataclasses.replace(cfg, index=a["factory"])
    pairs, _ = mine_vectors(x, y, cfg)
    secs = time.perf_counter() - t0
    np.savez(a["out"], pairs_src=pairs.src, pairs_trg=pairs.trg)
    return {"seconds": secs, "pairs": len(pairs)}


PEERS = {"bounded": peer_bounded, "in_memory": peer_in_memory}


def run_peer(name: str, args: dict) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "_peer", name, json.dumps(args)]
    # stderr streams through: the peer's log is the progress of a run of hours.
    out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, cwd=REPO)
    if out.returncode != 0:
        raise RuntimeError(f"peer {name} failed (exit {out.returncode}; its log is above)")
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------
# Exact reference on a sample of source rows.


def exact_sample(src: str, trg: str, rows: np.ndarray, k: int, cands: np.ndarray) -> dict:
    """Exact fwd lists of the sample rows, and the exact margin-best target of each: needs the
    exact backward neighbourhood mean of every candidate target (exact and approximate ones)."""
    from labse_common.sections.mining import MiningConfig
    from mining.bounded import VectorSide
    from mining.knn import merge_topk, search_flat
    from mining.margin import neighbourhood_mean

    cfg = MiningConfig(progress=False, mem_gb=1e9)
    xs, ys = VectorSide(src), VectorSide(trg)
    xq = xs.gather(rows)
    fs = np.full((len(rows), k), -np.inf, np.float32)
    fi = np.full((len(rows), k), -1, np.int64)
    step = 200_000
    for b0 in range(0, len(ys), step):
        s, i = search_flat(xq, ys.read(b0, min(len(ys), b0 + step)), k, cfg)
        fs, fi = merge_topk(fs, fi, s, i + b0, k)
    targets = np.unique(np.concatenate([fi.ravel(), cands.ravel()]))
    yq = ys.gather(targets)
    bs = np.full((len(targets), k), -np.inf, np.float32)
    bi = np.full((len(targets), k), -1, np.int64)
    for a0 in range(0, len(xs), step):
        s, i = search_flat(yq, xs.read(a0, min(len(xs), a0 + step)), k, cfg)
        bs, bi = merge_topk(bs, bi, s, i + a0, k)
    bwd_mean = dict(zip(targets.tolist(), neighbourhood_mean(bs).tolist()))
    fwd_mean = neighbourhood_mean(fs)
    # ratio margin of each exact candidate; the best one is the exact fwd pair of the row
    margin = fs / ((fwd_mean[:, None] + np.vectorize(bwd_mean.get)(fi)) / 2)
    best = fi[np.arange(len(rows)), margin.argmax(axis=1)]
    return {"fwd_inds": fi, "best": best}


def cmd_mining(args: argparse.Namespace) -> int:
    from mining import plan as planner
    from mining.knn import recall_at_k

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    n_src, n_trg = args.n, args.n_trg or args.n
    t0 = time.perf_counter()
    src, trg = make_stores(work, n_src, n_trg, args.dim)
    print(f"data: {n_src:,} x {n_trg:,} vectors, dim {args.dim}, float16 stores "
          f"({time.perf_counter() - t0:.1f} s to make or reuse)")  # fmt: skip

    kind = args.index if args.index in planner.KINDS else None
    plan = planner.make_plan(n_src, n_trg, args.dim, args.mem_gb, args.workers, k=args.k,
                             train_size=args.train_size, itemsize=2, kind=kind,
                             nprobe=args.nprobe)  # fmt: skip
    if kind is None and args.index == "auto":
        plan_index = plan.kind
    else:
        plan_index = args.index
    print(f"plan: {plan.kind} ({plan.factory_trg}), {plan.shards} shard(s), nprobe "
          f"{plan.nprobe}; predicted {planner.fmt_seconds(plan.total_seconds)}, worker peak "
          f"{mib(plan.worker_peak_bytes)}, driver peak {mib(plan.driver_peak_bytes)}")  # fmt: skip

    rng = np.random.default_rng(1)
    sample = np.sort(rng.choice(n_src, size=min(args.sample, n_src), replace=False))
    peer_args = {"src": src, "trg": trg, "k": args.k, "index": plan_index, "mem_gb": args.mem_gb,
                 "nprobe": args.nprobe or plan.nprobe or 16, "train_size": args.train_size,
                 "shards": args.shards or plan.shards, "workers": args.workers,
                 "work": str(work), "sample_rows": sample.tolist()}  # fmt: skip
    # Finished steps (trained indexes, shard lists, merged directions) are kept per size and
    # index under the workdir and reused by a rerun: a stopped run of hours continues. The
    # time printed is then that of the rest; --fresh starts over.
    lists = work / f"lists_{n_src}_{n_trg}_{args.dim}_{plan_index}_{peer_args['nprobe']}"
    if args.fresh and lists.exists():
        shutil.rmtree(lists)
    resumed = lists.exists() and any(lists.iterdir())
    b = run_peer("bounded", {**peer_args, "lists": str(lists), "out": str(work / "bounded.npz")})
    if resumed:
        print(f"bounded: RESUMED from {lists}: its time is that of the remaining steps only")
    bz = np.load(work / "bounded.npz")
    print(f"bounded: {b['seconds']:.1f} s, peak RSS {mib(b['peak_rss'])}, {b['pairs']:,} pairs, "
          f"index {b['factories']['trg']}; phases {b['phases']}")  # fmt: skip

    n_par = min(n_src, n_trg) // 10
    ps, pt = bz["pairs_src"], bz["pairs_trg"]
    planted = int(((ps == pt) & (ps < n_par)).sum())
    ex = exact_sample(src, trg, sample, args.k, bz["fwd_inds"])
    recall = recall_at_k(bz["fwd_inds"], ex["fwd_inds"])
    fwd_best = bz["fwd_inds"][np.arange(len(sample)), bz["fwd_scores"].argmax(axis=1)]
    agree = float((fwd_best == ex["best"]).mean()) if len(sample) else 1.0

    rows = [
        ("time per source sentence", f"{b['seconds'] / n_src * 1e6:,.1f} us"),
        ("time per mined pair", f"{b['seconds'] / max(1, b['pairs']) * 1e6:,.1f} us"),
        ("time per 1e9 candidate pairs (n_src*n_trg)",
         f"{b['seconds'] / (n_src * n_trg) * 1e9:,.2f} s"),
        ("peak RSS", mib(b["peak_rss"])),
        ("predicted / measured time",
         f"{planner.fmt_seconds(plan.total_seconds)} / {planner.fmt_seconds(b['seconds'])} "
         f"= {plan.total_seconds / max(b['seconds'], 1e-9):.2f}"),
        ("predicted / measured peak",
         f"{mib(max(plan.worker_peak_bytes, plan.driver_peak_bytes))} + runtime / "
         f"{mib(b['peak_rss'])}"),
        (f"recall@{args.k} vs exact ({len(sample)} sampled queries)", f"{recall:.4f}"),
        ("mined fwd pair = exact search's (sample)", f"{agree:.4f}"),
        ("planted pairs found", f"{planted:,} / {n_par:,}"),
    ]  # fmt: skip
    if n_src + n_trg <= args.in_memory_max:
        fac = None if b["factories"]["trg"] == "Flat" else b["factories"]["trg"]
        m = run_peer("in_memory", {**peer_args, "factory": fac, "out": str(work / "mem.npz")})
        mz = np.load(work / "mem.npz")
        same = (len(mz["pairs_src"]) == len(ps) and np.array_equal(mz["pairs_src"], ps)
                and np.array_equal(mz["pairs_trg"], pt))  # fmt: skip
        rows += [
            ("in-memory peer (mine_vectors)", f"{m['seconds']:.1f} s, peak {mib(m['peak_rss'])}"),
            ("bounded / in-memory time", f"{b['seconds'] / max(m['seconds'], 1e-9):.2f}"),
            ("bounded / in-memory peak RSS", f"{b['peak_rss'] / max(m['peak_rss'], 1):.2f}"),
            ("same pairs as in-memory", str(same)),
        ]  # fmt: skip
    else:
        rows.append(("in-memory peer", f"skipped: {n_src + n_trg:,} > --in-memory-max"))
    width = max(len(r[0]) for r in rows)
    print(f"== mining {n_src:,} x {n_trg:,} (dim {args.dim}, k {args.k}, mem {args.mem_gb} GB)")
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_peer"]:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
        res = PEERS[argv[1]](json.loads(argv[2]))
        res["peak_rss"] = peak_rss_bytes()
        print(json.dumps(res))
        return 0
    ap = argparse.ArgumentParser(prog="bench/scale_bench.py", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="stage", required=True)
    m = sub.add_parser("mining", help="bounded-memory mining against the in-memory path")
    m.add_argument("--n", type=int, default=100_000, help="source vectors")
    m.add_argument("--n-trg", type=int, help="target vectors (default --n)")
    m.add_argument("--dim", type=int, default=768)
    m.add_argument("--k", type=int, default=4)
    m.add_argument("--mem-gb", type=float, default=2.0, help="per-worker budget")
    m.add_argument("--index", default="auto", help="auto (the planner), a kind or a factory")
    m.add_argument("--nprobe", type=int)
    m.add_argument("--train-size", type=int, default=200_000)
    m.add_argument("--shards", type=int, help="default: the plan's")
    m.add_argument("--workers", type=int, default=1)
    m.add_argument("--sample", type=int, default=1000, help="queries checked against exact")
    m.add_argument("--in-memory-max", type=int, default=200_000,
                   help="run the in-memory peer when n_src + n_trg <= this")  # fmt: skip
    m.add_argument("--workdir", default="bench_out/scale_mining")
    m.add_argument("--fresh", action="store_true",
                   help="discard the finished steps a stopped run left in --workdir")  # fmt: skip
    m.set_defaults(func=cmd_mining)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
