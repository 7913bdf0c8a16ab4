"""Embedding helpers for mining; the store itself is ``labse_common.embedding_store``.

The store (layout, writer, memory-mapped reader, old layouts) has one definition in
``labse_common/embedding_store.py``; it is re-exported here for the mining code.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from labse_common.embedding_store import (  # noqa: F401 - re-exported
    MANIFEST,
    EmbeddingStore,
    ShardInfo,
    StoreWriter,
    load_npy,
    load_vectors,
)

log = logging.getLogger(__name__)


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
