"""The ``combine:`` section: the labelled sample of mined pairs and the combined pair score.

The feature names are declared once, beside their code: ``filters.bitext.combine`` registers
each score column it reads and each feature it derives from the text in :data:`FEATURES`
(:mod:`labse_common.registry`); ``validate`` checks ``combine.features`` against it at load. A
rule flag column (``rule_<name>``) of a user's own table is a feature too, by its prefix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from labse_common.config_values import ConfigError, option
from labse_common.registry import Registry

#: Feature name -> how it is computed (None: a score column read from the pairs table).
FEATURES: Registry = Registry("feature", "filters.bitext.combine")
#: How a rule flag column is named in a user's own pairs table: any such boolean column is a
#: feature (the runner's rules stage drops failing pairs, so its tables have none).
RULE_PREFIX = "rule_"


def known_feature(name: str) -> bool:
    """Whether ``name`` can be a feature of some pairs table: a registered feature (a score
    column or a derived one) or a rule flag. ``validate`` checks ``combine.features`` with it."""
    return name in FEATURES or (name.startswith(RULE_PREFIX) and name != RULE_PREFIX)


def known_feature_names() -> list[str]:
    """The known features as the config's error line lists them."""
    return [*FEATURES, f"{RULE_PREFIX}<name>"]


@dataclass
class CombineConfig:
    sample_size: int = option(
        300, min=10, help="mined pairs drawn for labelling (`filters sample`)"
    )
    labels: str | None = option(
        None,
        help="labels from an earlier run (a labelling TSV with label, src, trg): matched to this "
        "run's mined pairs by their text and prefilled; unmatched rows are counted, never guessed",
    )
    margin_buckets: int = option(
        4, min=1, help="margin quantile buckets per language pair (sample strata)"
    )
    features: list[str] | None = option(
        None,
        help="feature names to combine; null = every score column the pairs have, the derived text features and rule_* flags",
    )
    folds: int = option(
        5,
        min=2,
        help="stratified folds for the out-of-fold probabilities the threshold is chosen on",
    )
    c: float = option(
        1.0, min=0.0, min_exclusive=True, help="inverse L2 strength of the logistic regression"
    )
    target: float = option(
        0.8, min=0.0, min_exclusive=True, max=1.0, help="GOOD share the kept pairs must reach"
    )
    bootstrap: int = option(1000, min=10, help="bootstrap resamples for the intervals")
    confidence: float = option(0.9, min=0.5, max=0.999, help="two-sided level of the intervals")
    min_labelled: int = option(
        30,
        min=2,
        help="fewer labelled pairs (globally, or per source language for its own threshold) is refused",
    )
    min_per_label: int = option(5, min=1, help="fewer GOOD or fewer BAD labelled pairs is refused")
    min_kept: int = option(
        10, min=1, help="a threshold keeping fewer labelled pairs is refused (no separation)"
    )
    per_pair: bool = option(
        True, help="a threshold per source language where its labelled pairs allow one"
    )
    on_unreachable: Literal["stop", "continue"] = option(
        "stop",
        help="no threshold reaches the target: stop (exit 2, nothing written; the run stops there) or continue (the pairs at the threshold with the best reachable precision are kept, and the console, combined.json and the report say the target was not reached and what was)",
    )
    seed: int = option(0)
    label_guideline: str = option(
        "GOOD: a translation a professional would accept for NMT training; small omissions "
        "or additions are BAD.",
        help="what GOOD means, shown at the top of the labelling page (`filters label`) so "
        "every labeller judges alike",
    )

    def validate(self) -> None:
        # Checked at load, not when the pairs are read: a misspelt feature would otherwise be a
        # KeyError traceback after the sample was read and the output claimed.
        if self.features is None:
            return
        if not self.features:
            raise ConfigError(
                "combine.features is empty: list feature names, or null for every "
                "feature the pairs have"
            )
        unknown = [f for f in self.features if not known_feature(f)]
        if unknown:
            raise ConfigError(
                f"combine.features: unknown feature(s) {', '.join(map(repr, unknown))}; "
                f"known: {', '.join(known_feature_names())}"
            )
        if len(set(self.features)) != len(self.features):
            raise ConfigError("combine.features: a feature is listed twice")


CONFIG = CombineConfig
