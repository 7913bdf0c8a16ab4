"""The ``lexicon:`` section: IBM Model 1 dictionaries fitted on trusted pairs
(``python -m filters lexicon``; the features lex_fwd and lex_bwd of the combined score)."""

from __future__ import annotations

from dataclasses import dataclass

from labse_common.config import ConfigError, option


@dataclass
class LexiconConfig:
    iterations: int = option(5, min=1, help="EM iterations of IBM Model 1 (5: the usual choice)")
    max_tokens: int = option(
        64, min=1, help="tokens kept per side (longer sides cut, when fitting and scoring)"
    )
    max_pairs: int = option(
        500_000,
        min=1,
        help="trusted pairs fitted at most (the first ones; the rest counted over_max_pairs): "
        "the demo's 20,150 pairs take 19 s and 1.0 GiB at peak, growing with the distinct "
        "word pairs",
    )
    min_prob: float = option(
        1.0e-3,
        min=0.0,
        min_exclusive=True,
        help="dictionary entries below this are dropped when saved, in (0, 1) (demo: 2.1M "
        "entries, 11 MB)",
    )
    pivot_top_k: int = option(
        5,
        min=1,
        help="entries kept per word of a pivot dictionary (a pair to mine with no training "
        "pairs, composed through a shared language), the likeliest ones >= min_prob (5 ranks "
        "PUD de-fr better than 20: bench/README.md)",
    )
    progress: bool = option(True, help="progress bar while scoring")

    def validate(self) -> None:
        # A probability is at most 1: from 1 up nearly every entry is dropped, and the saved
        # dictionary would explain nothing.
        if not self.min_prob < 1:
            raise ConfigError(f"lexicon.min_prob={self.min_prob!r} must be < 1 (a probability)")


CONFIG = LexiconConfig
