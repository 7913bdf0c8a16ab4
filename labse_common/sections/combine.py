"""The ``combine:`` section: the labelled sample of mined pairs and the combined pair score."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from labse_common.config import ConfigError, option


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
        help="fewer labelled pairs (globally, or per language pair for its own threshold) is refused",
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

    def validate(self) -> None:
        # Checked at load, not when the pairs are read: a misspelt feature would otherwise be a
        # KeyError traceback after the sample was read and the output claimed.
        from filters.bitext.combine import known_feature, known_feature_names

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
