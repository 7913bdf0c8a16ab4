"""k-nearest-neighbour search by inner product on L2-normalised vectors (= cosine).

Exact search is blocked over both queries and base so the working set stays under a memory
budget whatever the corpus size; approximate indexes (any name of the one registry,
:mod:`mining.indexes`: IVF, PQ, OPQ, ``auto`` or a FAISS factory string) are trained on a
sample. GPU FAISS is used when present, through the same functions. Returned scores are always
true cosines: approximate candidates are re-scored exactly.

Every function reads the search keys of the ``mining`` section (``index``, ``mem_gb``, ``nprobe``,
``train_size``, ``rerank``, ``gpu``, ``progress``) from the :class:`MiningConfig` it is given.
"""

from __future__ import annotations

import logging
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from labse_common.sections.mining import MiningConfig
from mining.faiss_lib import faiss
from mining.indexes import is_flat
from mining.plan import index_choice

log = logging.getLogger(__name__)

GIB = 1 << 30


# The sample an approximate index is trained on is drawn with this seed: same data, same index.
SAMPLE_SEED = 0


@dataclass
class Neighbours:
    """k-NN lists both ways: fwd = each source row's targets, bwd = each target row's sources."""

    fwd_sims: np.ndarray
    fwd_inds: np.ndarray
    bwd_sims: np.ndarray
    bwd_inds: np.ndarray


def gpu_available() -> bool:
    """True when this FAISS build has GPU support and sees at least one device."""
    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


def _use_gpu(cfg: MiningConfig) -> bool:
    return gpu_available() if cfg.gpu is None else bool(cfg.gpu and gpu_available())


def _f32(block: np.ndarray) -> np.ndarray:
    # FAISS wants C-contiguous float32; a float16/memory-mapped block is converted only here.
    return np.ascontiguousarray(block, dtype=np.float32)


def merge_topk(
    sims_a: np.ndarray, inds_a: np.ndarray, sims_b: np.ndarray, inds_b: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Merge two per-row neighbour lists into the best ``k``, sorted by decreasing score."""
    sims = np.concatenate([sims_a, sims_b], axis=1)
    inds = np.concatenate([inds_a, inds_b], axis=1)
    return topk_rows(sims, inds, k)


def topk_rows(sims: np.ndarray, inds: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Best ``k`` columns of each row, sorted by decreasing score (ties: first column first)."""
    k = min(k, sims.shape[1])
    if sims.shape[1] > k:
        part = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        sims = np.take_along_axis(sims, part, axis=1)
        inds = np.take_along_axis(inds, part, axis=1)
    order = np.argsort(-sims, axis=1, kind="stable")
    return np.take_along_axis(sims, order, axis=1), np.take_along_axis(inds, order, axis=1)


def _block_rows(mem_gb: float, dim: int, share: float) -> int:
    return max(1, int(mem_gb * GIB * share / (max(dim, 1) * 4)))


def _flat_search(xq: np.ndarray, xb: np.ndarray, k: int, gpu_res) -> tuple[np.ndarray, np.ndarray]:
    if gpu_res is not None:
        return faiss.knn_gpu(gpu_res, xq, xb, k, metric=faiss.METRIC_INNER_PRODUCT)
    return faiss.knn(xq, xb, k, metric=faiss.METRIC_INNER_PRODUCT)


def search_flat(
    xq: np.ndarray, xb: np.ndarray, k: int, cfg: MiningConfig | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` of every query row in ``xb``, blocked under ``cfg.mem_gb``.

    Blocks of the base are visited once each (outer loop) so a memory-mapped base is read once;
    each block's neighbours are merged into a running top-k.
    """
    cfg = cfg or MiningConfig(progress=False)
    nq, nb = len(xq), len(xb)
    k = min(k, nb)
    sims = np.full((nq, k), -np.inf, dtype=np.float32)
    inds = np.full((nq, k), -1, dtype=np.int64)
    if nq == 0 or k == 0:
        return sims, inds
    dim = xb.shape[1]
    if xq.shape[1] != dim:
        raise ValueError(f"query dim {xq.shape[1]} != base dim {dim}")
    bb = _block_rows(cfg.mem_gb, dim, 0.5)
    qb = _block_rows(cfg.mem_gb, dim + 6 * k, 0.25)
    gpu_res = faiss.StandardGpuResources() if _use_gpu(cfg) else None
    steps = math.ceil(nb / bb) * math.ceil(nq / qb)
    with tqdm(total=steps, desc="knn flat", disable=not cfg.progress, unit="block") as bar:
        for b0 in range(0, nb, bb):
            base = _f32(xb[b0 : b0 + bb])
            kb = min(k, len(base))
            for q0 in range(0, nq, qb):
                q = _f32(xq[q0 : q0 + qb])
                s, i = _flat_search(q, base, kb, gpu_res)
                i += b0
                if b0 == 0:
                    sims[q0 : q0 + qb, :kb], inds[q0 : q0 + qb, :kb] = s, i
                else:
                    sims[q0 : q0 + qb], inds[q0 : q0 + qb] = merge_topk(
                        sims[q0 : q0 + qb], inds[q0 : q0 + qb], s, i, k
                    )
                bar.update()
    return sims, inds


def build_index(xb: np.ndarray, cfg: MiningConfig):
    """Train the index ``cfg.index`` names (any kind the registry takes: :mod:`mining.indexes`,
    ``auto`` included) on a sample of ``xb`` and add every row (in blocks)."""
    n, dim = xb.shape
    _, fs, _, nprobe = index_choice(cfg.index, n, n, dim, cfg)
    index = faiss.index_factory(dim, fs, faiss.METRIC_INNER_PRODUCT)
    if not index.is_trained:
        rng = np.random.default_rng(SAMPLE_SEED)
        take = min(n, cfg.train_size)
        sample = np.sort(rng.choice(n, size=take, replace=False)) if take < n else np.arange(n)
        log.info("training %s on %d of %d vectors", fs, take, n)
        index.train(_f32(xb[sample]))
    if _use_gpu(cfg):
        index = faiss.index_cpu_to_all_gpus(index)
    step = _block_rows(cfg.mem_gb, dim, 0.25)
    for b0 in tqdm(range(0, n, step), desc="index add", disable=not cfg.progress):
        index.add(_f32(xb[b0 : b0 + step]))
    try:
        faiss.ParameterSpace().set_index_parameter(index, "nprobe", nprobe or cfg.nprobe)
    except RuntimeError:
        pass  # not an IVF index (e.g. HNSW): nothing to probe
    return index


#: Queries whose candidate rows are gathered and scored at once: 256 x 16 rows of 768 floats
#: (12 MB) stay near the cache, where the (queries x candidates x dim) array of a whole chunk
#: (3 GB at 65k queries) went to memory and back (1.7x slower). Per-row sums are unchanged.
SCORE_BLOCK = 256


def exact_scores(xq: np.ndarray, xb: np.ndarray, inds: np.ndarray, threads: int = 1) -> np.ndarray:
    """cos(xq[i], xb[inds[i, j]]) for every candidate; -inf where ``inds`` is -1.

    Scored in blocks of :data:`SCORE_BLOCK` queries, on ``threads`` threads (numpy releases
    the GIL in the gather and the sum)."""
    safe = np.where(inds < 0, 0, inds)
    xq = _f32(xq)
    sims = np.empty(inds.shape, np.float32)

    def block(a: int) -> None:
        b = min(len(inds), a + SCORE_BLOCK)
        rows = _f32(xb[safe[a:b].ravel()]).reshape(b - a, inds.shape[1], -1)
        sims[a:b] = np.einsum("qd,qkd->qk", xq[a:b], rows)

    starts = range(0, len(inds), SCORE_BLOCK)
    if threads > 1 and len(starts) >= 16:  # small calls: thread start-up is not worth it
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(block, starts))
    else:
        for a in starts:
            block(a)
    sims[inds < 0] = -np.inf
    return sims


def search_index(
    index, xq: np.ndarray, xb: np.ndarray, k: int, cfg: MiningConfig
) -> tuple[np.ndarray, np.ndarray]:
    """Approximate top-``k``, with candidates re-scored by their exact cosine."""
    k = min(k, len(xb))
    kk = min(len(xb), k * max(1, cfg.rerank))
    nq = len(xq)
    sims = np.full((nq, k), -np.inf, dtype=np.float32)
    inds = np.full((nq, k), -1, dtype=np.int64)
    if nq == 0 or k == 0:
        return sims, inds
    qb = _block_rows(cfg.mem_gb, xq.shape[1] * (kk + 1), 0.25)
    for q0 in tqdm(range(0, nq, qb), desc="knn index", disable=not cfg.progress):
        q = _f32(xq[q0 : q0 + qb])
        _, cand = index.search(q, kk)
        s = exact_scores(q, xb, cand)
        sims[q0 : q0 + qb], inds[q0 : q0 + qb] = topk_rows(s, cand, k)
    return sims, inds


def knn(
    xq: np.ndarray, xb: np.ndarray, k: int, cfg: MiningConfig | None = None, index=None
) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` neighbours of each row of ``xq`` in ``xb`` (k is clipped to ``len(xb)``).

    Returns ``(sims, inds)`` of shape ``(len(xq), min(k, len(xb)))``, sorted by decreasing
    cosine. ``index`` reuses an approximate index already built on ``xb``.
    """
    cfg = cfg or MiningConfig(progress=False)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if len(xq) and len(xb) and xq.shape[1] != xb.shape[1]:
        raise ValueError(f"dimension mismatch: queries {xq.shape[1]} vs base {xb.shape[1]}")
    if index is None and is_flat(cfg.index):
        return search_flat(xq, xb, k, cfg)
    if len(xb) == 0 or len(xq) == 0:
        return search_flat(xq, xb, k, cfg)
    if index is None:
        index = build_index(xb, cfg)
    return search_index(index, xq, xb, k, cfg)


def recall_at_k(approx_inds: np.ndarray, exact_inds: np.ndarray) -> float:
    """Fraction of the exact top-k neighbours that the approximate search also returned."""
    if exact_inds.size == 0:
        return 1.0
    # (n, k_exact, k_approx) comparison: k is small, so this is cheap and loop-free.
    found = (exact_inds[:, :, None] == approx_inds[:, None, :]).any(axis=2)
    return float(found.mean())
