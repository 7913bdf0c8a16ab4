"""The ``lexicon:`` section: IBM Model 1 dictionaries fitted on trusted pairs
(``python -m filters lexicon``; the features lex_fwd and lex_bwd of the combined score)."""

from __future__ import annotations

from dataclasses import dataclass

from labse_common.config_values import ConfigError, option


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
        0,
        min=0,
        help="entries kept at most per word of a pivot dictionary (a pair to mine with no "
        "training pairs, composed through a shared language), the likeliest ones >= min_prob; "
        "0 = every one >= min_prob (with pivot_sharpen 2, no cap ranks PUD de-fr best: "
        "bench/README.md)",
    )
    pivot_sharpen: float = option(
        2.0,
        min=0.0,
        min_exclusive=True,
        help="power each factor of a pivot dictionary is raised to, each word's row "
        "renormalised, before the product: 2 keeps the composed mass on likely partners instead "
        "of the pivot language's function words (PUD de-fr ranked first 0.49 -> 0.565); 1 = "
        "the plain product",
    )
    progress: bool = option(True, help="progress bar while scoring")

    def validate(self) -> None:
        # A probability is at most 1: from 1 up nearly every entry is dropped, and the saved
        # dictionary would explain nothing.
        if not self.min_prob < 1:
            raise ConfigError(f"lexicon.min_prob={self.min_prob!r} must be < 1 (a probability)")


CONFIG = LexiconConfig
