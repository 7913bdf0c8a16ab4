"""A second round of labels near the threshold, and the GOOD share of the kept pairs, unbiased.

The first round is the stratified sample of :mod:`filters.bitext.sample` (language pair x
margin bucket): it covers every margin range, but most of its labels fall where the answer is
already clear. The uncertainty of the GOOD share among the kept pairs (``score >= threshold``)
comes mostly from the pairs just above the threshold, where GOOD and BAD mix. So, after round
one (whose labels give the current threshold ``t``):

1. :func:`near_threshold_band` takes the band of the ``size`` pairs nearest ``t`` by rank
   (half below, half at or above; ties at an edge go in), over the scores of *every* pair of
   the population the first round was drawn from.
2. :func:`draw_second_round` stratifies the pairs round one left unlabelled, by score alone:
   ``near|below`` (in the band, below ``t``), ``near|above`` (in the band, at or above ``t``)
   and ``far|above`` (above the band). It draws a simple random sample without replacement in
   each: a share for ``near|below`` (``below_share``, default :data:`BELOW_SHARE` = 0: such
   labels help a refit place the threshold but do not enter the estimate at ``t``) and the
   rest over the two kept strata by Neyman allocation (size times the spread of round one's
   labels there).
   A pair of stratum ``b`` is drawn with the known probability ``drawn_b / pool_b``. The rows
   come interleaved across strata, random within each: a page serving them in that order may
   stop anywhere, every prefix is again a stratified sample.
3. :func:`estimate_good_share` combines both rounds.

The estimator, and why this one. The band and the threshold are chosen *after* round one,
from its labels. Two designs were possible: (a) a new stratification with the band as one
stratum (round one's labels in it re-weighted or counted with round two's) and everything
outside the band from round one as drawn; or (b) condition on round one. (a) is unbiased
only for a band and threshold fixed in advance: the threshold is where round one's labels
*happened* to reach the target, so round one's labels above it are a lucky draw, and any part
of the estimate that re-uses them as a sample inherits that luck. Measured on the simulated
population of the tests (threshold from 100 round-one labels, 50 near it), (a) was biased by
+0.019 (5 Monte-Carlo errors) and its 90% interval covered the truth 82% of the time; the
plain stratified estimate at its own chosen threshold has the same defect (+0.008 at 150
labels). So this module uses (b), a two-phase estimator conditional on round one: every
round-one label is a *known value* of its pair (weight 1, never a sample of others), and the
unlabelled pairs of each round-two stratum are estimated from round two's labels there alone:

    share = (sum of round-one labels of kept pairs
             + sum over round-two strata b of N'_b * mean of round two's labels in b and kept
             ) / N_K

with ``N_K`` the kept pairs (known: every pair has a score) and ``N'_b`` the kept pairs of
``b`` round one did not label. Given round one, each term is the ratio mean of a simple random
sample over a domain of known size, so the estimate is exactly unbiased for the threshold the
band was drawn at, however round one chose it; averaged over round one it stays so. Its
variance, given round one, is the sum over strata of ``N'_b^2 (1 - m_b/N'_b) s_b^2 / m_b``. The
interval is Wilson's at the effective sample size ``share (1 - share) / variance`` (the Wald
interval undercovers at shares near 1, where the kept pairs usually are).

What it costs: round one's labels no longer speak for the unlabelled pairs, so the interval
is as narrow as round two is large: stop round one as soon as it is enough to continue (it
only has to place the threshold) and give round two most of the labels. 100 + 50 labels were
*wider* than 150 plain ones on the full demo (1.33x; 61% GOOD pairs: round one's ~60 labels
of kept pairs speak for nothing else, ~320 unlabelled kept pairs rest on ~33 round-two labels);
50 + 100 are narrower (0.77x on a population of that shape; bench/README.md). Leads measured
and not taken: round one's labels speaking for the pairs above the band again (biased by
+0.019, 5.6 Monte-Carlo errors, at the test's population: those labels chose ``t``); a
difference estimator with a logistic curve fitted to round one (exactly unbiased given round
one, but only 5% narrower, and the file would need each stratum's sum of the curve over its
pool). Kept pairs below the band (an estimate at a threshold under ``band.lo``) are outside
round two's strata and get round one's stratified (Hajek) estimate, which is unbiased only for
a threshold not chosen from those labels. With no second round (``second=None``) that is the
whole estimate: the plain stratified estimate of round one, the baseline of
``bench/label_rounds_bench.py``.

How a page uses it: keep the population table the first round was drawn from (``sample_id``
indexes it) and its combined scores; ``FirstRound`` from the labelled round-one rows and
:func:`stratum_sizes` of the drawn sample; ``band = near_threshold_band(scores, t, size)``;
``second = draw_second_round(scores, first, band, n, seed)``; serve ``second.rows`` in order;
then ``estimate_good_share(scores, band.threshold, first, second, labels_so_far)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np
import pyarrow as pa

from filters.bitext.calibrate import CalibrationError

#: Round two's strata (by score, against the band drawn at threshold ``t``).
BELOW = "near|below"  # lo <= score < t
ABOVE = "near|above"  # t <= score <= hi
FAR = "far|above"  # score > hi
STRATA = (BELOW, ABOVE, FAR)
#: Round two's share drawn below the threshold: those labels help a refit place the threshold
#: but do not enter the estimate at ``t`` (bench/README.md: 0.2 cost 10% of the width).
BELOW_SHARE = 0.0
#: The band's share of the population (at least twice round two's size): measured best of
#: 0.1, 0.3 and 1.0 on a demo-shaped population of 20,000 (bench/README.md).
BAND_SHARE = 0.3


def band_size(n_pairs: int, n: int, share: float = BAND_SHARE) -> int:
    """How many pairs the band around the threshold holds, for ``n`` drawn among ``n_pairs``."""
    return min(n_pairs, max(2 * n, int(share * n_pairs)))


@dataclass(frozen=True)
class Band:
    """Pairs with ``lo <= score <= hi``, around the ``threshold`` the band was taken at."""

    lo: float
    hi: float
    threshold: float

    def stratum(self, scores: np.ndarray) -> np.ndarray:
        """Round two's stratum of each pair by its score; ``""`` below the band."""
        s = np.asarray(scores, dtype=np.float64)
        out = np.full(len(s), "", dtype=object)
        out[(s >= self.lo) & (s < self.threshold)] = BELOW
        out[(s >= self.threshold) & (s <= self.hi)] = ABOVE
        out[s > self.hi] = FAR
        return out


@dataclass(frozen=True)
class FirstRound:
    """Round one's labelled pairs: population row, stratum and label of each, and the size of
    every stratum of the population (``N_h``; :func:`stratum_sizes` reads them off a sample)."""

    rows: np.ndarray
    strata: Sequence[str]
    good: np.ndarray
    sizes: Mapping[str, int]


@dataclass(frozen=True)
class SecondRound:
    """The near-threshold draw: population rows in serving order, each row's stratum, and per
    stratum the pairs round one left unlabelled (``pool``) and how many were drawn."""

    band: Band
    rows: np.ndarray
    strata: list[str]
    pool: dict[str, int]
    drawn: dict[str, int]

    def inclusion_probability(self) -> np.ndarray:
        """Per drawn row, given round one: ``drawn / pool`` of its stratum."""
        return np.array([self.drawn[s] / self.pool[s] for s in self.strata], dtype=np.float64)


@dataclass
class ShareEstimate:
    """The GOOD share of the kept pairs (``score >= threshold``) and its interval."""

    share: float
    interval: tuple[float, float]
    confidence: float
    se: float
    threshold: float
    kept: int  # pairs of the population at or above the threshold
    labelled_kept: int  # labelled pairs (both rounds) among them
    effective_n: float
    parts: dict = field(default_factory=dict)  # GOOD pairs estimated per part, for reports

    @property
    def width(self) -> float:
        return self.interval[1] - self.interval[0]


def stratum_sizes(sample: pa.Table) -> dict[str, int]:
    """``N_h`` per stratum of a :func:`filters.bitext.sample.draw_sample` output: each drawn row
    carries ``weight = N_h / k_h`` (``k_h`` rows drawn from the stratum), so ``N_h = weight k_h``.
    """
    drawn: dict[str, int] = {}
    weight: dict[str, float] = {}
    for s, w in zip(sample.column("stratum").to_pylist(), sample.column("weight").to_pylist()):
        drawn[s] = drawn.get(s, 0) + 1
        weight[s] = float(w)
    return {s: int(round(weight[s] * k)) for s, k in drawn.items()}


def near_threshold_band(scores: np.ndarray, threshold: float, size: int) -> Band:
    """The ``size`` pairs nearest ``threshold`` by rank, half below and half at or above it
    (more on one side when the other has fewer; pairs tied with an edge are members too)."""
    s = np.sort(np.asarray(scores, dtype=np.float64))
    if len(s) == 0 or size <= 0:
        raise ValueError("the band needs scored pairs and a positive size")
    at = int(np.searchsorted(s, threshold, side="left"))
    above = min(len(s) - at, size - min(at, size // 2))
    below = min(at, size - above)
    lo = s[at - below] if below else threshold
    hi = s[at + above - 1] if above else threshold
    return Band(lo=float(lo), hi=float(hi), threshold=float(threshold))


def draw_second_round(
    scores: np.ndarray,
    first: FirstRound,
    band: Band,
    n: int,
    seed: int = 0,
    below_share: float = BELOW_SHARE,
) -> SecondRound:
    """``n`` pairs round one did not label, stratified by :meth:`Band.stratum`: ``below_share``
    of them from ``near|below``, the rest over ``near|above`` and ``far|above`` by Neyman
    allocation; rows interleaved across strata (random within each)."""
    if n <= 0:
        raise ValueError("the second round needs a positive number of pairs")
    if not 0.0 <= below_share <= 1.0:
        raise ValueError("below_share must lie between 0 and 1")
    stratum = band.stratum(scores)
    free = np.ones(len(stratum), dtype=bool)
    free[np.asarray(first.rows, dtype=np.int64)] = False
    pools = {b: np.flatnonzero((stratum == b) & free) for b in STRATA}
    take = _allocation(stratum, first, {b: len(p) for b, p in pools.items()}, n, below_share)
    rng = np.random.default_rng(seed)
    picked = {b: rng.choice(pools[b], size=take[b], replace=False) for b in STRATA if take[b]}
    rows, strata, keys = [], [], []
    for b, drawn in picked.items():
        rows += [int(i) for i in drawn]
        strata += [b] * len(drawn)
        # Interleave: the j-th pick of a stratum of k sits at (j + 0.5) / k, so any prefix of
        # the order holds each stratum in proportion (a random tie-break between strata).
        keys += [(j + 0.5) / len(drawn) + 1e-9 * rng.random() for j in range(len(drawn))]
    order = np.argsort(keys, kind="stable")
    return SecondRound(
        band=band,
        rows=np.asarray(rows, dtype=np.int64)[order],
        strata=[strata[i] for i in order],
        pool={b: len(pools[b]) for b in picked},
        drawn={b: len(d) for b, d in picked.items()},
    )


def _allocation(
    stratum: np.ndarray, first: FirstRound, pools: Mapping[str, int], n: int, below_share: float
) -> dict[str, int]:
    """Draws per stratum: ``below_share`` of ``n`` below the threshold; the kept strata get at
    least two each (a spread needs two), the rest by size x the spread of round one's labels
    there (Neyman; a smoothed share so an all-GOOD stratum still gets some)."""
    n = min(n, sum(pools.values()))
    take = {b: 0 for b in STRATA}
    take[BELOW] = min(pools[BELOW], int(round(below_share * n)))
    kept = [b for b in (ABOVE, FAR) if pools[b]]
    for b in kept:
        take[b] = min(pools[b], 2)
    labels = stratum[np.asarray(first.rows, dtype=np.int64)]
    good = np.asarray(first.good, dtype=np.float64)
    spread = {}
    for b in kept:
        p = (good[labels == b].sum() + 1.0) / ((labels == b).sum() + 2.0)
        spread[b] = pools[b] * np.sqrt(p * (1.0 - p))
    while sum(take.values()) < n:
        open_ = [b for b in kept if take[b] < pools[b]] or [b for b in STRATA if take[b] < pools[b]]
        # One at a time to the stratum furthest under its Neyman share: simple, and it
        # respects every pool's size without a redistribution pass.
        b = max(open_, key=lambda k: spread.get(k, 0.0) / (take[k] + 1.0))
        take[b] += 1
    return take


def estimate_good_share(
    scores: np.ndarray,
    threshold: float,
    first: FirstRound,
    second: SecondRound | None = None,
    second_good: np.ndarray | None = None,
    confidence: float = 0.9,
) -> ShareEstimate:
    """The GOOD share of the population's pairs scoring ``>= threshold``, from round one and,
    when given, round two (``second_good``: labels of the first ``len(second_good)`` rows of
    ``second.rows``, in serving order). See the module docstring for the estimator."""
    scores = np.asarray(scores, dtype=np.float64)
    kept = scores >= threshold
    n_kept = int(kept.sum())
    if n_kept == 0:
        raise CalibrationError(f"no pair scores at or above the threshold {threshold:g}")
    covered = np.zeros(len(scores), dtype=bool)
    if second is not None:
        covered = second.band.stratum(scores) != ""
    total_1, var_1 = _first_round_part(kept & ~covered, first)
    total_2, var_2, labelled_2 = _second_round_part(
        scores, kept & covered, first, second, second_good
    )
    share = float(np.clip((total_1 + total_2) / n_kept, 0.0, 1.0))
    labelled_kept = int(kept[np.asarray(first.rows, dtype=np.int64)].sum()) + labelled_2
    parts = {"first_round": total_1, "second_round": total_2}
    var = (var_1 + var_2) / n_kept**2
    return _with_interval(share, var, confidence, threshold, n_kept, labelled_kept, parts)


def _first_round_part(domain: np.ndarray, first: FirstRound) -> tuple[float, float]:
    """GOOD pairs among ``domain`` from round one as drawn: its known size times the stratified
    Hajek mean (weights ``N_h / n_h``), and the linearised variance with each stratum's
    finite population correction."""
    n_dom = int(domain.sum())
    if n_dom == 0:
        return 0.0, 0.0
    strata = np.asarray(first.strata, dtype=object)
    good = np.asarray(first.good, dtype=np.float64)
    member = domain[np.asarray(first.rows, dtype=np.int64)]
    names, counts = np.unique(strata, return_counts=True)
    n_h = dict(zip(names.tolist(), counts.tolist()))
    missing = sorted(set(first.sizes) - set(n_h))
    if missing:
        raise CalibrationError(
            f"stratum {missing[0]} has no labelled pair: label one in every stratum first"
        )
    if not member.any():
        raise CalibrationError(f"none of {n_dom} kept pairs is labelled: label more pairs first")
    w = np.array([first.sizes[s] / n_h[s] for s in strata], dtype=np.float64)
    mean = float((w * good)[member].sum() / w[member].sum())
    resid = np.where(member, good - mean, 0.0)
    var_mean = _stratified_total_var(resid, strata, n_h, first.sizes) / w[member].sum() ** 2
    return n_dom * mean, n_dom**2 * var_mean


def _stratified_total_var(
    values: np.ndarray, strata: np.ndarray, n_h: Mapping[str, int], sizes: Mapping[str, int]
) -> float:
    """Variance of a stratified total's estimate (finite population correction per stratum)."""
    var = 0.0
    for s, n in n_h.items():
        if n < 2:
            continue  # one label in a stratum shows no spread
        big = sizes[s]
        var += big**2 * max(0.0, 1.0 - n / big) * float(np.var(values[strata == s], ddof=1)) / n
    return var


def _second_round_part(
    scores: np.ndarray,
    domain: np.ndarray,
    first: FirstRound,
    second: SecondRound | None,
    second_good: np.ndarray | None,
) -> tuple[float, float, int]:
    """GOOD pairs among ``domain`` (kept pairs round two's strata cover), given round one:
    round one's labels there as known values, each stratum's unlabelled remainder from round
    two's labels in it; the variance; and the count of round-two labels of kept pairs."""
    if second is None or not domain.any():
        return 0.0, 0.0, 0
    rows1 = np.asarray(first.rows, dtype=np.int64)
    total = float(np.asarray(first.good, dtype=np.float64)[domain[rows1]].sum())
    unlabelled = domain.copy()
    unlabelled[rows1] = False
    stratum = second.band.stratum(scores)
    good2 = np.asarray([] if second_good is None else second_good, dtype=np.float64)
    rows2 = second.rows[: len(good2)]
    strata2 = np.asarray(second.strata[: len(good2)], dtype=object)
    var, labelled = 0.0, 0
    for b in STRATA:
        rest = int((unlabelled & (stratum == b)).sum())
        mine = (strata2 == b) & domain[rows2]
        m = int(mine.sum())
        labelled += m
        if rest == 0:
            continue
        if m == 0:
            raise CalibrationError(
                f"round two has no labelled kept pair in {b} ({rest} there): label further"
            )
        y = good2[mine]
        total += rest * float(y.mean())
        s2 = float(np.var(y, ddof=1)) if m >= 2 else 0.0
        if s2 == 0.0:
            # Labels that all agree show no spread although the stratum may have some: take
            # that of the share smoothed by half a label each way (it keeps the coverage).
            p = (float(y.sum()) + 0.5) / (m + 1.0)
            s2 = p * (1.0 - p)
        var += rest**2 * max(0.0, 1.0 - m / rest) * s2 / m
    return total, var, labelled


def _with_interval(
    share: float,
    var: float,
    confidence: float,
    threshold: float,
    kept: int,
    labelled_kept: int,
    parts: dict,
) -> ShareEstimate:
    if not 0.0 < confidence < 1.0:
        raise ValueError("the confidence must lie between 0 and 1")
    se = float(np.sqrt(max(var, 0.0)))
    if labelled_kept >= kept:
        n_eff = float("inf")  # every kept pair is labelled: the share is known
    elif se > 0.0 and 0.0 < share < 1.0:
        n_eff = share * (1.0 - share) / se**2
    else:
        # All kept labels agree: no spread to measure, so Wilson's interval at the labels
        # themselves says how far the truth could still be.
        n_eff = float(labelled_kept)
    z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
    lo, hi = wilson(share, n_eff, z)
    return ShareEstimate(
        share=share,
        interval=(lo, hi),
        confidence=confidence,
        se=se,
        threshold=float(threshold),
        kept=kept,
        labelled_kept=labelled_kept,
        effective_n=n_eff,
        parts=parts,
    )


def wilson(p: float, n: float, z: float) -> tuple[float, float]:
    """Wilson's score interval for a share ``p`` observed on ``n`` (possibly effective) trials."""
    if not np.isfinite(n):
        return p, p
    if n <= 0:
        return 0.0, 1.0
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2.0 * n)) / denom
    half = z * np.sqrt(p * (1.0 - p) / n + z * z / (4.0 * n * n)) / denom
    return float(max(0.0, centre - half)), float(min(1.0, centre + half))
