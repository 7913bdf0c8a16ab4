"""Mining past RAM: kNN both ways in bounded memory, sharded by base rows, then the margin.

Neither side is ever held whole. A side is read from its embedding store (or ``.npy``) in
chunks of rows, each memory-mapped, copied to float32 unit rows and unmapped again, so the
resident set holds one chunk, not the file (:mod:`mining.vector_side`). Only the neighbour
lists (rows x k) are kept.

Exact search (``index="flat"``) is sharded by *target* rows: a shard task walks source chunks
(outer loop) against its target rows in blocks (inner loop); each block pair serves both
directions, so a task returns the source rows' top-k among its targets (a partial list) and
its target rows' complete top-k among all sources. Approximate search (an IVF index, any FAISS
factory string) trains once per direction on a sample of the base side, then each shard task
adds its base rows to a copy of the trained index and searches every query chunk: partial
candidate lists with global ids. Tasks (:mod:`mining.shard_tasks`) write their lists to files in a work folder (so they
run the same in a process pool or on other machines), and the merge takes the top-k over the
shards per query chunk; approximate candidates are then re-scored by their exact cosine, as
:func:`mining.knn.search_index` does. The merged lists equal a single pass (one shard) on the
same neighbours: top-k of a union is the top-k of the per-shard top-k lists.

The margin and the retrieval are the in-memory path's own functions (:func:`mining.margin.score`,
:func:`mining.retrieval.retrieve`) on the merged lists, so on exact search the mined pairs are
those of :func:`mining.mine.mine_vectors`.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from labse_common.errors import UsageError
from labse_common.sections.mining import MiningConfig
from labse_common.stats import StageCounter
from labse_common.threads import usable_cpus
from mining import plan as planner
from mining.faiss_lib import faiss
from mining.knn import (
    SAMPLE_SEED,
    Neighbours,
)
from mining.margin import Scored, score
from mining.retrieval import Pairs, retrieve
from mining.shard_tasks import (
    ShardTask,
    ann_task,
    flat_task,
    merge_shard_lists,
    rescore,
)
from mining.vector_side import VectorSide, even_bounds

log = logging.getLogger(__name__)


@dataclass
class Layout:
    """How the work is cut: shards per direction, worker processes, chunk sizes, work folder."""

    shards: int = 1
    workers: int = 1
    chunk_rows: int | None = None  # query rows per FAISS call (default from mem_gb)
    block_rows: int | None = None  # base rows per exact block (default from mem_gb)
    merge_rows: int | None = None  # query rows per merge/re-score step (default from mem_gb)
    workdir: str | None = None  # where shard tasks write their lists (default: a temp folder)
    threads: int | None = None  # FAISS threads per worker (default: cores / workers)
    # Keep finished work in ``workdir`` (trained indexes, shard lists, merged directions) and
    # reuse it, so a run of hours that is stopped continues where it was: same settings only.
    resume: bool = False
    # Runs a list of shard tasks, ``runner(fn, tasks)``, and returns their ``out`` dicts once
    # every list file is written (the Beam job: one element per task); default: a process pool
    # of ``workers``. The tasks carry only paths and numbers; ``workdir`` must be a folder
    # every task's process can open.
    runner: Callable[[Callable, Sequence], list] | None = None


@dataclass
class BoundedResult:
    pairs: Pairs
    scored: Scored
    factories: dict[str, str]
    seconds: dict[str, float] = field(default_factory=dict)


def _run_tasks(fn, tasks: Sequence[ShardTask], layout: Layout) -> list[dict[str, str]]:
    if layout.runner is not None:
        return list(layout.runner(fn, list(tasks)))
    workers = layout.workers
    if workers <= 1 or len(tasks) <= 1:
        return [fn(t) for t in tasks]
    # "spawn": forking a parent whose FAISS/OpenMP threads already ran can deadlock the child.
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(workers, len(tasks)), mp_context=ctx) as pool:
        return list(pool.map(fn, tasks))


def _index_spec(spec: str, n_src: int, n_trg: int, dim: int, cfg: MiningConfig, layout: Layout):
    """``(kind, factory_trg, factory_src, nprobe)``: the registry's resolution
    (:func:`mining.plan.index_choice`), for this layout's workers."""
    return planner.index_choice(spec, n_src, n_trg, dim, cfg, max(1, layout.workers))


def _train(base: VectorSide, factory: str, knn_cfg, path: str, resume: bool = False) -> None:
    if resume and os.path.exists(path):
        log.info("reusing the trained index %s", path)
        return
    index = faiss.index_factory(base.dim, factory, faiss.METRIC_INNER_PRODUCT)
    if not index.is_trained:
        sample = base.sample(knn_cfg.train_size, SAMPLE_SEED)
        log.info("training %s on %d of %d vectors", factory, len(sample), len(base))
        index.train(sample)
        del sample
    faiss.write_index(index, path + ".part")
    os.replace(path + ".part", path)  # whole or absent: a resumed run may trust it


def check_workdir(path: str, flag: str) -> None:
    """A work folder that is a file (or under one) is the user's mistake: one line, exit 2."""
    p = os.path.abspath(path)
    while p and not os.path.exists(p):
        parent = os.path.dirname(p)
        if parent == p:
            return
        p = parent
    if not os.path.isdir(p):
        raise UsageError(f"{flag} {path}: {p} is a file, not a folder")
    if not os.access(p, os.W_OK):
        raise UsageError(f"{flag} {path}: {p} is not writable")


def bounded_neighbours(
    src: VectorSide, trg: VectorSide, cfg: MiningConfig, layout: Layout | None = None
) -> tuple[Neighbours, dict[str, str], dict[str, float]]:
    """k-NN lists both ways (as :func:`mining.mine.neighbours`), in bounded memory and shards.

    Returns the lists, the factory strings used per side and the seconds of each phase."""
    layout = layout or Layout()
    if layout.shards < 1 or layout.workers < 1:
        raise ValueError("shards and workers must be >= 1")
    if len(src) and len(trg) and src.dim != trg.dim:
        raise ValueError(f"dimension mismatch: source {src.dim} vs target {trg.dim}")
    kcfg = cfg
    dim = src.dim
    kind, f_trg, f_src, nprobe = _index_spec(kcfg.index, len(src), len(trg), dim, cfg, layout)
    kk = cfg.k if kind == "flat" else cfg.k * max(1, kcfg.rerank)
    sizes = planner.chunk_sizes(
        kcfg.mem_gb, dim, cfg.k, kk, layout.shards, nprobe or 16, max(src.itemsize, trg.itemsize)
    )
    chunk = layout.chunk_rows or sizes.query_rows
    block = layout.block_rows or sizes.block_rows
    merge_rows = layout.merge_rows or sizes.merge_rows
    # FAISS's OpenMP pool sized to the CPUs this process may use (affinity, cgroup quota),
    # divided among the worker processes; one process gets all of them.
    threads = layout.threads or max(1, usable_cpus() // max(1, layout.workers))
    secs: dict[str, float] = {}
    tmp = None
    if layout.workdir:
        work = layout.workdir
        check_workdir(work, "workdir")
        os.makedirs(work, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="bounded-mining-")
        work = tmp.name
    try:
        if kind == "flat":
            nb = _flat_neighbours(
                src, trg, cfg, layout, work, chunk, block, merge_rows, threads, secs
            )
        else:
            nb = _ann_neighbours(
                src,
                trg,
                cfg,
                layout,
                work,
                (f_trg, f_src),
                nprobe,
                kk,
                chunk,
                block,
                merge_rows,
                threads,
                secs,
            )
    finally:
        if tmp is not None:
            tmp.cleanup()
    return nb, {"trg": f_trg, "src": f_src}, secs


def _flat_neighbours(src, trg, cfg, layout, work, chunk, block, merge_rows, threads, secs):
    t = time.perf_counter()
    tasks = []
    for w, (t0, t1) in enumerate(even_bounds(0, len(trg), -(-len(trg) // layout.shards) or 1)):
        out = {
            n: os.path.join(work, f"flat_{w:04d}_{n}.npy")
            for n in ("fwd_sims", "fwd_inds", "bwd_sims", "bwd_inds", "done")
        }
        tasks.append(
            ShardTask(
                "flat",
                "both",
                src.path,
                src.rows,
                trg.path,
                trg.rows,
                (t0, t1),
                cfg.k,
                cfg,
                chunk,
                block,
                out,
                threads=threads,
                resume=layout.resume,
            )
        )
    outs = _run_tasks(flat_task, tasks, layout)
    secs["search"] = time.perf_counter() - t
    t = time.perf_counter()
    k_f, k_b = min(cfg.k, len(trg)), min(cfg.k, len(src))
    fs = np.full((len(src), k_f), -np.inf, np.float32)
    fi = np.full((len(src), k_f), -1, np.int64)
    if outs:
        parts = [(o["fwd_sims"], o["fwd_inds"]) for o in outs]
        for q0, q1, s, i in merge_shard_lists(parts, len(src), k_f, merge_rows):
            fs[q0:q1], fi[q0:q1] = s, i
    bs = np.full((len(trg), k_b), -np.inf, np.float32)
    bi = np.full((len(trg), k_b), -1, np.int64)
    for task, o in zip(tasks, outs):
        t0, t1 = task.base_range
        bs[t0:t1], bi[t0:t1] = np.load(o["bwd_sims"]), np.load(o["bwd_inds"])
    secs["merge"] = time.perf_counter() - t
    if not layout.resume:  # merged: free the disk (a given workdir is not removed)
        for o in outs:
            for p in o.values():
                if os.path.exists(p):
                    os.remove(p)
    return Neighbours(fs, fi, bs, bi)


def _ann_direction(
    queries,
    base,
    factory,
    name,
    cfg,
    layout,
    work,
    nprobe,
    kk,
    chunk,
    block,
    merge_rows,
    threads,
    secs,
):
    k = min(cfg.k, len(base))
    sims = np.full((len(queries), k), -np.inf, np.float32)
    inds = np.full((len(queries), k), -1, np.int64)
    if len(queries) == 0 or len(base) == 0:
        return sims, inds
    merged = os.path.join(work, f"{name}_merged.npz")
    if layout.resume and os.path.exists(merged):
        with np.load(merged) as z:
            log.info("reusing the merged %s lists %s", name, merged)
            return z["sims"], z["inds"]
    t = time.perf_counter()
    trained = os.path.join(work, f"{name}_trained.faissindex")
    _train(base, factory, cfg, trained, layout.resume)
    secs[f"train_{name}"] = time.perf_counter() - t
    t = time.perf_counter()
    shard = -(-len(base) // layout.shards)
    tasks = []
    for w, (b0, b1) in enumerate(even_bounds(0, len(base), shard)):
        out = {n: os.path.join(work, f"{name}_{w:04d}_{n}.npy") for n in ("sims", "inds", "done")}
        tasks.append(
            ShardTask(
                "ann",
                name,
                queries.path,
                queries.rows,
                base.path,
                base.rows,
                (b0, b1),
                kk,
                cfg,
                chunk,
                block,
                out,
                trained,
                nprobe,
                threads,
                layout.resume,
            )
        )
    outs = _run_tasks(ann_task, tasks, layout)
    secs[f"search_{name}"] = time.perf_counter() - t
    t = time.perf_counter()
    width = min(kk, len(base))
    parts = [(o["sims"], o["inds"]) for o in outs]
    for q0, q1, _, cand in merge_shard_lists(parts, len(queries), width, merge_rows):
        sims[q0:q1], inds[q0:q1] = rescore(
            queries, base, q0, q1, cand, k, threads * max(1, layout.workers)
        )
    secs[f"merge_rescore_{name}"] = time.perf_counter() - t
    if layout.resume:
        np.savez(merged + ".part.npz", sims=sims, inds=inds)
        os.replace(merged + ".part.npz", merged)
    for o in outs:  # the lists are merged: free the disk
        for p in o.values():
            os.remove(p)
    return sims, inds


def _ann_neighbours(
    src, trg, cfg, layout, work, factories, nprobe, kk, chunk, block, merge_rows, threads, secs
):
    f_trg, f_src = factories
    args = (cfg, layout, work, nprobe, kk, chunk, block, merge_rows, threads, secs)
    fs, fi = _ann_direction(src, trg, f_trg, "fwd", *args)
    bs, bi = _ann_direction(trg, src, f_src, "bwd", *args)
    return Neighbours(fs, fi, bs, bi)


def mine_bounded(
    src: str | os.PathLike | VectorSide,
    trg: str | os.PathLike | VectorSide,
    cfg: MiningConfig,
    layout: Layout | None = None,
    counter: StageCounter | None = None,
) -> BoundedResult:
    """Mine pairs between two stores (or ``.npy`` files) without holding either matrix.

    ``cfg.index``: ``flat`` (exact), ``auto`` (the planner's choice for the sizes and
    ``cfg.mem_gb``), or any other name of the index registry (:mod:`mining.indexes`).
    Pair indices are compact rows of each side (global rows unless ``rows`` were selected).
    """
    if cfg.k < 1:
        raise ValueError(f"k must be >= 1, got {cfg.k}")
    src = src if isinstance(src, VectorSide) else VectorSide(src)
    trg = trg if isinstance(trg, VectorSide) else VectorSide(trg)
    nb, factories, secs = bounded_neighbours(src, trg, cfg, layout)
    t = time.perf_counter()
    sc = score(nb, cfg.margin)
    pairs = retrieve(
        sc.fwd_scores, nb.fwd_inds, sc.bwd_scores, nb.bwd_inds, cfg.mode, cfg.threshold, counter
    )
    secs["margin_retrieval"] = time.perf_counter() - t
    return BoundedResult(pairs, sc, factories, {a: round(b, 3) for a, b in secs.items()})
