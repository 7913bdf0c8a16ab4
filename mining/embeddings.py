"""Embedding store: shards of ``.npy`` vectors plus a Parquet of ids and metadata.

Layout of a store directory::

    store.json              {"dim": D, "dtype": "float16", "shards": [{"name": ..., "rows": n}]}
    shard_00000.npy         (n, D) L2-normalised vectors, row i = row i of the Parquet
    shard_00000.parquet     columns: row (global row number), id, text, and any metadata

Shards are memory-mapped when read, so a corpus larger than RAM can be searched block by block.
A plain ``.npy`` file (row i = line i of the text) is accepted wherever a store is.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

log = logging.getLogger(__name__)

MANIFEST = "store.json"


@dataclass
class ShardInfo:
    name: str
    rows: int


class EmbeddingStore:
    """Read access to a store directory written by :class:`StoreWriter`."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        manifest = self.path / MANIFEST
        if not manifest.is_file():
            raise FileNotFoundError(f"not an embedding store (no {MANIFEST}): {self.path}")
        meta = json.loads(manifest.read_text(encoding="utf-8"))
        self.dim = int(meta["dim"])
        self.dtype = str(meta["dtype"])
        self.shards = [ShardInfo(s["name"], int(s["rows"])) for s in meta["shards"]]

    def __len__(self) -> int:
        return sum(s.rows for s in self.shards)

    def vectors(self, i: int, mmap: bool = True) -> np.ndarray:
        """Vectors of shard ``i``, memory-mapped by default (no copy until used)."""
        arr = np.load(self.path / f"{self.shards[i].name}.npy", mmap_mode="r" if mmap else None)
        if arr.ndim != 2 or arr.shape[1] != self.dim:
            raise ValueError(f"{self.path}: shard {i} has shape {arr.shape}, store dim {self.dim}")
        return arr

    def metadata(self, i: int) -> pa.Table:
        return pq.read_table(self.path / f"{self.shards[i].name}.parquet")

    def iter_vectors(self) -> Iterator[np.ndarray]:
        for i in range(len(self.shards)):
            yield self.vectors(i)

    def all_vectors(self) -> list[np.ndarray]:
        """Every shard as a memory-mapped array (a list, so nothing is concatenated)."""
        return list(self.iter_vectors())

    def all_metadata(self) -> pa.Table:
        if not self.shards:
            return pa.table({"row": pa.array([], pa.int64()), "id": pa.array([], pa.string())})
        return pa.concat_tables([self.metadata(i) for i in range(len(self.shards))])


class StoreWriter:
    """Append vectors (and their ids/metadata) to a store, one shard per ``rows_per_shard``."""

    def __init__(
        self,
        path: str | os.PathLike,
        dim: int,
        dtype: str = "float16",
        rows_per_shard: int = 100_000,
    ) -> None:
        if dtype not in ("float16", "float32"):
            raise ValueError(f"dtype must be float16 or float32, not {dtype!r}")
        if rows_per_shard < 1:
            raise ValueError("rows_per_shard must be >= 1")
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.dim = dim
        self.dtype = dtype
        self.rows_per_shard = rows_per_shard
        self.shards: list[ShardInfo] = []
        self._vecs: list[np.ndarray] = []
        self._meta: list[dict[str, list]] = []
        self._pending = 0
        self._row = 0

    def add(self, vectors: np.ndarray, ids: Sequence[str], **columns: Sequence) -> None:
        vectors = np.asarray(vectors)
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise ValueError(f"vectors of shape {vectors.shape} do not match store dim {self.dim}")
        if len(ids) != len(vectors):
            raise ValueError(f"{len(ids)} ids for {len(vectors)} vectors")
        start = 0
        while start < len(vectors):
            take = min(self.rows_per_shard - self._pending, len(vectors) - start)
            sl = slice(start, start + take)
            meta = {"row": list(range(self._row, self._row + take)), "id": list(ids[sl])}
            for name, col in columns.items():
                meta[name] = list(col[sl])
            self._vecs.append(vectors[sl])
            self._meta.append(meta)
            self._pending += take
            self._row += take
            start += take
            if self._pending >= self.rows_per_shard:
                self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        name = f"shard_{len(self.shards):05d}"
        vecs = np.concatenate(self._vecs).astype(self.dtype, copy=False)
        np.save(self.path / f"{name}.npy", vecs)
        merged: dict[str, list] = {}
        for m in self._meta:
            for k, v in m.items():
                merged.setdefault(k, []).extend(v)
        pq.write_table(pa.table(merged), self.path / f"{name}.parquet")
        self.shards.append(ShardInfo(name, self._pending))
        self._vecs, self._meta, self._pending = [], [], 0

    def close(self) -> EmbeddingStore:
        self._flush()
        manifest = {
            "dim": self.dim,
            "dtype": self.dtype,
            "shards": [{"name": s.name, "rows": s.rows} for s in self.shards],
        }
        tmp = self.path / f"{MANIFEST}.tmp"
        tmp.write_text(json.dumps(manifest, indent=2), encoding="utf-8")
        os.replace(tmp, self.path / MANIFEST)
        return EmbeddingStore(self.path)


def load_vectors(path: str | os.PathLike, mmap: bool = True) -> list[np.ndarray]:
    """Load a ``.npy`` file or a store directory as a list of (memory-mapped) blocks."""
    p = Path(path)
    if p.is_dir():
        return EmbeddingStore(p).all_vectors()
    if not p.is_file():
        raise FileNotFoundError(f"embeddings not found: {p}")
    if p.suffix != ".npy":
        raise ValueError(f"embeddings must be a .npy file or a store directory: {p}")
    arr = np.load(p, mmap_mode="r" if mmap else None)
    if arr.ndim == 1 and arr.size == 0:
        arr = arr.reshape(0, 0)
    if arr.ndim != 2:
        raise ValueError(f"{p}: embeddings must be 2-D (rows, dim), got shape {arr.shape}")
    return [arr]


def blocks_dim(blocks: Sequence[np.ndarray]) -> int:
    dims = {b.shape[1] for b in blocks if b.shape[0]}
    if len(dims) > 1:
        raise ValueError(f"embedding blocks disagree on dimension: {sorted(dims)}")
    return dims.pop() if dims else (blocks[0].shape[1] if blocks else 0)


def valid_mask(x: np.ndarray, chunk: int = 65536) -> np.ndarray:
    """True for rows that are finite and non-zero (NaN/inf/zero vectors cannot be compared)."""
    out = np.empty(len(x), dtype=bool)
    for s in range(0, len(x), chunk):
        b = np.asarray(x[s : s + chunk], dtype=np.float32)
        norms = np.linalg.norm(b, axis=1) if b.size else np.zeros(len(b), np.float32)
        out[s : s + chunk] = np.isfinite(b).all(axis=1) & (norms > 0)
    return out


def normalized(x: np.ndarray) -> np.ndarray:
    """Float32 copy with unit rows (cosine == inner product); rows must be valid."""
    x = np.array(x, dtype=np.float32, copy=True)
    if x.size:
        x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x
