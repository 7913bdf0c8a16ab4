"""Choosing a score threshold on a labelled sample so the kept pairs are ~80% GOOD.

The rule: the *lowest* threshold t such that the labelled pairs scoring ≥ t are at least
``target`` GOOD, so as much as possible is kept at that precision. Ties are never split: all
pairs with the same score are kept or dropped together. Precision is not monotone in t, so this
is the lowest t that satisfies the target, not the first crossing from the top.

This is the threshold rule of the one final filter, the combined score
(:mod:`filters.bitext.combine`); its settings are the ``combine:`` section's.

Intervals (percentile bootstrap over the labelled pairs, ``combine.bootstrap`` resamples):

* precision and retained share: of the chosen t, re-measured on each resample — how well the
  sample pins down what t keeps;
* the threshold: the whole rule re-run on each resample — how much t itself would move with
  another sample of the same size.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from labse_common.errors import UsageError

# The section's type only: the section declares the names, this package reads them.
if TYPE_CHECKING:
    from labse_common.sections.combine import CombineConfig

log = logging.getLogger(__name__)

GOOD = "GOOD"
BAD = "BAD"


class CalibrationError(UsageError, ValueError):
    """A sample that cannot support a threshold (too small, one label, target unreachable).

    A :class:`~labse_common.errors.UsageError`: the commands report it in one line, exit 2."""


def parse_label(value: object, where: str) -> bool:
    """``GOOD`` -> True, ``BAD`` -> False (case and spaces ignored); anything else is an error."""
    text = str(value).strip().upper() if value is not None else ""
    if text == GOOD:
        return True
    if text == BAD:
        return False
    raise CalibrationError(f"{where}: label {value!r} is not GOOD or BAD")


def roc_auc(scores: np.ndarray, good: np.ndarray) -> float:
    """Probability that a random GOOD pair outscores a random BAD one (ties count half)."""
    scores = np.asarray(scores, dtype=np.float64)
    good = np.asarray(good, dtype=bool)
    n1, n0 = int(good.sum()), int((~good).sum())
    if n1 == 0 or n0 == 0:
        return float("nan")
    # Average ranks (ties share their mean rank): the Mann-Whitney U statistic.
    order = np.argsort(scores, kind="mergesort")
    sorted_s = scores[order]
    ranks = np.empty(len(scores), dtype=np.float64)
    _, first, counts = np.unique(sorted_s, return_index=True, return_counts=True)
    avg = first + (counts + 1) / 2.0
    ranks[order] = np.repeat(avg, counts)
    u = ranks[good].sum() - n1 * (n1 + 1) / 2.0
    return float(u / (n1 * n0))


def precision_curve(scores: np.ndarray, good: np.ndarray) -> tuple[np.ndarray, ...]:
    """For each distinct score v (descending): v, precision and retained share of ``s >= v``."""
    order = np.argsort(-scores, kind="mergesort")
    s = scores[order]
    g = good[order].astype(np.float64)
    cum = np.cumsum(g)
    # The last position of each run of equal scores: keep ties together.
    ends = np.flatnonzero(np.append(s[1:] != s[:-1], True))
    kept = ends + 1
    return s[ends], cum[ends] / kept, kept / len(s)


def choose_threshold(scores: np.ndarray, good: np.ndarray, target: float) -> int | None:
    """Index into :func:`precision_curve`'s arrays of the lowest threshold reaching ``target``."""
    _, prec, _ = precision_curve(scores, good)
    ok = np.flatnonzero(prec >= target - 1e-12)
    return int(ok[-1]) if len(ok) else None


@dataclass
class Calibration:
    threshold: float
    target: float
    precision: float
    precision_ci: list[float]
    retained_share: float
    retained_share_ci: list[float]
    threshold_ci: list[float]
    confidence: float
    bootstrap: int
    bootstrap_unreachable: int
    labelled: int
    good: int
    bad: int
    roc_auc: float
    score_column: str = "cds_score"
    retained_share_scored: float | None = None
    scored_pairs: int | None = None
    curve: dict = field(default_factory=dict, repr=False)

    def to_json(self) -> dict:
        d = asdict(self)
        d.pop("curve")
        return d


def calibrate(
    scores: np.ndarray,
    good: np.ndarray,
    cfg: CombineConfig,
    score_column: str = "combined_score",
) -> Calibration:
    """The threshold, its precision and retention, and their bootstrap intervals.

    Every setting (target, bootstrap, confidence, min_labelled, min_per_label, min_kept, seed)
    comes from the typed ``combine:`` section: its defaults live there and nowhere else."""
    scores = np.asarray(scores, dtype=np.float64)
    good = np.asarray(good, dtype=bool)
    _check_sample(scores, good, cfg)
    values, prec, kept = precision_curve(scores, good)
    i = _chosen(scores, good, cfg, prec, kept)
    t = float(values[i])
    b_prec, b_kept, b_t, unreachable = _bootstrap(scores, good, t, cfg)
    alpha = (1.0 - cfg.confidence) / 2.0
    n_good = int(good.sum())
    return Calibration(
        threshold=t,
        target=cfg.target,
        precision=float(prec[i]),
        precision_ci=_interval(b_prec, alpha),
        retained_share=float(kept[i]),
        retained_share_ci=_interval(b_kept, alpha),
        threshold_ci=_interval(b_t, alpha),
        confidence=cfg.confidence,
        bootstrap=cfg.bootstrap,
        bootstrap_unreachable=unreachable,
        labelled=len(scores),
        good=n_good,
        bad=len(scores) - n_good,
        roc_auc=roc_auc(scores, good),
        score_column=score_column,
        curve={"threshold": values, "precision": prec, "retained": kept},
    )


def _check_sample(scores: np.ndarray, good: np.ndarray, cfg: CombineConfig) -> None:
    if scores.shape != good.shape:
        raise ValueError("scores and labels differ in length")
    if not np.isfinite(scores).all():
        raise CalibrationError("scores must be finite (drop unscored pairs first)")
    check_labels(good, cfg)


def check_labels(good: np.ndarray, cfg: CombineConfig) -> None:
    """Refuse a labelled sample that cannot support a threshold, naming the setting."""
    n, n_good = len(good), int(np.sum(good))
    n_bad = n - n_good
    if n < cfg.min_labelled:
        raise CalibrationError(
            f"the labelled sample has {n} scored pairs; at least {cfg.min_labelled} are needed "
            "(combine.min_labelled)"
        )
    if n_good == 0 or n_bad == 0:
        raise CalibrationError(
            f"the labelled sample is all {GOOD if n_bad == 0 else BAD} ({n} pairs): a threshold "
            "needs both GOOD and BAD examples"
        )
    if min(n_good, n_bad) < cfg.min_per_label:
        raise CalibrationError(
            f"the labelled sample has {n_good} GOOD and {n_bad} BAD pairs; at least "
            f"{cfg.min_per_label} of each are needed (combine.min_per_label)"
        )


def _chosen(
    scores: np.ndarray, good: np.ndarray, cfg: CombineConfig, prec: np.ndarray, kept: np.ndarray
) -> int:
    """Index of the chosen threshold on the precision curve, or the reason there is none."""
    i = choose_threshold(scores, good, cfg.target)
    if i is None:
        raise CalibrationError(
            f"no threshold keeps a set that is {cfg.target:.0%} GOOD: the best-scoring pairs are "
            f"only {prec.max():.1%} GOOD (the scores do not separate this sample well enough)"
        )
    kept_pairs = int(round(float(kept[i]) * len(scores)))
    if kept_pairs < cfg.min_kept:
        # A handful of top-scoring pairs reaching the target says nothing about the scorer: with
        # scores that do not separate GOOD from BAD, that threshold keeps ~nothing of the corpus.
        raise CalibrationError(
            f"the lowest threshold whose kept pairs are {cfg.target:.0%} GOOD keeps only "
            f"{kept_pairs} labelled pair(s) (< combine.min_kept={cfg.min_kept}; ROC AUC "
            f"{roc_auc(scores, good):.2f}): the scores do not separate this sample well enough"
        )
    return i


def _bootstrap(
    scores: np.ndarray, good: np.ndarray, t: float, cfg: CombineConfig
) -> tuple[list[float], list[float], list[float], int]:
    """Per resample: precision and retained share at ``t``, and the rule's own threshold (the
    resamples where no threshold reaches the target are counted, not guessed)."""
    rng = np.random.default_rng(cfg.seed)
    n = len(scores)
    b_prec, b_kept, b_t = [], [], []
    unreachable = 0
    for _ in range(cfg.bootstrap):
        idx = rng.integers(0, n, size=n)
        s_b, g_b = scores[idx], good[idx]
        keep = s_b >= t
        if keep.any():
            b_prec.append(g_b[keep].mean())
        b_kept.append(keep.mean())
        if g_b.all() or not g_b.any():
            unreachable += 1
            continue
        j = choose_threshold(s_b, g_b, cfg.target)
        if j is None:
            unreachable += 1
            continue
        b_t.append(precision_curve(s_b, g_b)[0][j])
    return b_prec, b_kept, b_t, unreachable


def _interval(xs: list[float], alpha: float) -> list[float]:
    if not xs:
        return [float("nan"), float("nan")]
    lo, hi = np.quantile(np.asarray(xs, dtype=np.float64), [alpha, 1.0 - alpha])
    return [float(lo), float(hi)]


def plot_calibration(cal: Calibration, path: str) -> None:
    """PNG of precision and retained share against the threshold, target and choice marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = cal.curve
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    ax.plot(
        c["threshold"], c["precision"], label="precision (GOOD share of kept)", color="tab:blue"
    )
    ax.plot(c["threshold"], c["retained"], label="retained share", color="tab:orange")
    ax.axhline(
        cal.target, color="tab:blue", linestyle=":", linewidth=1, label=f"target {cal.target:g}"
    )
    ax.axvline(
        cal.threshold,
        color="black",
        linestyle="--",
        linewidth=1,
        label=f"threshold {cal.threshold:.4g}",
    )
    lo, hi = cal.threshold_ci
    if np.isfinite(lo) and np.isfinite(hi):
        ax.axvspan(
            lo, hi, color="grey", alpha=0.15, label=f"threshold {cal.confidence:.0%} interval"
        )
    ax.set_xlabel(f"{cal.score_column} threshold (keep pairs scoring >= t)")
    ax.set_ylabel("share of labelled pairs")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"Calibration on {cal.labelled} labelled pairs ({cal.good} GOOD, {cal.bad} BAD)")
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
