"""Language smoothing of word counts (the alpha = 0.3 reweighting of LaBSE).

Given raw word occurrences per language, n_l, with N = sum_l n_l and p_l = n_l / N, each
language's total mass is made proportional to p_l ** alpha. The overall mass is kept at N, so
smoothed counts stay on the scale of raw counts (the learner's frequency thresholds remain
meaningful):

    q_l = p_l ** alpha / sum_k p_k ** alpha        (the smoothed language share)
    w_l = q_l * N / n_l                            (the per-occurrence weight of language l)
    smoothed(word) = sum_l w_l * count_l(word)

alpha = 1 leaves counts untouched (w_l = 1); alpha = 0 gives every language the same mass.
"""

from __future__ import annotations

from collections.abc import Mapping


def language_weights(totals: Mapping[str, float], alpha: float) -> dict[str, float]:
    """Per-occurrence weight w_l for each language with a positive word total."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"smoothing exponent must be in [0, 1], got {alpha}")
    live = {lang: float(n) for lang, n in totals.items() if n > 0}
    if not live:
        return {}
    total = sum(live.values())
    powered = {lang: (n / total) ** alpha for lang, n in live.items()}
    norm = sum(powered.values())
    return {lang: (powered[lang] / norm) * total / n for lang, n in live.items()}


def smoothed_shares(totals: Mapping[str, float], alpha: float) -> dict[str, float]:
    """q_l: each language's share of the smoothed mass (sums to 1)."""
    live = {lang: float(n) for lang, n in totals.items() if n > 0}
    if not live:
        return {}
    weights = language_weights(live, alpha)
    total = sum(live.values())
    return {lang: weights[lang] * n / total for lang, n in live.items()}


def smooth_counts(
    counts_by_lang: Mapping[str, Mapping[str, int]], alpha: float
) -> tuple[dict[str, float], dict[str, int], dict[str, float]]:
    """Reweight per-language word counts and merge them.

    Returns (smoothed count per word, raw count per word, weight per language).
    """
    totals = {lang: sum(c.values()) for lang, c in counts_by_lang.items()}
    weights = language_weights(totals, alpha)
    smoothed: dict[str, float] = {}
    raw: dict[str, int] = {}
    for lang, counts in counts_by_lang.items():
        w = weights.get(lang)
        if w is None:
            continue
        for word, n in counts.items():
            smoothed[word] = smoothed.get(word, 0.0) + w * n
            raw[word] = raw.get(word, 0) + n
    return smoothed, raw, weights
