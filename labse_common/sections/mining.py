"""The ``mining:`` section: kNN search, margin scoring and retrieval."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from labse_common.config import option


@dataclass
class MiningConfig:
    k: int = option(4, min=1, help="margin neighbourhood (LASER default 4)")
    margin: Literal["ratio", "distance", "absolute"] = option("ratio", help="margin(a, b) = a/b, a-b or a, with b the mean of the k-neighbourhoods")
    mode: Literal["fwd", "bwd", "intersect", "max", "union"] = option("max", help="retrieval mode (LASER)")
    threshold: float | None = option(None, help="keep pairs with margin > threshold; null = all selected")
    unify: bool = option(False, help="mine each distinct sentence once")
    index: str = option("flat", help="flat | ivf | ivfpq | opq | a FAISS factory string")
    mem_gb: float = option(2.0, min=0.0, min_exclusive=True, help="kNN working-set budget")
    nprobe: int = option(16, min=1, help="IVF lists probed per query")
    train_size: int = option(200_000, min=1, help="vectors sampled to train an IVF/PQ index")
    rerank: int = option(4, min=1, help="approximate search fetches k*rerank candidates, re-scored exactly")
    batch_size: int = option(64, min=1, help="encoding batch size when mining with --model")
    workers: int = option(1, min=1, help="processes for sharded exact search; >1 implies sharding")
    shard_rows: int | None = option(None, min=1, help="rows per shard of sharded search; null = the store's shards")
    pairs: list[str] = option([], help="for mine-many, e.g. [de-en, fr-en]")


CONFIG = MiningConfig
