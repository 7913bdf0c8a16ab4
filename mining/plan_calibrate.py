"""``python -m mining plan --calibrate``: the planner's :class:`~mining.plan.Costs` measured here.

Small real FAISS/numpy runs of each operation mining is made of (about 15 s on an idle core),
one named step per group of constants. It sits above :mod:`mining.plan` and the miners it
times (:mod:`mining.bounded`'s store reads, :mod:`mining.margin`, :mod:`mining.retrieval`), so
the planner itself imports none of them: ``mining.knn`` and ``mining.bounded`` read the planner
without an import circle.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable

import numpy as np

from labse_common.embedding_store import StoreWriter
from mining.faiss_lib import faiss
from mining.knn import Neighbours
from mining.margin import score
from mining.plan import IVF_KMEANS_ITERS, KMEANS_ITERS, MEASURED, Costs, pq_m, pqfs_m
from mining.retrieval import retrieve
from mining.vector_side import VectorSide

Unit = Callable[[int], np.ndarray]
#: (seconds of the scan beyond the coarse assignment, probed lists, scanned codes) of one
#: fast-scan search: two of them, at two list lengths, separate the two fast-scan costs.
ScanRun = tuple[float, int, int]
NLIST = 64  # lists of the small IVF indexes timed
TRAIN_ROWS = 4096


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _unit_rows(rng: np.random.Generator, dim: int) -> Unit:
    def unit(n: int) -> np.ndarray:
        a = rng.standard_normal((n, dim), dtype=np.float32)
        return a / np.linalg.norm(a, axis=1, keepdims=True)

    return unit


def _gemm_flop_s(xq: np.ndarray, xb: np.ndarray) -> float:
    """Inner products per second of FAISS's BLAS search."""
    dim = xq.shape[1]
    t = _timed(lambda: faiss.knn(xq, xb, 4, metric=faiss.METRIC_INNER_PRODUCT))
    return 2.0 * len(xq) * len(xb) * dim / t


def _ivf_scans(
    xq: np.ndarray, xb: np.ndarray, gemm: float
) -> tuple[dict[str, float], float, float, ScanRun]:
    """Seconds per scanned code (per dimension or sub-quantizer) of each IVF kind, from FAISS's
    own count of distances; PQ training and encoding speed; the fast-scan run on 64 lists."""
    dim = xq.shape[1]
    scans: dict[str, float] = {}
    m = pq_m(dim)
    pq_train = encode = 0.0
    short: ScanRun = (0.0, 1, 1)
    for kind, fs, per in (
        ("ivf_flat", f"IVF{NLIST},Flat", dim),
        ("ivf_sq8", f"IVF{NLIST},SQ8", dim),
        ("ivf_pq", f"IVF{NLIST},PQ{m}x4np", m),
        ("ivf_pqfs", f"IVF{NLIST},PQ{pqfs_m(dim)}x4fs", pqfs_m(dim)),
    ):
        index = faiss.index_factory(dim, fs, faiss.METRIC_INNER_PRODUCT)
        t_train = _timed(lambda index=index: index.train(xb[:TRAIN_ROWS]))
        t_add = _timed(lambda index=index: index.add(xb))
        if kind == "ivf_pq":
            ivf = IVF_KMEANS_ITERS * TRAIN_ROWS * NLIST * dim * 2.0 / gemm
            flops = KMEANS_ITERS * TRAIN_ROWS * 16 * dim * 2.0
            pq_train = flops / max(1e-6, t_train - ivf)
            encode = max(1e-12, t_add / len(xb) - NLIST * dim * 2.0 / gemm) / dim
        faiss.ParameterSpace().set_index_parameter(index, "nprobe", 8)
        faiss.cvar.indexIVF_stats.reset()
        t = _timed(lambda index=index: index.search(xq, 16))
        ndis = faiss.cvar.indexIVF_stats.ndis
        if kind == "ivf_pqfs" or ndis <= 0:  # fast scan keeps no count: lists' sizes
            _, probed = index.quantizer.search(xq, 8)
            sizes = np.array([index.invlists.list_size(i) for i in range(NLIST)])
            ndis = int(sizes[probed].sum())
        ndis = max(1, ndis)
        coarse = len(xq) * NLIST * dim * 2.0 / gemm
        scans[kind] = max(1e-13, t - coarse) / ndis / per
        if kind == "ivf_pqfs":
            short = (max(1e-9, t - coarse), len(xq) * 8, ndis)
    return scans, pq_train, encode, short


def _fast_scan_split(
    xq: np.ndarray, xb: np.ndarray, gemm: float, short: ScanRun
) -> tuple[float, float]:
    """(seconds per code, seconds per probed list) of fast scan: the 64-list run and one more
    with 4 lists of 2,048 codes, as 1M and 10M-row indexes differ in list length."""
    dim = xq.shape[1]
    index = faiss.index_factory(dim, f"IVF4,PQ{pqfs_m(dim)}x4fs", faiss.METRIC_INNER_PRODUCT)
    index.train(xb[:TRAIN_ROWS])
    index.add(xb)
    faiss.ParameterSpace().set_index_parameter(index, "nprobe", 2)
    t = _timed(lambda: index.search(xq, 16))
    _, probed = index.quantizer.search(xq, 2)
    sizes = np.array([index.invlists.list_size(i) for i in range(4)])
    long_ = (
        max(1e-9, t - len(xq) * 4 * dim * 2.0 / gemm),
        len(xq) * 2,
        int(sizes[probed].sum()),
    )
    (t1, p1, n1), (t2, p2, n2) = short, long_
    det = p1 * n2 - p2 * n1
    per_code = (p1 * t2 - p2 * t1) / det if det else 0.0
    probe_s = (t1 - per_code * n1) / p1
    if per_code <= 0 or probe_s <= 0:  # noise: all of it per code, as before
        per_code, probe_s = t1 / n1, 1e-12
    return per_code, probe_s


def _store_costs(rng: np.random.Generator, unit: Unit, dim: int) -> tuple[float, float, float]:
    """(read_s, gather_s, gather_cached_s): sequential store reads and random row gathers with
    their exact re-score, through the miner's own :class:`mining.vector_side.VectorSide`."""
    with tempfile.TemporaryDirectory() as tmp:
        w = StoreWriter(tmp + "/s", dim, "float16", rows_per_shard=20_000)
        for _ in range(3):
            w.add(unit(20_000), [""] * 20_000)
        w.close()
        side = VectorSide(tmp + "/s")
        read_s = _timed(lambda: [side.read(a, a + 10_000) for a in range(0, 60_000, 10_000)])
        read_s /= 60_000 * dim * 2
        idx = rng.integers(0, len(side), (2048, 16))
        xq2, cand = unit(2048), unit(2048 * 16).reshape(2048, 16, dim)
        gather = _timed(lambda: side.gather(idx.ravel()))
        gather += _timed(lambda: np.einsum("qd,qkd->qk", xq2, cand))
    # The calibration store is small and cached: that is the cached cost; the cost for stores
    # larger than memory keeps the ratio measured between the 1M and 10M runs.
    gather_cached_s = gather / (idx.size * dim)
    gather_s = gather_cached_s * MEASURED.gather_s / MEASURED.gather_cached_s
    return read_s, gather_s, gather_cached_s


def _margin_s(rng: np.random.Generator) -> float:
    """Seconds per neighbour-list entry of margin scoring and ``max`` retrieval."""
    n, k = 200_000, 4
    sims = -np.sort(-rng.random((n, k), dtype=np.float32), axis=1) + 0.5
    nb = Neighbours(sims, rng.integers(0, n, (n, k)), sims.copy(), rng.integers(0, n, (n, k)))

    def margin() -> None:
        sc = score(nb, "ratio")
        retrieve(sc.fwd_scores, nb.fwd_inds, sc.bwd_scores, nb.bwd_inds, "max")

    return _timed(margin) / (2 * n * k)


def calibrate(dim: int = 768, seed: int = 0) -> Costs:
    """Measure :class:`~mining.plan.Costs` here, FAISS on one thread (about 15 s on an idle
    core): a BLAS search, IVF-Flat/SQ8/PQ scans, PQ training and encoding, store reads, random
    gathers and margin retrieval."""
    rng = np.random.default_rng(seed)
    unit = _unit_rows(rng, dim)
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        xq, xb = unit(1024), unit(8192)
        gemm = _gemm_flop_s(xq, xb)
        scans, pq_train, encode, short = _ivf_scans(xq, xb, gemm)
        per_code, probe_s = _fast_scan_split(xq, xb, gemm, short)
        scans["ivf_pqfs"] = per_code / pqfs_m(dim)
    finally:
        faiss.omp_set_num_threads(threads)
    read_s, gather_s, gather_cached_s = _store_costs(rng, unit, dim)
    return Costs(
        gemm_flop_s=gemm,
        pq_train_flop_s=pq_train,
        flat_scan_s=scans["ivf_flat"],
        sq8_scan_s=scans["ivf_sq8"],
        pq_scan_s=scans["ivf_pq"],
        pqfs_scan_s=scans["ivf_pqfs"],
        probe_s=probe_s,
        encode_s=encode,
        read_s=read_s,
        gather_s=gather_s,
        gather_cached_s=gather_cached_s,
        margin_s=_margin_s(rng),
        source="per core, calibrated now on this machine",
    )
