"""Mining past RAM: kNN both ways in bounded memory, sharded by base rows, then the margin.

Neither side is ever held whole. A side is read from its embedding store (or ``.npy``) in
chunks of rows, each memory-mapped, copied to float32 unit rows and unmapped again, so the
resident set holds one chunk, not the file. Only the neighbour lists (rows x k) are kept.

Exact search (``index="flat"``) is sharded by *target* rows: a shard task walks source chunks
(outer loop) against its target rows in blocks (inner loop); each block pair serves both
directions, so a task returns the source rows' top-k among its targets (a partial list) and
its target rows' complete top-k among all sources. Approximate search (an IVF index, any FAISS
factory string) trains once per direction on a sample of the base side, then each shard task
adds its base rows to a copy of the trained index and searches every query chunk: partial
candidate lists with global ids. Tasks write their lists to files in a work folder (so they
run the same in a process pool or on other machines), and the merge takes the top-k over the
shards per query chunk; approximate candidates are then re-scored by their exact cosine, as
:func:`mining.knn.search_index` does. The merged lists equal a single pass (one shard) on the
same neighbours: top-k of a union is the top-k of the per-shard top-k lists.

The margin and the retrieval are the in-memory path's own functions (:func:`mining.margin.score`,
:func:`mining.retrieval.retrieve`) on the merged lists, so on exact search the mined pairs are
those of :func:`mining.mine.mine_vectors`.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from labse_common.embedding_store import load_npy, unit_rows
from labse_common.errors import UsageError
from labse_common.filesystems import is_remote
from labse_common.sections.mining import MiningConfig
from labse_common.stats import StageCounter
from labse_common.threads import usable_cpus
from mining import plan as planner
from mining.faiss_lib import faiss
from mining.knn import (
    SAMPLE_SEED,
    Neighbours,
    exact_scores,
    gpu_available,
    merge_topk,
    search_flat,
    topk_rows,
)
from mining.margin import Scored, score
from mining.retrieval import Pairs, retrieve
from mining.shards import ShardRef, shard_refs

log = logging.getLogger(__name__)


def even_bounds(start: int, stop: int, max_rows: int) -> list[tuple[int, int]]:
    """``[start, stop)`` cut into nearly equal ranges of at most ``max_rows``: no tiny tail, so
    every FAISS call stays on its BLAS path (it switches kernels below 20 queries)."""
    n = stop - start
    if n <= 0:
        return []
    parts = -(-n // max(1, max_rows))
    cuts = [start + (n * i) // parts for i in range(parts + 1)]
    return list(zip(cuts[:-1], cuts[1:]))


#: Rows from which a read is spread over threads, one store shard each.
PARALLEL_ROWS = 65_536


class VectorSide:
    """One side of a mining run, read in chunks: a store folder or a ``.npy``.

    ``rows`` (sorted global row numbers) selects the rows mined, e.g. a cleaned side's
    representatives; compact index ``i`` is ``rows[i]``. Every read returns float32 unit rows.
    """

    def __init__(self, path: str | os.PathLike, rows: np.ndarray | None = None) -> None:
        self.path = os.fspath(path)
        self._cache: tuple[str, np.ndarray] | None = None  # one remote shard, read whole
        self.refs: list[ShardRef] = shard_refs(self.path)
        self.total = (
            self.refs[-1].offset + self.refs[-1].stop - self.refs[-1].start if self.refs else 0
        )
        first = self._array(self.refs[0].path) if self.refs else np.zeros((0, 0))
        if first.ndim != 2:
            raise ValueError(f"{self.path}: embeddings must be 2-D, got shape {first.shape}")
        self.dim = int(first.shape[1])
        self.itemsize = int(first.dtype.itemsize)
        del first
        self.rows = None if rows is None else np.asarray(rows, dtype=np.int64)
        if (
            self.rows is not None
            and len(self.rows)
            and (self.rows[0] < 0 or self.rows[-1] >= self.total or np.any(np.diff(self.rows) <= 0))
        ):
            raise ValueError(f"{self.path}: rows must be sorted, unique and < {self.total}")

    def __len__(self) -> int:
        return self.total if self.rows is None else len(self.rows)

    def _array(self, path: str) -> np.ndarray:
        if not is_remote(path):
            return load_npy(path)  # a fresh memory map: its pages leave the RSS when it goes
        if self._cache is None or self._cache[0] != path:
            self._cache = None  # one remote shard in memory at a time
            self._cache = (path, load_npy(path))
        return self._cache[1]

    def _global(self, idx: np.ndarray) -> np.ndarray:
        return idx if self.rows is None else self.rows[idx]

    def _unit(self, block: np.ndarray, where: str) -> np.ndarray:
        # The in-memory path's function, so the rows are bit-identical; the rows given were
        # cleaned by mining.corpus.prepare_side with the same rule (an unusable one is a bug).
        return unit_rows(block, f"{self.path} {where} (pass rows= to mine only usable rows)")

    def read_sorted(self, grows: np.ndarray, threads: int = 1) -> np.ndarray:
        """Unit vectors of sorted global rows, read shard by shard (``threads`` shards at once
        for local stores: each is its own memory map and its own slice of the output)."""
        out = np.empty((len(grows), self.dim), dtype=np.float32)

        def one(ref: ShardRef) -> None:
            lo, hi = np.searchsorted(grows, [ref.offset, ref.offset + ref.stop - ref.start])
            if hi <= lo:
                return
            arr = self._array(ref.path)
            local = grows[lo:hi] - ref.offset + ref.start
            if local[-1] - local[0] + 1 == len(local):  # contiguous: a slice, no index array
                block = arr[int(local[0]) : int(local[-1]) + 1]
            else:
                block = arr[local]
            out[lo:hi] = self._unit(block, f"rows {grows[lo]}..{grows[hi - 1]}")
            del arr, block

        # Threads only for large reads (a merge chunk's candidates): small ones gain nothing and
        # would map several shards at once. Remote shards go one at a time: the side keeps one
        # downloaded shard in memory.
        if (
            threads > 1
            and len(grows) >= PARALLEL_ROWS
            and len(self.refs) > 1
            and not any(is_remote(r.path) for r in self.refs)
        ):
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(one, self.refs))
        else:
            for ref in self.refs:
                one(ref)
        return out

    def read(self, a: int, b: int, threads: int = 1) -> np.ndarray:
        """Compact rows ``[a, b)``."""
        return self.read_sorted(self._global(np.arange(a, b, dtype=np.int64)), threads)

    def gather(self, idx: np.ndarray) -> np.ndarray:
        """Compact rows in any order (repeats allowed)."""
        if len(idx) == 0:
            return np.zeros((0, self.dim), np.float32)
        uniq, inv = np.unique(np.asarray(idx, dtype=np.int64), return_inverse=True)
        return self.read_sorted(self._global(uniq))[inv]

    def sample(self, size: int, seed: int) -> np.ndarray:
        """The training sample :func:`mining.knn.build_index` takes (same generator and rows)."""
        n = len(self)
        take = min(n, size)
        rng = np.random.default_rng(seed)
        pick = np.sort(rng.choice(n, size=take, replace=False)) if take < n else np.arange(n)
        return self.read_sorted(self._global(pick))


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


# ---------------------------------------------------------------------------------------------
# List files: a .npy header then rows appended chunk by chunk (nothing held, nothing mapped).


class _ListWriter:
    def __init__(self, path: str, rows: int, width: int, dtype: str) -> None:
        self.path, self.shape, self.dtype = path, (rows, width), np.dtype(dtype)
        self.f = open(path, "wb")
        np.lib.format.write_array_header_1_0(
            self.f,
            {
                "descr": np.lib.format.dtype_to_descr(self.dtype),
                "fortran_order": False,
                "shape": self.shape,
            },
        )
        self.written = 0

    def write(self, block: np.ndarray) -> None:
        block = np.ascontiguousarray(block, dtype=self.dtype)
        assert block.shape[1:] == self.shape[1:], (block.shape, self.shape)
        self.f.write(block.tobytes())
        self.written += len(block)

    def close(self) -> None:
        self.f.close()
        if self.written != self.shape[0]:
            raise RuntimeError(f"{self.path}: wrote {self.written} of {self.shape[0]} rows")


def _read_rows(path: str, a: int, b: int) -> np.ndarray:
    arr = np.load(path, mmap_mode="r")
    out = np.array(arr[a:b])
    del arr
    return out


# ---------------------------------------------------------------------------------------------
# Shard tasks (module-level and given only paths and numbers, so a spawned process runs them).


@dataclass(frozen=True)
class _Task:
    kind: str  # "flat" or "ann"
    direction: str  # "fwd" (src queries, trg base) / "bwd"; "both" for flat
    query_path: str
    query_rows: np.ndarray | None
    base_path: str
    base_rows: np.ndarray | None
    base_range: tuple[int, int]
    k: int  # flat: k; ann: k * rerank candidates
    knn: MiningConfig
    chunk_rows: int
    block_rows: int
    out: dict[str, str]
    trained: str = ""  # ann: the trained (empty) index file
    nprobe: int = 16
    threads: int | None = None
    resume: bool = False


def _done(t: _Task) -> bool:
    """A resumed run skips a task whose lists were all written (its marker is last)."""
    return t.resume and os.path.exists(t.out["done"])


def _mark_done(t: _Task) -> None:
    with open(t.out["done"], "w"):
        pass


def _set_threads(n: int | None) -> None:
    if n:
        faiss.omp_set_num_threads(max(1, n))


def _exact_cfg(cfg):
    # One FAISS call per block pair: search_flat must not re-cut our chunks (a tiny tail
    # would leave FAISS's BLAS path and change the last bits of a few cosines).
    return dataclasses.replace(cfg, mem_gb=1e9, progress=False)


def _flat_task(t: _Task) -> dict[str, str]:
    """Source chunks (outer) x this shard's target blocks (inner), exact, both directions."""
    if _done(t):
        return t.out
    _set_threads(t.threads)
    src, trg = VectorSide(t.query_path, t.query_rows), VectorSide(t.base_path, t.base_rows)
    t0, t1 = t.base_range
    cfg = _exact_cfg(t.knn)
    k_f, k_b = min(t.k, len(trg)), min(t.k, len(src))
    bwd_s = np.full((t1 - t0, k_b), -np.inf, np.float32)
    bwd_i = np.full((t1 - t0, k_b), -1, np.int64)
    fwd_s_w = _ListWriter(t.out["fwd_sims"], len(src), k_f, "float32")
    fwd_i_w = _ListWriter(t.out["fwd_inds"], len(src), k_f, "int64")
    blocks = even_bounds(t0, t1, t.block_rows)
    for q0, q1 in even_bounds(0, len(src), t.chunk_rows):
        xq = src.read(q0, q1)
        fs = np.full((q1 - q0, k_f), -np.inf, np.float32)
        fi = np.full((q1 - q0, k_f), -1, np.int64)
        for b0, b1 in blocks:
            yb = trg.read(b0, b1)
            s, i = search_flat(xq, yb, min(k_f, b1 - b0), cfg)
            fs, fi = merge_topk(fs, fi, s, i + b0, k_f)
            s, i = search_flat(yb, xq, min(k_b, q1 - q0), cfg)
            r = slice(b0 - t0, b1 - t0)
            bwd_s[r], bwd_i[r] = merge_topk(bwd_s[r], bwd_i[r], s, i + q0, k_b)
            del yb
        fwd_s_w.write(fs)
        fwd_i_w.write(fi)
    fwd_s_w.close()
    fwd_i_w.close()
    np.save(t.out["bwd_sims"], bwd_s)
    np.save(t.out["bwd_inds"], bwd_i)
    _mark_done(t)
    return t.out


def _load_index(path: str, knn_cfg):
    index = faiss.read_index(path)
    use_gpu = gpu_available() if knn_cfg.gpu is None else bool(knn_cfg.gpu and gpu_available())
    return faiss.index_cpu_to_all_gpus(index) if use_gpu else index


def _ann_task(t: _Task) -> dict[str, str]:
    """Add this shard's base rows to the trained index, search every query chunk."""
    if _done(t):
        return t.out
    _set_threads(t.threads)
    queries, base = VectorSide(t.query_path, t.query_rows), VectorSide(t.base_path, t.base_rows)
    b0, b1 = t.base_range
    index = _load_index(t.trained, t.knn)
    for a, b in even_bounds(b0, b1, t.block_rows):
        index.add(base.read(a, b))
    try:
        faiss.ParameterSpace().set_index_parameter(index, "nprobe", t.nprobe)
    except RuntimeError:
        pass  # no inverted lists to probe
    kk = min(t.k, b1 - b0)
    sw = _ListWriter(t.out["sims"], len(queries), kk, "float32")
    iw = _ListWriter(t.out["inds"], len(queries), kk, "int64")
    for q0, q1 in even_bounds(0, len(queries), t.chunk_rows):
        d, i = index.search(queries.read(q0, q1), kk)
        i = np.where(i >= 0, i + b0, -1)
        sw.write(d)
        iw.write(i)
    sw.close()
    iw.close()
    del index
    _mark_done(t)
    return t.out


def _run_tasks(fn, tasks: Sequence[_Task], layout: Layout) -> list[dict[str, str]]:
    if layout.runner is not None:
        return list(layout.runner(fn, list(tasks)))
    workers = layout.workers
    if workers <= 1 or len(tasks) <= 1:
        return [fn(t) for t in tasks]
    # "spawn": forking a parent whose FAISS/OpenMP threads already ran can deadlock the child.
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(workers, len(tasks)), mp_context=ctx) as pool:
        return list(pool.map(fn, tasks))


# ---------------------------------------------------------------------------------------------
# Merge: top-k over shards per query chunk.


def merge_shard_lists(
    parts: Sequence[tuple[str, str]], n_queries: int, width: int, merge_rows: int
) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
    """Per query chunk ``(q0, q1, sims, inds)``: the best ``width`` over the shards' lists
    (files of ``(sims, inds)`` in shard order), sorted by decreasing score."""
    for q0, q1 in even_bounds(0, n_queries, merge_rows):
        sims = np.concatenate([_read_rows(s, q0, q1) for s, _ in parts], axis=1)
        inds = np.concatenate([_read_rows(i, q0, q1) for _, i in parts], axis=1)
        yield q0, q1, *topk_rows(sims, inds, width)


def _rescore(
    queries: VectorSide,
    base: VectorSide,
    q0: int,
    q1: int,
    cand: np.ndarray,
    k: int,
    threads: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact cosines of approximate candidates (as mining.knn.search_index), best ``k``.

    Each distinct candidate row is read once (sorted, so a store shard is read in order) and
    scored against its queries in cache-sized blocks, on ``threads`` threads."""
    xq = queries.read(q0, q1, threads)
    ok = cand >= 0
    uniq, inv = np.unique(cand[ok], return_inverse=True)
    local = np.full(cand.shape, -1, np.int64)
    local[ok] = inv
    xb = (
        base.read_sorted(base._global(uniq), threads)
        if len(uniq)
        else np.zeros((1, base.dim), np.float32)
    )
    s = exact_scores(xq, xb, local, threads)
    return topk_rows(s, cand, k)


# ---------------------------------------------------------------------------------------------
# Driver.


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
            _Task(
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
    outs = _run_tasks(_flat_task, tasks, layout)
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
            _Task(
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
    outs = _run_tasks(_ann_task, tasks, layout)
    secs[f"search_{name}"] = time.perf_counter() - t
    t = time.perf_counter()
    width = min(kk, len(base))
    parts = [(o["sims"], o["inds"]) for o in outs]
    for q0, q1, _, cand in merge_shard_lists(parts, len(queries), width, merge_rows):
        sims[q0:q1], inds[q0:q1] = _rescore(
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
