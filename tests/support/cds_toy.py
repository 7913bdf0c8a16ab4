"""A toy language pair for the CDS tests: every source word has one target word, so a tiny
model learns it in seconds; TINY are the ``cds`` section's settings for such a model."""

from __future__ import annotations

import numpy as np

# A toy language pair: each source word has one target word; sentences are 2-7 words.
_SRC_WORDS = "le chat chien noir blanc mange dort petit grand rouge bleu vert vite lent".split()
_TRG_WORDS = "the cat dog black white eats sleeps small big red blue green fast slow".split()
LEX = dict(zip(_SRC_WORDS, _TRG_WORDS))

TINY = [
    "vocab_size=200",
    "model.d_model=32",
    "model.attention_heads=2",
    "model.ffn_dim=64",
    "model.encoder_layers=1",
    "model.decoder_layers=1",
    "model.max_length=12",
    "batch_size=16",
    "noisy_epochs=2",
    "clean_epochs=1",
    "min_trusted=10",
    "min_noisy=10",
    "progress=false",
    "warmup_steps=2",
    "device=cpu",
]


def toy_pairs(n: int, seed: int) -> tuple[list[str], list[str]]:
    """n sentence pairs (2-7 words each, word for word), the same for the same seed."""
    rng = np.random.default_rng(seed)
    src, trg = [], []
    for _ in range(n):
        words = list(rng.choice(_SRC_WORDS, size=int(rng.integers(2, 8))))
        src.append(" ".join(words) + " .")
        trg.append(" ".join(LEX[w] for w in words) + " .")
    return src, trg
