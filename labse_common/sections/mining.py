"""The ``mining:`` section: kNN search, margin scoring and retrieval."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from labse_common.config import option

# The one list of each: the loader checks values against these Literals, the CLIs offer them as
# choices, and mining.retrieval / mining.margin implement them (they re-export these tuples and
# check their implementations cover exactly these names when they load).
RetrievalMode = Literal["fwd", "bwd", "intersect", "max", "union"]
Margin = Literal["ratio", "distance", "absolute"]
RETRIEVAL_MODES: tuple[str, ...] = get_args(RetrievalMode)
MARGINS: tuple[str, ...] = get_args(Margin)


@dataclass
class MiningConfig:
    """What ``mining.mine``, ``mining.many``, ``mining.knn`` and the Beam mining job read: the
    libraries take this object as loaded, none re-declares its keys."""

    k: int = option(4, min=1, help="margin neighbourhood (LASER default 4)")
    margin: Margin = option(
        "ratio", help="margin(a, b) = a/b, a-b or a, with b the mean of the k-neighbourhoods"
    )
    mode: RetrievalMode = option("max", help="retrieval mode (LASER)")
    threshold: float | None = option(
        None, help="keep pairs with margin > threshold; null = all selected"
    )
    unify: bool = option(False, help="mine each distinct sentence once")
    index: str = option(
        "flat",
        help="flat (exact, blocked) | auto (the planner's choice for the sizes and mem_gb) | "
        "ivf_flat | ivf_sq8 | ivf_pq | ivf_pqfs | opq_ivf_pq (sized by the planner) | ivf | "
        "ivfpq | opq | a FAISS factory string",
    )
    mem_gb: float = option(2.0, min=0.0, min_exclusive=True, help="kNN working-set budget")
    nprobe: int = option(16, min=1, help="IVF lists probed per query")
    train_size: int = option(200_000, min=1, help="vectors sampled to train an IVF/PQ index")
    # 16: with 4-bit PQ codes, 16 candidates (rerank 4) held 70% of the exact top-4 at 1M x 1M
    # synthetic vectors, 64 held 98% for 1.8x the time (bench/README, "Buying recall").
    rerank: int = option(
        16, min=1, help="approximate search fetches k*rerank candidates, re-scored exactly"
    )
    gpu: bool | None = option(
        None, help="FAISS on the GPU (true) or the CPU (false); null = the GPU when FAISS sees one"
    )
    batch_size: int = option(64, min=1, help="encoding batch size when mining with --model")
    workers: int = option(1, min=1, help="processes for sharded search; >1 implies sharding")
    shard_rows: int | None = option(
        None, min=1, help="rows per shard of sharded search; null = one shard per worker"
    )
    lexicon_weight: float = option(
        0.0,
        min=0.0,
        help="with --lexicon: each sentence's lexicon_candidates nearest by margin are re-ranked "
        "by margin + weight * (lex_fwd + lex_bwd); 0 = margin alone (--lexicon then only adds "
        "the two columns to the mined pairs)",
    )
    lexicon_candidates: int = option(
        16, min=1, help="candidates per sentence re-ranked with the lexicon (at least k)"
    )
    pairs: list[str] = option([], help="for mine-many, e.g. [de-en, fr-en]")
    progress: bool = option(True, help="progress bars of the kNN search")


CONFIG = MiningConfig
