"""A made-up language pair for the lexicon tests (mining.lexicon, filters lexicon, the miner's
re-ranking)."""

from __future__ import annotations

import random

# A made-up language pair: source word i translates to target word i; order is shuffled, so only
# co-occurrence over many sentences can teach the dictionary.
SRC_WORDS = [f"quel{i}" for i in range(30)]
TRG_WORDS = [f"zib{i}" for i in range(30)]


def toy_corpus(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """Every sentence also holds a function word on each side ("quelthe", "zibthe"), which
    co-occurs with every word as often as its translation does: counting co-occurrences cannot
    tell them apart, EM's explaining-away can."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        ids = rng.sample(range(30), rng.randint(3, 8))
        trg = [TRG_WORDS[i] for i in ids] + ["zibthe"]
        rng.shuffle(trg)
        pairs.append((" ".join(["quelthe", *(SRC_WORDS[i] for i in ids)]), " ".join(trg)))
    return pairs
