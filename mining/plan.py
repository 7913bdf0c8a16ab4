"""Planner for bounded-memory mining: index type, shard count, nprobe, predicted time and memory.

``python -m mining plan --n-src N --n-trg M --dim D --mem-gb G [--workers W] [--gpu] [--json]``

Every figure is a formula over the sizes, printed with the plan. Bytes per worker (one process
running one shard task at a time; ``G`` is the memory of one worker):

* exact (``Flat``, blocked): a query chunk ``A*d*4`` + a base block ``B*d*4`` (float32 copies)
  + the memory-mapped pages read for them ``(A+B)*d*s`` (``s`` = store bytes per value) + the
  backward lists of the shard ``(n_trg/S)*k*(4+8)``; nothing grows with the source side.
* approximate (IVF): the shard's index ``(n_b/S)*(code+8)`` (codes, int64 ids) + centroids
  ``nlist*d*4`` (+ OPQ rotation ``d*d*4``, PQ codebooks ``256*d*4``) + the training sample
  ``T*d*4`` while training + a query chunk ``Q*(d*(4+s) + kk*(4+8) + nprobe*(4+8))``.
  ``code`` = ``d*4`` (Flat), ``d`` (SQ8), ``m`` (PQm).
* merge and re-scoring (driver): the merged lists ``(n_src+n_trg)*k*(4+8)`` + their margin
  scores ``(n_src+n_trg)*k*4`` + retrieval's pooled pairs ``(n_src+n_trg)*(8+8+4)*3`` + one
  merge chunk ``R*(S*kk*(4+8) + kk*d*4 + d*4)`` (candidate vectors gathered for re-scoring).
  ``mining mine`` also holds both corpora on the driver, as Arrow columns:
  ``(n_src+n_trg)*(t + 90)`` (``t`` = ``--text-bytes``, a sentence's text, id and provenance in
  bytes; 90 = offsets and the cleaning's per-row arrays, measured by
  ``bench/mine_corpus_bench.py``), and one output slice ``65536*(2*t + 60)``.

Time: operation counts times per-operation cost constants (:class:`Costs`). :data:`MEASURED`
was measured on the development machine (2 cores, AVX2, FAISS 1.15 CPU) by
``python -m mining plan --calibrate`` (:mod:`mining.plan_calibrate`, which times small real
FAISS/numpy runs, about 20 s, and plans with the fresh figures; the command line is
:mod:`mining.cli_plan`); the GPU figures are assumptions (no GPU was lent when
they were written), stated in :data:`GPU_ASSUMED`. A worker is a machine like the one
calibrated: W workers run ``ceil(S/W)`` rounds of shard tasks in parallel.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

# The index registry (kinds, sizing); re-exported, the planner's names since it was written.
from mining.indexes import (  # noqa: F401
    AUTO,
    AUTO_KINDS,
    KINDS,
    factory,
    factory_for,
    ivf_lists,
    kind_of,
    pow2_near,
    pq_m,
    pqfs_m,
)

if TYPE_CHECKING:
    from labse_common.sections.mining import MiningConfig

GIB = 1 << 30
# Per corpus row beside its data: Arrow offsets and the cleaning's index arrays (measured:
# 238 B per added sentence with 146 B of text, id and URL, bench/mine_corpus_bench.py).
CORPUS_ROW_BYTES = 90
OUTPUT_SLICE_ROWS = (
    65536  # mining.output.WRITE_SLICE_ROWS (not imported: the planner is standalone)
)
# k-means iterations: FAISS's ClusteringParameters default (25) trains the PQ codebooks, but an
# IVF index sets its coarse quantizer's to 10 (Level1Quantizer; "typically used for large
# clusterings"). Counting 25 for the coarse k-means over-predicted its training 3.1-3.6x at
# both 1M and 10M (bench/HISTORY.md, "Planner at 1M").
KMEANS_ITERS = 25
IVF_KMEANS_ITERS = 10


def _config_default(name: str):
    from labse_common.sections.mining import MiningConfig

    return next(f.default for f in dataclasses.fields(MiningConfig) if f.name == name)


# The mining section's default, so `mining plan` plans the run `mining mine` makes.
RERANK: int = _config_default("rerank")
MIN_CHUNK = 64  # rows; keeps every FAISS call on its BLAS path (>= 20 queries)
MAX_CHUNK = 1 << 18  # larger chunks gain nothing and cost memory


@dataclass
class Costs:
    """Cost of each operation mining is made of, for ONE core (FAISS run on one thread);
    a worker with ``c`` cores is assumed ``c`` times faster on the FAISS parts."""

    gemm_flop_s: float  # inner products via BLAS (exact search, k-means, coarse assignment)
    pq_train_flop_s: float  # PQ codebook k-means (sub-vectors of d/m dims: far below BLAS speed)
    flat_scan_s: float  # IVF-Flat: seconds per (vector x dimension) scanned
    sq8_scan_s: float  # IVF-SQ8: seconds per (code x dimension) scanned
    pq_scan_s: float  # IVF-PQ: seconds per (code x sub-quantizer) scanned
    pqfs_scan_s: float  # IVF-PQ fast scan (4-bit): seconds per (code x sub-quantizer) scanned
    # Per (query x probed list), beyond its codes: the fast-scan look-up tables of a probe. It
    # dominates short lists (1M rows / 4,096 lists) and the per-code cost long ones (10M rows).
    probe_s: float
    encode_s: float  # adding to an index: seconds per (vector x dimension) beyond coarse assignment
    read_s: float  # reading + normalising store rows: seconds per byte (page cache; numpy, 1 core)
    gather_s: float  # random row read + exact re-score: seconds per (candidate x dimension)
    # The same when both stores fit in the worker's memory budget and stay in the page cache
    # (at 1M x 768 the re-score took 0.72x of the time per candidate it takes at 10M, where
    # the stores are larger than memory and row reads fault).
    gather_cached_s: float
    margin_s: float  # margin scoring + retrieval: seconds per neighbour-list entry
    source: str = "measured"


# Fitted to the 10M x 10M run on the development machine (2 cores, AVX2, FAISS 1.15.1 CPU;
# bench/HISTORY.md, "Mining at 10M x 10M"), its quiet direction: adding 10M vectors to
# IVF4096,PQ192x4fs took 70.6 core-us each (coarse assignment at gemm_flop_s + encode_s),
# searching them 200 core-us per query at nprobe 16 (coarse + 16 probes x probe_s + 39k codes x
# 192 x pqfs_scan_s; probe_s from two list lengths with --calibrate), and the exact re-score of
# 16 candidates 3.75 us per candidate on the driver's 2 threads. The other constants are from
# ``python -m mining plan --calibrate`` runs on a loaded machine (+-2x): re-run --calibrate on
# the machine you plan for. With 16 re-scored candidates they predict 72 min for the 10M run
# (a quiet run of both directions as measured: ~67 min). At 1M x 1M the stores sit in the page
# cache and the re-score is faster: gather_cached_s is fitted to the two 1M runs (merge and
# re-score of 16 and 64 candidates: 75.6 s and 346.6 s measured, 86 s and 344 s predicted).
MEASURED = Costs(
    gemm_flop_s=1.01e11,
    pq_train_flop_s=3.2e9,
    flat_scan_s=2.7e-10,
    sq8_scan_s=2.5e-10,
    pq_scan_s=2.0e-9,
    pqfs_scan_s=1.7e-11,
    probe_s=6.6e-7,
    encode_s=1.1e-8,
    read_s=4.5e-9,
    gather_s=4.9e-9,
    gather_cached_s=3.5e-9,
    margin_s=1.9e-7,
    source="per core, fitted to the 10M run on the development machine (AVX2)",
)

# One H100 per worker (assumed, not measured here: no GPU was lent): ~50 TFLOP/s float32 at
# ~60% efficiency for faiss-gpu flat search and k-means, IVF scans ~100x one CPU core;
# host-side costs (reads, re-scoring, margin) as measured. GPU figures are per worker, not
# per core (``cores`` does not scale them).
GPU_ASSUMED = dataclasses.replace(
    MEASURED,
    gemm_flop_s=3.0e13,
    pq_train_flop_s=3.0e12,
    flat_scan_s=MEASURED.flat_scan_s / 100,
    sq8_scan_s=MEASURED.sq8_scan_s / 100,
    pq_scan_s=MEASURED.pq_scan_s / 100,
    encode_s=MEASURED.encode_s / 50,
    source="assumed H100 per worker (faiss-gpu); host-side costs as measured",
)


@dataclass
class Sizes:
    """Rows per chunk, from the per-worker budget (the same rule the miner uses)."""

    query_rows: int  # A / Q: query rows searched per FAISS call
    block_rows: int  # B: base rows per exact block
    merge_rows: int  # R: query rows merged and re-scored at once


def _rows(budget: float, per_row: float) -> int:
    return int(min(MAX_CHUNK, max(MIN_CHUNK, budget // max(per_row, 1.0))))


def chunk_sizes(
    mem_gb: float, dim: int, k: int, kk: int, shards: int = 1, nprobe: int = 16, itemsize: int = 4
) -> Sizes:
    """A quarter of the budget for each of: query chunk, base block, merge chunk."""
    q = mem_gb * GIB / 4
    return Sizes(
        query_rows=_rows(q, dim * (4 + itemsize) + kk * 12 * 3 + nprobe * 12),
        block_rows=_rows(q, dim * (4 + itemsize) + k * 12 * 3),
        merge_rows=min(
            1 << 16, _rows(q, shards * kk * 12 * 2 + kk * dim * 4 + dim * (4 + itemsize))
        ),
    )


def code_bytes(kind: str, dim: int) -> int:
    m = pq_m(dim)
    return {
        "flat": dim * 4,
        "ivf_flat": dim * 4,
        "ivf_sq8": dim,
        "ivf_pq": m,
        "ivf_pqfs": -(-pqfs_m(dim) // 2),
        "opq_ivf_pq": m,
    }[kind]


def default_nprobe(nlist: int) -> int:
    """16 lists (the ``mining.nprobe`` default), never more than nlist; the bench measures
    the recall it gives."""
    return max(1, min(nlist, 16))


@dataclass
class Plan:
    n_src: int
    n_trg: int
    dim: int
    k: int
    mem_gb: float
    workers: int
    cores: int  # per worker
    gpu: bool
    itemsize: int
    kind: str
    factory_trg: str  # index over the target side (src -> trg search)
    factory_src: str  # index over the source side (trg -> src search)
    nprobe: int
    rerank: int
    train_size: int
    shards: int
    rounds: int
    sizes: Sizes
    memory: dict[str, int] = field(default_factory=dict)  # bytes, per component
    worker_peak_bytes: int = 0
    driver_peak_bytes: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    total_seconds: float = 0.0
    fits: bool = True
    reason: str = ""
    costs: str = ""
    text_bytes: int = 0  # per sentence held by the driver (0: vectors only, no corpora)

    def to_json(self) -> dict:
        return asdict(self)


def _index_bytes(kind: str, n_shard: int, n_base: int, dim: int, train_size: int) -> int:
    if kind == "flat":
        return 0  # streamed in blocks: counted as the base block
    nlist = ivf_lists(n_base, train_size)
    extra = nlist * dim * 4 + nlist * 64  # centroids + inverted-list headers
    if kind in ("ivf_pq", "opq_ivf_pq", "ivf_pqfs"):
        extra += 256 * dim * 4  # codebooks
    if kind == "opq_ivf_pq":
        extra += dim * dim * 4  # rotation
    return n_shard * (code_bytes(kind, dim) + 8) + extra


def _scan_cost(kind: str, dim: int, c: Costs) -> float:
    """Seconds (one core) to scan one stored code of an index kind."""
    if kind == "ivf_flat":
        return dim * c.flat_scan_s
    if kind == "ivf_sq8":
        return dim * c.sq8_scan_s
    if kind == "ivf_pqfs":
        return pqfs_m(dim) * c.pqfs_scan_s
    return pq_m(dim) * c.pq_scan_s


def stores_cached(p: Plan) -> bool:
    """Whether both embedding stores fit in one worker's memory budget, so that the re-score's
    random row reads hit the page cache (the planner's proxy for the machine's free memory)."""
    return (p.n_src + p.n_trg) * p.dim * p.itemsize <= p.mem_gb * 2**30


def _direction_time(kind: str, n_q: int, n_b: int, p: Plan, c: Costs) -> dict[str, float]:
    """Seconds of one search direction, summed over its shard tasks, on one worker."""
    d, s = p.dim, p.shards
    f = 1 if p.gpu else p.cores  # FAISS parts scale with the worker's cores
    kk = min(n_b, p.k * p.rerank)
    t: dict[str, float] = {}
    t["read"] = (s * n_q + n_b) * d * p.itemsize * c.read_s
    if kind == "flat":
        t["search"] = 2.0 * n_q * n_b * d / c.gemm_flop_s / f
        return t
    nlist = ivf_lists(n_b, p.train_size)
    t_rows = min(n_b, p.train_size)
    train = IVF_KMEANS_ITERS * t_rows * nlist * d * 2.0 / c.gemm_flop_s
    if kind == "ivf_pqfs":
        pq_rows = min(t_rows, 256 * 16)
        train += KMEANS_ITERS * pq_rows * 16 * d * 2.0 / c.pq_train_flop_s
    if kind in ("ivf_pq", "opq_ivf_pq"):
        ksub = 256 if t_rows >= 39 * 256 else 16
        pq_rows = min(t_rows, 256 * ksub)  # FAISS samples 256 points per centroid
        pq = KMEANS_ITERS * pq_rows * ksub * d * 2.0 / c.pq_train_flop_s
        train += pq * (9 if kind == "opq_ivf_pq" else 1)
    t["train"] = train / f
    t["add"] = n_b * (nlist * d * 2.0 / c.gemm_flop_s + d * c.encode_s) / f
    coarse = s * n_q * nlist * d * 2.0 / c.gemm_flop_s  # every shard task assigns all queries
    probes = n_q * min(p.nprobe, nlist)
    scanned = probes * (n_b / nlist)
    per_probe = c.probe_s if kind == "ivf_pqfs" else 0.0
    t["search"] = (coarse + probes * per_probe + scanned * _scan_cost(kind, d, c)) / f
    t["rerank"] = n_q * kk * d * (c.gather_cached_s if stores_cached(p) else c.gather_s)
    return t


def make_plan(
    n_src: int,
    n_trg: int,
    dim: int,
    mem_gb: float,
    workers: int = 1,
    gpu: bool = False,
    k: int = 4,
    rerank: int = RERANK,
    train_size: int = 200_000,
    itemsize: int = 2,
    exact_hours: float = 1.0,
    kind: str | None = None,
    nprobe: int | None = None,
    costs: Costs | None = None,
    cores: int | None = None,
    max_hours: float = 6.0,
    text_bytes: int = 0,
) -> Plan:
    """Choose the index kind, shards and nprobe for ``n_src x n_trg`` vectors of ``dim``.

    Rule: exact (Flat) when its predicted time is at most ``exact_hours``; otherwise the most
    accurate of IVF-Flat, IVF-SQ8, IVF-PQ, IVF-PQ fast scan (CPU) whose shard index fits the
    worker's memory with one shard per worker and whose predicted time is at most
    ``max_hours``; when none is that fast, the fastest that fits; when none fits, the fastest
    PQ kind with as many shards as its index needs (a multiple of the worker count; shards
    beyond the workers run in rounds). ``text_bytes`` > 0 adds the corpora that ``mining mine``
    holds on the driver (bytes of text, id and provenance per sentence).
    """
    if min(n_src, n_trg, dim, workers, k) < 1 or mem_gb <= 0:
        raise ValueError("sizes, workers and k must be >= 1 and mem_gb > 0")
    req = _Request(
        n_src,
        n_trg,
        dim,
        mem_gb,
        workers,
        gpu,
        k,
        rerank,
        train_size,
        itemsize,
        nprobe,
        costs or (GPU_ASSUMED if gpu else MEASURED),
        cores or _local_cores(),
        text_bytes,
    )
    if kind is not None:
        return _as_asked(req, kind)
    exact = req.build("flat", workers)
    if exact.total_seconds <= exact_hours * 3600:
        exact.reason = (
            f"exact search predicted {exact.total_seconds / 3600:.2f} h "
            f"<= {exact_hours} h (--exact-hours)"
        )
        return exact
    why = f"exact predicted {exact.total_seconds / 3600:.1f} h > {exact_hours} h"
    return _approximate(req, why, max_hours)


@dataclass(frozen=True)
class _Request:
    """What one :func:`make_plan` call plans for; :meth:`build` prices one (kind, shards)."""

    n_src: int
    n_trg: int
    dim: int
    mem_gb: float
    workers: int
    gpu: bool
    k: int
    rerank: int
    train_size: int
    itemsize: int
    nprobe: int | None
    costs: Costs
    cores: int
    text_bytes: int

    def build(self, kind: str, shards: int) -> Plan:
        """The plan of index ``kind`` cut in ``shards``, its memory and time filled in."""
        n_b = max(self.n_src, self.n_trg)
        kk = min(n_b, self.k * self.rerank)
        nlist = ivf_lists(n_b, self.train_size)
        probe = 0 if kind == "flat" else min(nlist, self.nprobe or default_nprobe(nlist))
        p = Plan(
            self.n_src,
            self.n_trg,
            self.dim,
            self.k,
            self.mem_gb,
            self.workers,
            self.cores,
            self.gpu,
            self.itemsize,
            kind,
            factory_for(kind, self.n_trg, self.dim, self.train_size),
            factory_for(kind, self.n_src, self.dim, self.train_size),
            probe,
            1 if kind == "flat" else self.rerank,
            self.train_size,
            shards,
            math.ceil(shards / self.workers),
            chunk_sizes(self.mem_gb, self.dim, self.k, kk, shards, probe or 16, self.itemsize),
            costs=self.costs.source,
            text_bytes=self.text_bytes,
        )
        _fill(p, self.costs)
        return p


def _as_asked(req: _Request, kind: str) -> Plan:
    """The plan of the kind the caller forces, sharded further when one shard does not fit."""
    if kind not in KINDS:
        raise ValueError(f"unknown index kind {kind!r}; choose from {KINDS}")
    p = req.build(kind, req.workers)
    if kind != "flat" and not p.fits:
        p = _with_shards(req.build, kind, p, req.workers)
    p.reason = f"index kind {kind} as asked"
    return p


def _approximate(req: _Request, why: str, max_hours: float) -> Plan:
    """Exact search is too slow: the most accurate index that fits and is fast enough, else the
    fastest that fits, else the PQ kind sharded until it fits."""
    mem_gb, workers = req.mem_gb, req.workers
    kinds = [a for a in AUTO_KINDS if not (req.gpu and a == "ivf_pqfs")]  # no fast scan on GPUs
    fitting = [p for p in (req.build(a, workers) for a in kinds) if p.fits]
    for p in fitting:  # in order of accuracy
        if p.total_seconds <= max_hours * 3600:
            p.reason = (
                f"{why}; {p.kind} is the most accurate index whose shard fits {mem_gb} GB "
                f"and is predicted within {max_hours} h (--max-hours)"
            )
            return p
    if fitting:
        p = min(fitting, key=lambda q: q.total_seconds)
        p.reason = (
            f"{why}; no index that fits {mem_gb} GB is predicted within {max_hours} h "
            f"(--max-hours): {p.kind} is the fastest that fits"
        )
        return p
    pq = "ivf_pq" if req.gpu else "ivf_pqfs"
    p = _with_shards(req.build, pq, req.build(pq, workers), workers)
    p.reason = (
        f"{why}; no index fits {mem_gb} GB with {workers} shard(s): {pq} in {p.shards} shards"
    )
    return p


def index_choice(
    spec: str, n_src: int, n_trg: int, dim: int, cfg: MiningConfig, workers: int = 1
) -> tuple[str, str, str, int]:
    """``(kind, factory_trg, factory_src, nprobe)`` of a ``mining.index`` value for these sizes:
    the one resolution every path that builds an index goes through (:mod:`mining.indexes`).

    ``auto`` is :func:`make_plan`'s choice for ``cfg.mem_gb`` and ``workers``; a kind or alias
    is sized per side; ``ivfNNN`` and FAISS strings are ``"factory"`` kinds. ``kind`` is
    ``"flat"`` exactly when the search is exact; ``nprobe`` is 0 then."""
    if spec.strip().lower() == AUTO:
        p = make_plan(
            max(1, n_src),
            max(1, n_trg),
            max(1, dim),
            cfg.mem_gb,
            max(1, workers),
            bool(cfg.gpu),
            cfg.k,
            cfg.rerank,
            cfg.train_size,
        )
        return p.kind, p.factory_trg, p.factory_src, p.nprobe or cfg.nprobe
    kind = kind_of(spec) or "factory"
    f_trg = factory(spec, n_trg, dim, cfg.train_size)
    f_src = factory(spec, n_src, dim, cfg.train_size)
    return kind, f_trg, f_src, 0 if kind == "flat" else cfg.nprobe


def _local_cores() -> int:
    from labse_common.threads import usable_cpus

    return usable_cpus()


def _with_shards(build, kind: str, p: Plan, workers: int) -> Plan:
    index = p.memory.get("index", 0)
    room = max(1, p.mem_gb * GIB - (p.worker_peak_bytes - index))
    shards = workers * max(1, math.ceil(index / room / workers))
    for _ in range(64):
        p = build(kind, shards)
        if p.fits:
            break
        shards += workers
    return p


def _fill(p: Plan, c: Costs) -> None:
    d, k, s, it = p.dim, p.k, p.shards, p.itemsize
    z = p.sizes
    kk = min(max(p.n_src, p.n_trg), k * p.rerank)
    n_b = max(p.n_src, p.n_trg)
    mem: dict[str, int] = {}
    if p.kind == "flat":
        mem["query_chunk"] = z.query_rows * d * (4 + it) + z.query_rows * k * 12 * 3
        mem["base_block"] = z.block_rows * d * (4 + it) + z.block_rows * k * 12 * 3
        mem["faiss_block"] = 4096 * 1024 * 4  # FAISS's BLAS tile of inner products
        mem["shard_lists"] = math.ceil(p.n_trg / s) * k * 12
    else:
        mem["index"] = _index_bytes(p.kind, math.ceil(n_b / s), n_b, d, p.train_size)
        mem["train_sample"] = min(n_b, p.train_size) * d * 4
        mem["query_chunk"] = z.query_rows * (d * (4 + it) + kk * 12 * 3 + p.nprobe * 12)
    worker = sum(mem.values())
    n = p.n_src + p.n_trg
    drv = {
        "lists": n * k * 12,
        "scores": n * k * 4,
        "retrieval": n * 20 * 3,
        "merge_chunk": z.merge_rows * (s * kk * 12 * 2 + kk * d * 4 + d * (4 + it)),
    }
    if p.text_bytes:
        drv["corpora"] = n * (p.text_bytes + CORPUS_ROW_BYTES)
        drv["output_slice"] = OUTPUT_SLICE_ROWS * (2 * p.text_bytes + 60)
    p.memory = {**mem, **{f"driver_{a}": b for a, b in drv.items()}}
    p.worker_peak_bytes = int(worker)
    p.driver_peak_bytes = int(sum(drv.values()))
    p.fits = max(worker, p.driver_peak_bytes) <= p.mem_gb * GIB

    secs: dict[str, float] = {}
    fwd = _direction_time(p.kind, p.n_src, p.n_trg, p, c)
    bwd = _direction_time(p.kind, p.n_trg, p.n_src, p, c)
    for key in sorted(set(fwd) | set(bwd)):  # a fixed order: the float sum is reproducible
        secs[key] = fwd.get(key, 0.0) + bwd.get(key, 0.0)
    # Shard tasks run W at a time; training (once per direction) and re-scoring run on the
    # driver.
    par = s / p.rounds if p.rounds else 1
    for key in ("read", "search", "add"):
        if key in secs:
            secs[key] /= par
    secs["margin_retrieval"] = n * k * c.margin_s
    p.seconds = {a: round(b, 3) for a, b in sorted(secs.items())}
    p.total_seconds = round(sum(secs.values()), 3)


def fmt_bytes(b: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(b) < 1024 or unit == "TiB":
            return f"{b:.1f} {unit}" if unit != "B" else f"{int(b)} B"
        b /= 1024
    return f"{b:.1f} TiB"


def fmt_seconds(s: float) -> str:
    if s < 120:
        return f"{s:.1f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def render(p: Plan) -> str:
    """The plan as readable text."""
    lines = [
        f"mining plan: {p.n_src:,} x {p.n_trg:,} vectors of dim {p.dim}, k={p.k}, "
        f"{p.workers} worker(s) of {p.mem_gb} GB and {p.cores} core(s)"
        f"{', one GPU each' if p.gpu else ''}",
        f"  index        {p.kind}: target index '{p.factory_trg}', source index '{p.factory_src}'",
        f"  why          {p.reason}",
        f"  shards       {p.shards} per direction, {p.rounds} round(s) of {p.workers} worker(s)",
    ]
    if p.kind != "flat":
        lines.append(
            f"  nprobe       {p.nprobe}; candidates k*rerank = {p.k * p.rerank} "
            f"re-scored exactly; trained on {min(max(p.n_src, p.n_trg), p.train_size):,}"
            " sampled vectors per direction"
        )
    z = p.sizes
    lines.append(
        f"  chunks       query {z.query_rows:,} rows, base block {z.block_rows:,} rows, "
        f"merge {z.merge_rows:,} rows"
    )
    lines.append(
        f"  memory       worker peak {fmt_bytes(p.worker_peak_bytes)}, driver peak "
        f"{fmt_bytes(p.driver_peak_bytes)} (budget {p.mem_gb} GB"
        f"{'' if p.fits else ', DOES NOT FIT'})"
    )
    for name, b in p.memory.items():
        lines.append(f"    {name:<22}{fmt_bytes(b):>12}")
    lines.append(f"  time         {fmt_seconds(p.total_seconds)} predicted ({p.costs})")
    for name, s in p.seconds.items():
        lines.append(f"    {name:<22}{fmt_seconds(s):>12}")
    lines.append(
        "  formulas     flat: 2*n_q*n_b*d flops per direction / gemm_flop_s; IVF: "
        "coarse S*n_q*nlist*d*2 flops + n_q*nprobe*(n_b/nlist) codes * scan cost; "
        "index (n/S)*(code+8) B + nlist*d*4 B; lists 2*n*k*(4+8) B"
    )
    return "\n".join(lines)
