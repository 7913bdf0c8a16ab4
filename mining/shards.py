"""Sharded exact kNN for corpora larger than memory, optionally in parallel processes.

Source and target are split into shards (the shards of an embedding store, or row ranges of
one ``.npy``). A task takes one query shard and walks every shard of the other side, merging
neighbour lists across them, so a process never holds more than two shards. Tasks only pass
file paths and row numbers, never vectors, so they run the same in a process pool or on a
cluster (each task is independent; only the small (rows, k) lists come back).
"""

from __future__ import annotations

import dataclasses
import io
import logging
import multiprocessing
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from labse_common.embedding_store import (
    MANIFEST,
    EmbeddingStore,
    exists,
    load_npy,
    read_bytes,
    write_bytes,
)
from labse_common.output_dir import is_remote, join
from labse_common.sections.mining import MiningConfig
from mining.embeddings import normalized
from mining.knn import Neighbours, merge_topk, search_flat

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShardRef:
    """Rows ``[start, stop)`` of the ``.npy`` at ``path``; ``offset`` = global row of ``start``."""

    path: str
    start: int
    stop: int
    offset: int


def shard_refs(path: str | os.PathLike, shard_rows: int | None = None) -> list[ShardRef]:
    """Shards of a store directory, or a ``.npy`` cut into ``shard_rows`` row ranges."""
    p = os.fspath(path)
    refs: list[ShardRef] = []
    if exists(join(p, MANIFEST)) or (not is_remote(p) and os.path.isdir(p)):
        store, offset = EmbeddingStore(p), 0
        for i, s in enumerate(store.shards):
            file = store.shard_path(i)
            step = shard_rows or max(s.rows, 1)
            for a in range(0, s.rows, step):
                refs.append(ShardRef(file, a, min(a + step, s.rows), offset + a))
            offset += s.rows
        return refs
    n = len(load_npy(p))
    step = shard_rows or max(n, 1)
    return [ShardRef(p, a, min(a + step, n), a) for a in range(0, n, step)]


def reps_in(ref: ShardRef, reps: np.ndarray) -> tuple[np.ndarray, int]:
    """The selected global rows ``reps`` (sorted) that fall in ``ref``, and the position of the
    first one in ``reps``: all a task needs, so it never carries the whole corpus's rows."""
    lo, hi = np.searchsorted(reps, [ref.offset, ref.offset + ref.stop - ref.start])
    return reps[lo:hi], int(lo)


def load_slice(ref: ShardRef, rows: np.ndarray, lo: int) -> tuple[np.ndarray, np.ndarray]:
    """Unit vectors of global ``rows`` (from :func:`reps_in`) and their compact indices."""
    arr = load_npy(ref.path)  # mmap locally, streamed from object stores
    local = rows - ref.offset + ref.start
    return normalized(arr[local]), np.arange(lo, lo + len(rows), dtype=np.int64)


def _load(ref: ShardRef, reps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unit vectors of the selected global rows ``reps`` that fall in ``ref``, and their
    positions in ``reps`` (= compact indices)."""
    return load_slice(ref, *reps_in(ref, reps))


def search_pair(
    q_ref: ShardRef,
    q_rows: np.ndarray,
    q_lo: int,
    b_ref: ShardRef,
    b_rows: np.ndarray,
    b_lo: int,
    k_all: int,
    cfg: MiningConfig,
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Top-``k_all`` of one query shard in one base shard: ``(q_pos, sims, inds)`` with compact
    indices, or None when either side is empty. Fold the parts of one query shard with
    :func:`merge_parts` in base-shard order to get exactly what :func:`_task` returns."""
    if len(q_rows) == 0 or len(b_rows) == 0 or k_all == 0:
        return None
    cfg = dataclasses.replace(cfg, progress=False)
    xq, q_pos = load_slice(q_ref, q_rows, q_lo)
    xb, b_pos = load_slice(b_ref, b_rows, b_lo)
    s, i = search_flat(xq, xb, k_all, cfg)
    return q_pos, s, b_pos[i]


def merge_parts(
    q_pos: np.ndarray, k_all: int, parts: Sequence[tuple[np.ndarray, np.ndarray] | None]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge per-base-shard ``(sims, inds)`` of one query shard (in base-shard order)."""
    sims = np.full((len(q_pos), k_all), -np.inf, np.float32)
    inds = np.full((len(q_pos), k_all), -1, np.int64)
    for part in parts:
        if part is not None:
            sims, inds = merge_topk(sims, inds, part[0], part[1], k_all)
    return q_pos, sims, inds


def save_neighbour_part(
    path: str | os.PathLike, q_pos: np.ndarray, sims: np.ndarray, inds: np.ndarray
) -> None:
    """One query shard's merged lists, as written by a distributed (Beam) run (any filesystem)."""
    buf = io.BytesIO()
    np.savez(buf, q_pos=q_pos, sims=sims, inds=inds)
    write_bytes(os.fspath(path), buf.getvalue())


def load_neighbour_parts(
    paths: Sequence[str | os.PathLike], n_queries: int, k_all: int
) -> tuple[np.ndarray, np.ndarray]:
    """Assemble one direction's (sims, inds) from its query-shard files; every query row must be
    covered exactly once."""
    sims = np.full((n_queries, k_all), -np.inf, np.float32)
    inds = np.full((n_queries, k_all), -1, np.int64)
    seen = np.zeros(n_queries, bool)
    for p in paths:
        with np.load(io.BytesIO(read_bytes(os.fspath(p)))) as z:
            q_pos = z["q_pos"]
            if seen[q_pos].any():
                raise ValueError(f"{p}: query rows covered twice")
            seen[q_pos] = True
            sims[q_pos], inds[q_pos] = z["sims"], z["inds"]
    if not seen.all():
        raise ValueError(f"{int((~seen).sum())} query rows missing from the neighbour files")
    return sims, inds


def _task(args) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Top-k of one query shard against every base shard (merged)."""
    q_ref, q_reps, b_refs, b_reps, k, cfg = args
    cfg = dataclasses.replace(cfg, progress=False)  # one bar per direction is enough
    xq, q_pos = _load(q_ref, q_reps)
    k_all = min(k, len(b_reps))
    sims = np.full((len(xq), k_all), -np.inf, np.float32)
    inds = np.full((len(xq), k_all), -1, np.int64)
    if len(xq) == 0 or k_all == 0:
        return q_pos, sims, inds
    for b_ref in b_refs:
        xb, b_pos = _load(b_ref, b_reps)
        if len(xb) == 0:
            continue
        s, i = search_flat(xq, xb, k_all, cfg)
        sims, inds = merge_topk(sims, inds, s, b_pos[i], k_all)
    return q_pos, sims, inds


def _direction(
    q_refs: Sequence[ShardRef],
    q_reps: np.ndarray,
    b_refs: Sequence[ShardRef],
    b_reps: np.ndarray,
    k: int,
    cfg: MiningConfig,
    pool: ProcessPoolExecutor | None,
    desc: str,
) -> tuple[np.ndarray, np.ndarray]:
    k_all = min(k, len(b_reps))
    sims = np.full((len(q_reps), k_all), -np.inf, np.float32)
    inds = np.full((len(q_reps), k_all), -1, np.int64)
    tasks = [(r, q_reps, list(b_refs), b_reps, k, cfg) for r in q_refs]
    results = pool.map(_task, tasks) if pool else map(_task, tasks)
    for q_pos, s, i in tqdm(results, total=len(tasks), desc=desc, disable=not cfg.progress):
        sims[q_pos], inds[q_pos] = s, i
    return sims, inds


def sharded_neighbours(
    src_refs: Sequence[ShardRef],
    src_reps: np.ndarray,
    trg_refs: Sequence[ShardRef],
    trg_reps: np.ndarray,
    k: int,
    cfg: MiningConfig,
    workers: int = 1,
) -> Neighbours:
    """Exact kNN both ways over shards; indices are positions in ``src_reps``/``trg_reps``
    (the sorted global rows kept for mining, i.e. the compact indices of a :class:`Side`)."""
    if cfg.index != "flat":
        raise ValueError("sharded mining searches exactly (index=flat); use one process for IVF/PQ")
    # "spawn": forking a parent whose FAISS/OpenMP threads already ran can deadlock the child.
    ctx = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx) if workers > 1 else None
    try:
        fs, fi = _direction(src_refs, src_reps, trg_refs, trg_reps, k, cfg, pool, "knn src->trg")
        bs, bi = _direction(trg_refs, trg_reps, src_refs, src_reps, k, cfg, pool, "knn trg->src")
    finally:
        if pool:
            pool.shutdown()
    return Neighbours(fs, fi, bs, bi)


def gather_unit_rows(refs: Sequence[ShardRef], rows: np.ndarray) -> np.ndarray:
    """Unit vectors of arbitrary global rows (any order), read shard by shard."""
    if len(rows) == 0:
        return np.zeros((0, 0), np.float32)
    order = np.argsort(rows, kind="stable")
    sorted_rows = rows[order]
    parts = []
    for ref in refs:
        lo, hi = np.searchsorted(sorted_rows, [ref.offset, ref.offset + ref.stop - ref.start])
        if hi > lo:
            arr = load_npy(ref.path)  # mmap locally, streamed from object stores
            parts.append(normalized(arr[sorted_rows[lo:hi] - ref.offset + ref.start]))
    out = np.empty_like(np.concatenate(parts))
    out[order] = np.concatenate(parts)
    return out
