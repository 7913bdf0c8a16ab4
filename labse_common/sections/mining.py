"""The ``mining:`` section: kNN search, margin scoring and retrieval.

Margins, retrieval modes and index kinds are named once, beside their code, in the registries
below (:mod:`labse_common.registry`): ``mining.margin``, ``mining.retrieval`` and
``mining.indexes`` register them. The loader checks ``margin`` and ``mode`` against them, the
CLIs offer them as choices, and ``--reference`` lists them.
"""

from __future__ import annotations

from dataclasses import dataclass

from labse_common.config_values import option
from labse_common.registry import Registry

MARGINS: Registry = Registry("margin", "mining.margin")
RETRIEVAL_MODES: Registry = Registry("retrieval mode", "mining.retrieval")
#: Open: a FAISS factory string (and ``auto``, ``ivfNNN``, an old short name) is valid too, and
#: FAISS parses it only when the index is built (mining.indexes.check_factory).
INDEX_KINDS: Registry = Registry("index kind", "mining.indexes", closed=False)


@dataclass
class MiningConfig:
    """What ``mining.mine``, ``mining.many``, ``mining.knn`` and the Beam mining job read: the
    libraries take this object as loaded, none re-declares its keys."""

    k: int = option(4, min=1, help="margin neighbourhood (LASER default 4)")
    margin: str = option(
        "ratio",
        names=MARGINS,
        help="margin(a, b) = a/b, a-b or a, with b the mean of the k-neighbourhoods",
    )
    mode: str = option("max", names=RETRIEVAL_MODES, help="retrieval mode (LASER)")
    threshold: float | None = option(
        None, help="keep pairs with margin > threshold; null = all selected"
    )
    unify: bool = option(False, help="mine each distinct sentence once")
    index: str = option(
        "flat",
        names=INDEX_KINDS,
        help="an index kind (flat: exact, blocked; the others approximate, sized by the planner), "
        "auto (the planner's choice for the sizes and mem_gb), a short name of earlier releases "
        "(e.g. ivf, ivfpq), ivfNNN (NNN lists) or a FAISS factory string",
    )
    mem_gb: float = option(2.0, min=0.0, min_exclusive=True, help="kNN working-set budget")
    nprobe: int = option(16, min=1, help="IVF lists probed per query")
    train_size: int = option(200_000, min=1, help="vectors sampled to train an IVF/PQ index")
    # 16: with 4-bit PQ codes, 16 candidates (rerank 4) held 70% of the exact top-4 at 1M x 1M
    # synthetic vectors, 64 held 98% for 1.8x the time (bench/HISTORY.md, "Buying recall").
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
