"""The shard tasks of the bounded miner (:mod:`mining.bounded`) and the list files they write.

A task is module-level and given only paths and numbers (:class:`ShardTask`), so a spawned
process or a Beam worker runs it: :func:`flat_task` walks source chunks against its target
blocks, exact, both directions; :func:`ann_task` adds its base rows to a copy of the trained
index and searches every query chunk. Each writes its neighbour lists as ``.npy`` files, rows
appended chunk by chunk (:class:`ListWriter`: nothing held, nothing mapped), and
:func:`merge_shard_lists` takes the top-k over the shards per query chunk; :func:`rescore`
gives approximate candidates their exact cosine.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from labse_common.sections.mining import MiningConfig
from mining.faiss_lib import faiss
from mining.knn import (
    exact_scores,
    gpu_available,
    merge_topk,
    search_flat,
    topk_rows,
)
from mining.vector_side import VectorSide, even_bounds


class ListWriter:
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


def read_rows(path: str, a: int, b: int) -> np.ndarray:
    arr = np.load(path, mmap_mode="r")
    out = np.array(arr[a:b])
    del arr
    return out


@dataclass(frozen=True)
class ShardTask:
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


def _done(t: ShardTask) -> bool:
    """A resumed run skips a task whose lists were all written (its marker is last)."""
    return t.resume and os.path.exists(t.out["done"])


def _mark_done(t: ShardTask) -> None:
    with open(t.out["done"], "w"):
        pass


def set_threads(n: int | None) -> None:
    if n:
        faiss.omp_set_num_threads(max(1, n))


def exact_cfg(cfg):
    # One FAISS call per block pair: search_flat must not re-cut our chunks (a tiny tail
    # would leave FAISS's BLAS path and change the last bits of a few cosines).
    return dataclasses.replace(cfg, mem_gb=1e9, progress=False)


def flat_task(t: ShardTask) -> dict[str, str]:
    """Source chunks (outer) x this shard's target blocks (inner), exact, both directions."""
    if _done(t):
        return t.out
    set_threads(t.threads)
    src, trg = VectorSide(t.query_path, t.query_rows), VectorSide(t.base_path, t.base_rows)
    t0, t1 = t.base_range
    cfg = exact_cfg(t.knn)
    k_f, k_b = min(t.k, len(trg)), min(t.k, len(src))
    bwd_s = np.full((t1 - t0, k_b), -np.inf, np.float32)
    bwd_i = np.full((t1 - t0, k_b), -1, np.int64)
    fwd_s_w = ListWriter(t.out["fwd_sims"], len(src), k_f, "float32")
    fwd_i_w = ListWriter(t.out["fwd_inds"], len(src), k_f, "int64")
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


def load_index(path: str, knn_cfg):
    index = faiss.read_index(path)
    use_gpu = gpu_available() if knn_cfg.gpu is None else bool(knn_cfg.gpu and gpu_available())
    return faiss.index_cpu_to_all_gpus(index) if use_gpu else index


def ann_task(t: ShardTask) -> dict[str, str]:
    """Add this shard's base rows to the trained index, search every query chunk."""
    if _done(t):
        return t.out
    set_threads(t.threads)
    queries, base = VectorSide(t.query_path, t.query_rows), VectorSide(t.base_path, t.base_rows)
    b0, b1 = t.base_range
    index = load_index(t.trained, t.knn)
    for a, b in even_bounds(b0, b1, t.block_rows):
        index.add(base.read(a, b))
    try:
        faiss.ParameterSpace().set_index_parameter(index, "nprobe", t.nprobe)
    except RuntimeError:
        pass  # no inverted lists to probe
    kk = min(t.k, b1 - b0)
    sw = ListWriter(t.out["sims"], len(queries), kk, "float32")
    iw = ListWriter(t.out["inds"], len(queries), kk, "int64")
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


def merge_shard_lists(
    parts: Sequence[tuple[str, str]], n_queries: int, width: int, merge_rows: int
) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
    """Per query chunk ``(q0, q1, sims, inds)``: the best ``width`` over the shards' lists
    (files of ``(sims, inds)`` in shard order), sorted by decreasing score."""
    for q0, q1 in even_bounds(0, n_queries, merge_rows):
        sims = np.concatenate([read_rows(s, q0, q1) for s, _ in parts], axis=1)
        inds = np.concatenate([read_rows(i, q0, q1) for _, i in parts], axis=1)
        yield q0, q1, *topk_rows(sims, inds, width)


def rescore(
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
