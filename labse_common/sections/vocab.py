"""The ``vocab:`` section: smoothed counting and the wordpiece learner."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from labse_common.config_values import option
from labse_common.shuffle_options import shuffle_option, spill_fan_in_option, spill_rows_option


@dataclass
class LearnerConfig:
    """The tensorflow/text top-down wordpiece algorithm's knobs."""

    num_iterations: int = option(4, min=1, help="passes of count-and-segment per threshold")
    max_token_length: int = option(50, min=1, help="words longer than this are not learned from")
    max_input_words: int = option(5_000_000, min=1, help="most frequent words the learner reads")
    max_unique_chars: int = option(20_000, min=1, help="alphabet budget")
    char_min_count: float = option(1, min=0, help="smoothed count a character needs to get a token")
    slack_ratio: float = option(0.05, min=0.0, max=1.0, help="search window below vocab_size")
    decrement: Literal["all", "selected"] = option(
        "all", help="prefix counts reduced by every substring (published code) or only kept ones"
    )


@dataclass
class VocabConfig:
    # At least the 5 reserved tokens plus one character in both forms; whether the alphabet of
    # the input fits is checked on a sample before counting (pipelines/vocab.py).
    vocab_size: int = option(
        8000, min=7, help="entries of vocab.txt, reserved tokens included (paper: 501153)"
    )
    smoothing: float = option(
        0.3,
        min=0.0,
        max=1.0,
        help="language smoothing exponent alpha: 1 = raw counts, 0 = equal mass per language",
    )
    min_count: float = option(
        1, min=0, help="words whose smoothed count is below this are not learned from"
    )
    max_word_length: int = option(100, min=1, help="longer word occurrences are dropped")
    heldout_fraction: float = option(
        0.02, min=0.0, max=0.5, help="hashed share kept back for vocab_stats.json"
    )
    max_heldout_per_lang: int = option(
        2000, min=0, help="held-out sentences evaluated per language"
    )
    shuffle: str = shuffle_option("word counts", "word shard")
    spill_rows: int = spill_rows_option(500_000, "distinct (word, language) counts")
    spill_fan_in: int = spill_fan_in_option()
    learner: LearnerConfig = field(default_factory=LearnerConfig)


CONFIG = VocabConfig
