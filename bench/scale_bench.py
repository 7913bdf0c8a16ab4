"""Scale benchmark: cost per unit and peak memory of a stage as its input grows.

    .venv/bin/python bench/scale_bench.py mining --n 100000 [--n-trg N] [--dim 768] [--k 4]
        [--mem-gb 2] [--index auto|flat|ivf_flat|ivf_sq8|ivf_pq|ivf_pqfs|opq_ivf_pq|FACTORY]
        [--nprobe 16] [--shards 1] [--workers 1] [--sample 1000] [--in-memory-max 200000]
        [--workdir bench_out/scale_mining] [--fresh]
    .venv/bin/python bench/scale_bench.py pairs [--base 10000] [--sizes 1 10 100]
        [--stages rules cds] [--cds-sizes 1 10] [--cds-model demo_out/cds_train]
        [--workdir bench_out/scale_pairs] [--json FILE]

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

``pairs``: the pair stages on mined-pair Parquet files of --base x --sizes DISTINCT pairs (the
mined-pairs schema, written as ``mining.output.write_pairs`` writes mined.parquet). Each pair
joins the first halves of one real Tatoeba/PUD pair's sentences with the second halves of
another pair of the same language (16 languages with English), so every pair is new text and
still a rough translation; every 10th pair is damaged in one of the ways the rules name (empty,
identical, too short or long, markup, numbers, repeats, copy, script, language). Each stage runs
through its real CLI as a child process on one thread (peak RSS = peak of the summed RSS of its
process tree, sampled every 0.2 s, or the process's kernel high-water mark at exit where higher:
the exact peak of a one-process stage, which sampling reads low on short per-batch spikes):

  rules  python -m filters rules     (every size in --sizes)
  cds    python -m filters cds-score (the sizes in --cds-sizes: 6-10 ms per pair on one core)

Printed per stage and size: pairs in, wall seconds, microseconds per pair (wall, and the
stage's own time from its stats.json, which leaves out interpreter start and imports), peak
RSS, disk written, and the ratios of time per pair and of peak RSS to the 1x run. The goal:
time-per-pair ratios within 1.2 and peak RSS flat. stats.json must balance and count every input
pair. Generated inputs are kept in --workdir and reused.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the project is imported inside functions, once sys.path below has it
    from mining.plan import Plan

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from filters.bitext.scripts import scripts_of  # noqa: E402  (after the sys.path line above)
from labse_common.langs import TATOEBA_TO_LID  # noqa: E402  (after the sys.path line above)

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
    from labse_common.embedding_store import EmbeddingStore, StoreWriter

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

    return MiningConfig(
        k=a["k"],
        index=a["index"],
        mem_gb=a["mem_gb"],
        nprobe=a["nprobe"],
        rerank=a["rerank"],
        train_size=a["train_size"],
        progress=False,
    )


def peer_bounded(a: dict) -> dict:
    from mining.bounded import Layout, mine_bounded

    t0 = time.perf_counter()
    r = mine_bounded(
        a["src"],
        a["trg"],
        _cfg(a),
        Layout(shards=a["shards"], workers=a["workers"], resume=True, workdir=a["lists"]),
    )
    secs = time.perf_counter() - t0
    nb = r.scored.neighbours
    q = np.asarray(a["sample_rows"], np.int64)
    np.savez(
        a["out"],
        pairs_src=r.pairs.src,
        pairs_trg=r.pairs.trg,
        fwd_inds=nb.fwd_inds[q],
        fwd_scores=r.scored.fwd_scores[q],
    )
    return {"seconds": secs, "phases": r.seconds, "factories": r.factories, "pairs": len(r.pairs)}


def peer_in_memory(a: dict) -> dict:
    from labse_common.embedding_store import load_vectors
    from labse_common.embedding_store import unit_rows as normalized
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
    from mining.knn import merge_topk, search_flat
    from mining.margin import neighbourhood_mean
    from mining.vector_side import VectorSide

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


Row = tuple[str, str]  # (measure, value) of the printed table


def cmd_mining(args: argparse.Namespace) -> int:
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    n_src, n_trg = args.n, args.n_trg or args.n
    t0 = time.perf_counter()
    src, trg = make_stores(work, n_src, n_trg, args.dim)
    print(
        f"data: {n_src:,} x {n_trg:,} vectors, dim {args.dim}, float16 stores "
        f"({time.perf_counter() - t0:.1f} s to make or reuse)"
    )
    plan, plan_index = _mining_plan(args, n_src, n_trg)
    rng = np.random.default_rng(1)
    sample = np.sort(rng.choice(n_src, size=min(args.sample, n_src), replace=False))
    peer_args = {
        "src": src,
        "trg": trg,
        "k": args.k,
        "index": plan_index,
        "mem_gb": args.mem_gb,
        "nprobe": args.nprobe or plan.nprobe or 16,
        "train_size": args.train_size,
        "rerank": args.rerank,
        "shards": args.shards or plan.shards,
        "workers": args.workers,
        "work": str(work),
        "sample_rows": sample.tolist(),
    }
    b, resumed = _run_bounded(args, work, (n_src, n_trg), peer_args)
    bz = np.load(work / "bounded.npz")
    rows = _cost_rows(args, plan, b, resumed) + _exactness_rows(args, peer_args, bz, sample)
    if n_src + n_trg <= args.in_memory_max:
        rows += _in_memory_rows(peer_args, work, b, bz, resumed)
    else:
        rows.append(("in-memory peer", f"skipped: {n_src + n_trg:,} > --in-memory-max"))
    width = max(len(r[0]) for r in rows)
    print(f"== mining {n_src:,} x {n_trg:,} (dim {args.dim}, k {args.k}, mem {args.mem_gb} GB)")
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")
    return 0


def _mining_plan(args: argparse.Namespace, n_src: int, n_trg: int) -> tuple[Plan, str]:
    """The planner's plan for these sizes (printed), and the index the peers build: the plan's
    kind for ``auto``, else the one named."""
    from mining import plan as planner

    kind = args.index if args.index in planner.KINDS else None
    plan = planner.make_plan(
        n_src,
        n_trg,
        args.dim,
        args.mem_gb,
        args.workers,
        k=args.k,
        train_size=args.train_size,
        itemsize=2,
        kind=kind,
        nprobe=args.nprobe,
        rerank=args.rerank,
    )
    if kind is None and args.index == "auto":
        plan_index = plan.kind
    else:
        plan_index = args.index
    print(
        f"plan: {plan.kind} ({plan.factory_trg}), {plan.shards} shard(s), nprobe "
        f"{plan.nprobe}; predicted {planner.fmt_seconds(plan.total_seconds)}, worker peak "
        f"{mib(plan.worker_peak_bytes)}, driver peak {mib(plan.driver_peak_bytes)}"
    )
    return plan, plan_index


def _run_bounded(
    args: argparse.Namespace, work: Path, sizes: tuple[int, int], peer_args: dict
) -> tuple[dict, bool]:
    """The bounded peer's result (its pairs in ``work/bounded.npz``), and whether it resumed
    the finished steps of a stopped run."""
    n_src, n_trg = sizes
    # Finished steps (trained indexes, shard lists, merged directions) are kept per size and
    # index under the workdir and reused by a rerun: a stopped run of hours continues. The
    # time printed is then that of the rest; --fresh starts over.
    lists = work / (
        f"lists_{n_src}_{n_trg}_{args.dim}_{peer_args['index']}_{peer_args['nprobe']}"
        + f"_r{args.rerank}"
    )
    if args.fresh and lists.exists():
        shutil.rmtree(lists)
    resumed = lists.exists() and any(lists.iterdir())
    b = run_peer("bounded", {**peer_args, "lists": str(lists), "out": str(work / "bounded.npz")})
    if resumed:
        print(f"bounded: RESUMED from {lists}: its time is that of the remaining steps only")
    print(
        f"bounded: {b['seconds']:.1f} s, peak RSS {mib(b['peak_rss'])}, {b['pairs']:,} pairs, "
        f"index {b['factories']['trg']}; phases {b['phases']}"
    )
    return b, resumed


def _cost_rows(args: argparse.Namespace, plan: Plan, b: dict, resumed: bool) -> list[Row]:
    """The bounded run's time and peak RSS per unit, and the plan's predictions against them."""
    from mining import plan as planner

    n_src, n_trg = args.n, args.n_trg or args.n
    # A resumed run timed only the steps left, and the steps of the stopped run were not all
    # recorded (it was killed mid-phase), so no whole-run time exists to compare with.
    partial = " (remaining steps only)" if resumed else ""
    return [
        ("time per source sentence" + partial, f"{b['seconds'] / n_src * 1e6:,.1f} us"),
        ("time per mined pair" + partial, f"{b['seconds'] / max(1, b['pairs']) * 1e6:,.1f} us"),
        (
            "time per 1e9 candidate pairs (n_src*n_trg)" + partial,
            f"{b['seconds'] / (n_src * n_trg) * 1e9:,.2f} s",
        ),
        ("peak RSS" + partial, mib(b["peak_rss"])),
        (
            "predicted / measured time",
            "not compared: the run was resumed, rerun with --fresh for a whole-run time"
            if resumed
            else f"{planner.fmt_seconds(plan.total_seconds)} / {planner.fmt_seconds(b['seconds'])} "
            f"= {plan.total_seconds / max(b['seconds'], 1e-9):.2f}",
        ),
        (
            "predicted / measured peak",
            f"{mib(max(plan.worker_peak_bytes, plan.driver_peak_bytes))} + runtime / "
            f"{mib(b['peak_rss'])}",
        ),
    ]


def _exactness_rows(args: argparse.Namespace, peer_args: dict, bz, sample: np.ndarray) -> list[Row]:
    """The bounded neighbour lists and mined pairs against exact search on the sample rows, and
    the planted pairs found."""
    from mining.knn import recall_at_k

    n_par = min(args.n, args.n_trg or args.n) // 10
    ps, pt = bz["pairs_src"], bz["pairs_trg"]
    planted = int(((ps == pt) & (ps < n_par)).sum())
    ex = exact_sample(peer_args["src"], peer_args["trg"], sample, args.k, bz["fwd_inds"])
    recall = recall_at_k(bz["fwd_inds"], ex["fwd_inds"])
    fwd_best = bz["fwd_inds"][np.arange(len(sample)), bz["fwd_scores"].argmax(axis=1)]
    agree = float((fwd_best == ex["best"]).mean()) if len(sample) else 1.0
    return [
        (f"recall@{args.k} vs exact ({len(sample)} sampled queries)", f"{recall:.4f}"),
        ("mined fwd pair = exact search's (sample)", f"{agree:.4f}"),
        ("planted pairs found", f"{planted:,} / {n_par:,}"),
    ]


def _in_memory_rows(peer_args: dict, work: Path, b: dict, bz, resumed: bool) -> list[Row]:
    """The in-memory peer (mine_vectors) with the bounded run's index, against the bounded
    run: time, peak RSS and whether the pairs are the same."""
    ps, pt = bz["pairs_src"], bz["pairs_trg"]
    fac = None if b["factories"]["trg"] == "Flat" else b["factories"]["trg"]
    m = run_peer("in_memory", {**peer_args, "factory": fac, "out": str(work / "mem.npz")})
    mz = np.load(work / "mem.npz")
    same = (
        len(mz["pairs_src"]) == len(ps)
        and np.array_equal(mz["pairs_src"], ps)
        and np.array_equal(mz["pairs_trg"], pt)
    )
    return [
        ("in-memory peer (mine_vectors)", f"{m['seconds']:.1f} s, peak {mib(m['peak_rss'])}"),
        (
            "bounded / in-memory time",
            "not compared: resumed" if resumed else f"{b['seconds'] / max(m['seconds'], 1e-9):.2f}",
        ),
        ("bounded / in-memory peak RSS", f"{b['peak_rss'] / max(m['peak_rss'], 1):.2f}"),
        ("same pairs as in-memory", str(same)),
    ]


# ---------------------------------------------------------------------------------------------
# pairs: the pair rules and CDS scoring on 1x .. 100x mined-pair files.

# Tatoeba/PUD codes -> the ISO 639-1 codes the miner writes into src_lang/trg_lang (the project's
# one language table; English is the pivot, not a source language here).
ISO1 = {code: lid for code, lid in TATOEBA_TO_LID.items() if code != "eng"}
NOISE_EVERY = 10  # every 10th pair is damaged: the rules have something to drop at every size
NOISE_KINDS = (
    "empty",
    "identical",
    "short",
    "ratio",
    "markup",
    "numbers",
    "repeats",
    "copy",
    "script",
    "lang",
)
# The script rule's own table (filters.bitext.scripts) says which sources are not Latin.
NON_LATIN = tuple(c for c in ISO1 if scripts_of(c) != ("Latin",))


def parallel_pools(data: Path) -> dict[str, list[tuple[str, str]]]:
    """Real translation pairs (xxx, eng) per language from tatoeba/ and pud/ (line i of one side
    translates line i of the other)."""
    pools: dict[str, set[tuple[str, str]]] = {}
    for sub in ("tatoeba", "pud"):
        for f in sorted((data / sub).glob("*.*-eng.eng")):
            lang = f.name.split(".")[1].split("-")[0]
            if lang not in ISO1:
                continue
            xs = f.with_suffix(f".{lang}").read_text(encoding="utf-8").splitlines()
            es = f.read_text(encoding="utf-8").splitlines()
            pools.setdefault(lang, set()).update(
                (x.strip(), e.strip())
                for x, e in zip(xs, es)
                if len(x.strip()) >= 8 and len(e.strip()) >= 8
            )
    if not pools:
        log.error("no pairs under %s (tatoeba/, pud/): this bench needs them (--data)", data)
        raise SystemExit(2)  # a wrong --data, like every usage error
    return {k: sorted(v) for k, v in pools.items()}


class PairMaker:
    """Distinct pairs: the first halves of one pool pair joined to the second halves of another
    (both sides cut the same way, so the result stays a rough translation)."""

    def __init__(self, pools: dict[str, list[tuple[str, str]]], seed: int) -> None:
        from bench.scale_corpus import _halves

        self.rng = np.random.default_rng(seed)
        self.langs = sorted(pools)
        self.split = {
            k: [(_halves(x, k), _halves(e, "eng")) for x, e in v] for k, v in pools.items()
        }
        self.seen: set[tuple[str, str]] = set()

    def pair(self, lang: str) -> tuple[str, str]:
        from bench.scale_corpus import _NO_SPACE

        h = self.split[lang]
        while True:  # a repeat of a pair already made (same halves) is drawn again: all distinct
            i, j = self.rng.integers(0, len(h), 2)
            (xa, ea), (xb, eb) = h[i], h[j]
            x = xa[0] + xb[1] if lang in _NO_SPACE else f"{xa[0]} {xb[1]}"
            p = (x, f"{ea[0]} {eb[1]}")
            if p not in self.seen:
                self.seen.add(p)
                return p

    def noisy(self, kind: str, lang: str, k: int) -> tuple[str, str, str]:
        """(src, trg, declared source language) damaged as ``kind``; ``k`` keeps it distinct."""
        x, e = self.pair(lang)
        if kind == "empty":
            return x, " ", lang
        if kind == "identical":
            return e, e, lang
        if kind == "short":
            return "Ok", e, lang  # 2 characters: too_short_src (the target keeps it distinct)
        if kind == "ratio":  # the target runs on with three more sentences
            return x, " ".join([e, *(self.pair("deu")[1] for _ in range(3))]), lang
        if kind == "markup":
            return f'<a href="https://x{k}.example.org/">https://x{k}.example.org/</a>', e, lang
        if kind == "numbers":
            return f"{x} {1000 + k % 9000}", f"{e} {20000 + k % 70000}", lang
        if kind == "repeats":
            return f"{x} {'jaja ' * 6}{k}", e, lang
        if kind == "copy":  # the English side copied into the source, its last word changed
            return " ".join([*e.split()[:-1], f"x{k}"]), e, lang
        if kind == "script":  # the declared language's script is not the text's
            return self.pair("fra" if lang in NON_LATIN else "rus")[0], e, lang
        # "lang": Spanish (or Italian) text declared German (or French): LID names another
        return self.pair("spa" if lang != "spa" else "ita")[0], e, "deu" if lang != "deu" else "fra"


def write_mined_pairs(
    path: Path, n: int, seed: int, pools: dict[str, list[tuple[str, str]]]
) -> dict:
    """``n`` distinct pairs as one mined.parquet (the required mined-pair columns, by decreasing
    margin, written by ``pq.write_table`` with its default row groups, as the miner writes)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from labse_common.formats import MINED_PAIR_REQUIRED, MINED_PAIR_SCHEMA, conform

    maker = PairMaker(pools, seed)
    src, trg, sl = [], [], []
    noise = 0
    for i in range(n):
        lang = maker.langs[i % len(maker.langs)]
        if i % NOISE_EVERY == NOISE_EVERY - 1:
            kind = NOISE_KINDS[noise % len(NOISE_KINDS)]
            while True:  # a damaged pair reuses pool text (a target alone): redraw a repeat
                x, e, decl = maker.noisy(kind, lang, noise)
                if (x, e) not in maker.seen:
                    break
            maker.seen.add((x, e))
            lang = decl
            noise += 1
        else:
            x, e = maker.pair(lang)
        src.append(x)
        trg.append(e)
        sl.append(ISO1[lang])
    # Every pair went through ``maker.seen``; checked again on the file as written.
    distinct = len(set(zip(src, trg)))
    if distinct != n:
        raise RuntimeError(f"generated {n} pairs, only {distinct} distinct")
    rng = np.random.default_rng(seed + 1)
    t = pa.table(
        {
            "src": src,
            "trg": trg,
            "src_lang": sl,
            "trg_lang": ["en"] * n,
            "margin": np.sort(rng.uniform(1.0, 1.6, n).astype(np.float32))[::-1],
            "src_id": [str(i) for i in range(n)],
            "trg_id": [str(i) for i in rng.permutation(n)],
            "cosine": rng.uniform(0.55, 0.95, n).astype(np.float32),
        }
    )
    t = conform(t, MINED_PAIR_SCHEMA, MINED_PAIR_REQUIRED)
    path.mkdir(parents=True, exist_ok=True)
    f = path / "mined.parquet"
    tmp = f.with_name(f.name + ".tmp")
    pq.write_table(t, tmp)  # a stopped run leaves no half input under the final name
    tmp.replace(f)
    return {
        "pairs": n,
        "noise_pairs": noise,
        "bytes": f.stat().st_size,
        "row_groups": pq.ParquetFile(f).metadata.num_row_groups,
    }


def pair_input(work: Path, n: int, seed: int, pools_of: Callable[[], dict]) -> Path:
    """The mined.parquet of ``n`` pairs in ``work`` (made once, reused)."""
    inp = work / f"pairs-in-{n}"
    meta = inp / "_meta.json"
    if not meta.exists():
        t0 = time.perf_counter()
        info = write_mined_pairs(inp, n, seed + n, pools_of())
        meta.write_text(json.dumps(info))
        log.info("input of %d pairs written in %.0f s: %s", n, time.perf_counter() - t0, info)
    return inp / "mined.parquet"


def stage_command(stage: str, inp: Path, out: Path, args: argparse.Namespace) -> list[str]:
    """The stage's real CLI on one thread (the core is the bench's own taskset, inherited)."""
    base = [sys.executable, "-m", "filters"]
    rows = ["--batch-rows", str(args.batch_rows)] if args.batch_rows else []
    if stage == "rules":
        cmd = [*base, "rules", "--pairs", str(inp), "--output", str(out), "--overwrite", *rows]
        return cmd + (["--write-dropped"] if args.write_dropped else [])
    return [
        *base,
        "cds-score",
        "--model",
        str(args.cds_model),
        "--pairs",
        str(inp),
        "--output",
        str(out),
        "--overwrite",
        "--device",
        "cpu",
        "--threads",
        "1",
        *rows,
        "--set",
        "progress=false",
    ]


def wait_for_model(model: Path, timeout_s: float) -> None:
    """Wait for ``model/cds.json`` only while another run is writing the folder (its output
    claim is there, e.g. the demo's cds_train); a folder nobody writes fails at once (exit 2)."""
    t0 = time.perf_counter()
    while not (model / "cds.json").exists():
        busy = (model / "_CLAIM.json").exists()
        if not busy or time.perf_counter() - t0 > timeout_s:
            log.error(
                "--cds-model %s: no cds.json%s; train one with python -m filters cds-train",
                model,
                f" after {timeout_s:.0f} s" if busy else "",
            )
            raise SystemExit(2)
        log.info("waiting for %s/cds.json (a CDS model being trained)", model)
        time.sleep(20)


def run_pair_stage(
    stage: str, x: int, n: int, inp: Path, work: Path, args: argparse.Namespace
) -> dict:
    from bench.scale_corpus import dir_bytes, run_measured
    from labse_common.stats import check_balanced

    out = work / f"{stage}-out-{n}"
    log.info("%s on %d pairs ...", stage, n)
    m = run_measured(stage_command(stage, inp, out, args))
    st = json.loads((out / "stats.json").read_text())
    c = st["counts"]["pairs"]
    problems = check_balanced(st)
    if c["in"] != n:
        problems.append(f"pairs in {c['in']} != {n} generated")
    if stage == "cds" and c["out"] != n:
        problems.append(f"pairs scored {c['out']} != {n}")
    if problems:
        raise SystemExit(f"{stage} {n}: stats.json of {out} does not add up: {problems}")
    # The stage's own clock (stats.json) leaves out interpreter start and imports, which at 1x
    # are a visible part of the wall time and make the larger runs look cheaper per pair.
    own = float(st.get("seconds") or 0.0)
    return {
        "stage": stage,
        "x": x,
        "pairs": n,
        "kept": c["out"],
        **m,
        "stage_seconds": own,
        "us_per_pair": 1e6 * m["seconds"] / n,
        "us_per_pair_stage": 1e6 * own / n,
        "disk_written": dir_bytes(out),
    }


def cmd_pairs(args: argparse.Namespace) -> int:
    # One thread in every child: OMP/MKL read these at start (cds-score also sets torch from
    # --threads 1). The core is the caller's taskset, which the children inherit.
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = "1"
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    pools: list[dict] = []

    def pools_of() -> dict:  # read once, and only when an input must be made
        if not pools:
            pools.append(parallel_pools(Path(args.data)))
        return pools[0]

    rows: list[dict] = []
    for stage in args.stages:
        if stage == "cds":
            wait_for_model(Path(args.cds_model), args.model_wait)
        for x in sorted(args.sizes if stage == "rules" else args.cds_sizes):
            n = args.base * x
            inp = pair_input(work, n, args.seed, pools_of)
            rows.append(run_pair_stage(stage, x, n, inp, work, args))
            log.info("%s %dx: %s", stage, x, rows[-1])
    for stage in args.stages:
        mine = [r for r in rows if r["stage"] == stage]
        base = min(mine, key=lambda r: r["x"])  # ratios to the smallest size run
        for r in mine:
            r["ratio_us_per_pair"] = r["us_per_pair"] / base["us_per_pair"]
            r["ratio_us_per_pair_stage"] = r["us_per_pair_stage"] / max(
                base["us_per_pair_stage"], 1e-9
            )
            r["ratio_peak_rss"] = r["peak_rss"] / base["peak_rss"]
    hdr = (
        f"{'stage':<6}{'x':>5}{'pairs in':>11}{'kept':>11}{'wall s':>9}{'stage s':>9}"
        f"{'us/pair':>9}{'stage us/pair':>15}{'peak RSS MiB':>14}{'disk MiB':>10}"
        f"{'us/pair ratio':>15}{'stage ratio':>13}{'RSS ratio':>11}"
    )
    lines = [hdr]
    for r in rows:
        lines.append(
            f"{r['stage']:<6}{r['x']:>5}{r['pairs']:>11,}{r['kept']:>11,}"
            f"{r['seconds']:>9.1f}{r['stage_seconds']:>9.1f}{r['us_per_pair']:>9.1f}"
            f"{r['us_per_pair_stage']:>15.1f}{r['peak_rss'] / 2**20:>14,.0f}"
            f"{r['disk_written'] / 2**20:>10.1f}{r['ratio_us_per_pair']:>15.2f}"
            f"{r['ratio_us_per_pair_stage']:>13.2f}{r['ratio_peak_rss']:>11.2f}"
        )
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_peer"]:
        return _peer_main(argv[1], argv[2])
    ap = argparse.ArgumentParser(prog="bench/scale_bench.py", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="stage", required=True)
    _add_mining_parser(sub)
    _add_pairs_parser(sub)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    return args.func(args)


def _peer_main(name: str, peer_args: str) -> int:
    """``scale_bench.py _peer NAME JSON``: one peer in this process; its result, with this
    process's peak RSS, is the last line of stdout."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    res = PEERS[name](json.loads(peer_args))
    res["peak_rss"] = peak_rss_bytes()
    print(json.dumps(res))
    return 0


def _add_mining_parser(sub: argparse._SubParsersAction) -> None:
    from mining.plan import RERANK

    m = sub.add_parser("mining", help="bounded-memory mining against the in-memory path")
    m.add_argument("--n", type=int, default=100_000, help="source vectors")
    m.add_argument("--n-trg", type=int, help="target vectors (default --n)")
    m.add_argument("--dim", type=int, default=768)
    m.add_argument("--k", type=int, default=4)
    m.add_argument("--mem-gb", type=float, default=2.0, help="per-worker budget")
    m.add_argument("--index", default="auto", help="auto (the planner), a kind or a factory")
    m.add_argument("--nprobe", type=int)
    m.add_argument(
        "--rerank",
        type=int,
        default=RERANK,
        help="mining.rerank: k*rerank approximate candidates re-scored exactly",
    )
    m.add_argument("--train-size", type=int, default=200_000)
    m.add_argument("--shards", type=int, help="default: the plan's")
    m.add_argument("--workers", type=int, default=1)
    m.add_argument("--sample", type=int, default=1000, help="queries checked against exact")
    m.add_argument(
        "--in-memory-max",
        type=int,
        default=200_000,
        help="run the in-memory peer when n_src + n_trg <= this",
    )
    m.add_argument("--workdir", default="bench_out/scale_mining")
    m.add_argument(
        "--fresh",
        action="store_true",
        help="discard the finished steps a stopped run left in --workdir",
    )
    m.set_defaults(func=cmd_mining)


def _add_pairs_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("pairs", help="pair rules and CDS scoring on 1x..100x mined-pair files")
    p.add_argument("--base", type=int, default=10_000, help="pairs at 1x")
    p.add_argument(
        "--sizes",
        nargs="+",
        type=int,
        default=[1, 10, 100],
        help="multiples of --base the rules run on",
    )
    p.add_argument(
        "--stages",
        nargs="+",
        choices=["rules", "cds"],
        default=["rules", "cds"],
        help="pair stages to measure",
    )
    p.add_argument(
        "--cds-sizes",
        nargs="+",
        type=int,
        default=[1, 10],
        help="multiples of --base CDS scores (100 = 1M pairs: ~2 h on one core)",
    )
    p.add_argument(
        "--cds-model",
        default="demo_out/cds_train",
        help="CDS model folder (cds-train output; default: make demo's)",
    )
    p.add_argument(
        "--model-wait",
        type=float,
        default=1200.0,
        help="seconds to wait for --cds-model/cds.json while a run is training it",
    )
    p.add_argument(
        "--batch-rows",
        type=int,
        default=0,
        help="--batch-rows of both commands (pairs read and written per chunk; "
        "default: each command's own, 5000 rules, 4096 cds-score)",
    )
    p.add_argument(
        "--write-dropped",
        action="store_true",
        help="rules also write the dropped pairs (counted in disk written)",
    )
    p.add_argument(
        "--data",
        default=str(REPO.parent / "shared" / "data"),
        help="../shared/data (tatoeba/, pud/)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the generated pairs")
    p.add_argument(
        "--workdir",
        default="bench_out/scale_pairs",
        help="generated inputs (kept, reused) and the stage outputs",
    )
    p.add_argument("--json", help="also write the rows here")
    p.set_defaults(func=cmd_pairs)


if __name__ == "__main__":
    sys.exit(main())
