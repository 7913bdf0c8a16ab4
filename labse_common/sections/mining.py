"""The ``mining:`` section: kNN search, margin scoring and retrieval."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from labse_common.config import option


@dataclass
class MiningConfig:
    k: int = option(4, min=1, help="margin neighbourhood (LASER default 4)")
    margin: Literal["ratio", "distance", "absolute"] = option("ratio")
    mode: Literal["fwd", "bwd", "intersect", "max", "union"] = option("max")
    threshold: float | None = option(None, help="keep pairs with margin > threshold; null = all selected")
    unify: bool = option(False, help="mine each distinct sentence once")
    index: str = option("flat", help="flat | ivf | ivfpq | opq | a FAISS factory string")
    mem_gb: float = option(2.0, min=0.0, min_exclusive=True, help="kNN working-set budget")
    nprobe: int = option(16, min=1)
    train_size: int = option(200_000, min=1)
    rerank: int = option(4, min=1)
    batch_size: int = option(64, min=1)
    workers: int = option(1, min=1)
    shard_rows: int | None = option(None, min=1)
    pairs: list[str] = option([], help="for mine-many, e.g. [de-en, fr-en]")


CONFIG = MiningConfig
