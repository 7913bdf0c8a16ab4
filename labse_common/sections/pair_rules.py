"""The ``pair_rules:`` section: hard rules for sentence pairs (``python -m filters rules``).

The rule names are declared once, beside their code: ``filters.bitext.pair_rules`` registers one
class per rule in :data:`RULES`, in the default order; this section holds the empty registry and
the name of that module (:mod:`labse_common.registry`), so ``steps`` is checked against the
classes when the config loads, and ``--reference`` lists them.
"""

from __future__ import annotations

from dataclasses import dataclass

from labse_common.config_values import ConfigError, option
from labse_common.registry import Registry

#: Every rule, in the default order (cheap ones first, LID, a model load, last).
RULES: Registry = Registry("rule", "filters.bitext.pair_rules")


@dataclass
class PairRulesConfig:
    steps: list[str] = option(
        default_factory=lambda: list(RULES),
        names=RULES,
        help="the rules to run, in order (cheap ones first, LID last); the default is every "
        "rule, in the order they are declared",
    )
    min_length: float = option(
        3.0, min=0.0, help="a side shorter than this (length units) is dropped"
    )
    max_length: float = option(
        1000.0, min=1.0, help="a side longer than this (length units) is dropped"
    )
    max_ratio: float = option(3.0, min=1.0, help="longer/shorter side length, in length units")
    ratio_min_length: float = option(
        15.0,
        min=0.0,
        help="the ratio rule applies only when the longer side has at least this many units (short pairs have noisy ratios)",
    )
    script_units: dict[str, float] = option(
        {"Han": 3.0, "Hiragana": 1.5, "Katakana": 1.5, "Hangul": 2.0},
        help="length units per character of these Unicode scripts (others count 1), so CJK is not penalised",
    )
    min_script_ratio: float = option(
        0.3,
        min=0.0,
        max=1.0,
        help="a side with a smaller fraction of its letters in its language's script is dropped",
    )
    lid_model: str | None = option(
        None, help="fastText LID model path; null = the lid.176.ftz shipped in filters/models"
    )
    lid_threshold: float = option(
        0.5,
        min=0.0,
        max=1.0,
        help="drop a side when LID names another language with at least this probability",
    )
    lid_declared_min: float = option(
        0.1, min=0.0, max=1.0, help="... and gives the declared language less than this"
    )
    lid_min_length: float = option(
        20.0,
        min=0.0,
        help="sides shorter than this (length units) skip LID (unreliable on a few words)",
    )
    max_overlap: float = option(
        0.6,
        min=0.0,
        max=1.0,
        help="word-set Jaccard overlap above which a pair is an untranslated copy",
    )
    copy_min_tokens: int = option(
        3, min=1, help="the copy rule needs at least this many words on each side"
    )
    max_repeats: int = option(
        3,
        min=1,
        help="a unit of 3-50 characters repeated more than this many times in a row drops the side",
    )
    length_buckets: list[int] = option(
        [0, 10, 20, 50, 100, 200, 500],
        min=0,
        help="lower bounds of the length buckets of the summary (characters of the shorter side)",
    )
    write_dropped: bool = option(
        False, help="also write the dropped pairs with their step and reason"
    )

    def validate(self) -> None:
        if len(set(self.steps)) != len(self.steps):
            raise ConfigError("pair_rules.steps: a rule is listed twice")
        if self.max_length < self.min_length:
            raise ConfigError(
                f"pair_rules.max_length={self.max_length} is below min_length={self.min_length}"
            )
        if (
            sorted(self.length_buckets) != self.length_buckets
            or not self.length_buckets
            or self.length_buckets[0] != 0
        ):
            raise ConfigError("pair_rules.length_buckets: increasing lower bounds starting at 0")
        for name, w in self.script_units.items():
            if not w > 0:
                raise ConfigError(f"pair_rules.script_units.{name} must be > 0")


CONFIG = PairRulesConfig
