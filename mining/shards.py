"""The shards of a side: the shards of an embedding store, or row ranges of one ``.npy``.

:mod:`mining.bounded` reads a side through these references, chunk by chunk; the search itself
(sharded, in processes or as Beam elements, merged to equal one pass) lives there.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from labse_common.embedding_store import (
    MANIFEST,
    EmbeddingStore,
    exists,
    load_npy,
)
from labse_common.filesystems import is_remote, join

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
