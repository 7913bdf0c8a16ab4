"""One side of a bounded-memory mining run, read in chunks (:class:`VectorSide`): a store folder
or a ``.npy``, each chunk memory-mapped, copied to float32 unit rows and unmapped again, so the
resident set holds one chunk, not the file; and :func:`even_bounds`, how rows are cut into
chunks. :mod:`mining.bounded` mines with it, :mod:`mining.plan_calibrate` times it.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from labse_common.embedding_store import load_npy, unit_rows
from labse_common.filesystems import is_remote
from mining.shards import ShardRef, shard_refs


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
