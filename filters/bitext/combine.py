"""One calibrated pair score from every feature a run has, fitted on labelled mined pairs.

Margin alone reaches the paper's ~80% GOOD only at the very top of a demo run's mined pairs, and
CDS alone barely separates misaligned pairs; each scorer sees a different error. This module
combines them the way bicleaner-ai does (one classifier over many features) but keeps the model
small enough to read and to store as JSON:

* features: every numeric score column present in the pairs table (:data:`SCORE_COLUMNS`:
  the miner's margin and cosine, CDS in both directions, the dual cross-entropy, the IBM Model 1
  lexical scores of ``filters lexicon``, language-ID confidences where a table has them) plus
  features derived from the text (:data:`DERIVED`: length ratio, digits agreement, copied
  source, character trigram cosine) and every boolean ``rule_*`` column a user's
  table carries (the runner's rules stage drops failing pairs instead, so its pairs have none);
* model: standardised features, missing values imputed with the training mean, and a
  scikit-learn ``LogisticRegression`` — its output is a probability of GOOD, fitted by log loss,
  so it is calibrated on the labelled sample's distribution; the out-of-fold probabilities
  (stratified k-fold) are what the threshold is chosen on, so the threshold never sees a pair
  scored by a model trained on it;
* threshold: :func:`filters.bitext.calibrate.calibrate` on the out-of-fold probabilities (the
  lowest threshold whose kept pairs reach the target GOOD share, bootstrap intervals), globally
  and (``per_pair``) per source language where its labelled sample allows one.

This is the one final filter. A single-score threshold (CDS alone: ``combine.features:
[cds_score]``) is its special case: with one feature the model is a monotone map of it, so the
threshold is chosen on the in-sample probabilities, which keeps exactly the pairs a threshold on
the feature itself keeps (:func:`in_feature_units` says where that threshold lies). The fitted model is plain JSON
(:meth:`CombinedScorer.to_json`): feature names, means, scales, weights, intercept.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from filters.bitext.calibrate import (
    Calibration,
    CalibrationError,
    calibrate,
    check_labels,
    roc_auc,
)

# The combine section's registry of feature names (it checks combine.features at load, below
# this package): every name is registered here, beside the code that reads or computes it.
from labse_common.sections.combine import (  # noqa: F401
    FEATURES,
    RULE_PREFIX,
    known_feature,
    known_feature_names,
)
from mining.lexicon import tokens

if TYPE_CHECKING:
    from labse_common.sections.combine import CombineConfig

log = logging.getLogger(__name__)

# Score columns used when present (higher or lower is better: the model learns the sign),
# registered with no function: they are read from the pairs table, not computed.
for _column in (
    "margin",
    "margin_fwd",
    "margin_bwd",
    "mutual",
    "cosine",
    "cds_score",
    "cds_score_bwd",
    "dual_xent",
    "xent_clean",
    "xent_clean_bwd",
    "src_lang_score",
    "trg_lang_score",
    "lex_fwd",
    "lex_bwd",
):
    FEATURES.add(_column, None)


def _lengths(col: Sequence[str]) -> np.ndarray:
    return np.array([len(s or "") for s in col], dtype=np.float64)


@FEATURES.register("abs_log_len_ratio")
def _abs_log_len_ratio(src: Sequence[str], trg: Sequence[str]) -> np.ndarray:
    return np.abs(np.log((_lengths(src) + 1.0) / (_lengths(trg) + 1.0)))


@FEATURES.register("digits_agree")
def _digits_agree(src: Sequence[str], trg: Sequence[str]) -> np.ndarray:
    # Numbers survive translation: a pair whose digit sequences differ is rarely a translation.
    return np.array([float(_digit_seq(a) == _digit_seq(b)) for a, b in zip(src, trg)])


def _digit_seq(text: str | None) -> str:
    return "".join(ch for ch in (text or "") if ch.isdigit())


@FEATURES.register("copied")
def _copied(src: Sequence[str], trg: Sequence[str]) -> np.ndarray:
    return np.array(
        [float((a or "").strip().lower() == (b or "").strip().lower()) for a, b in zip(src, trg)]
    )


@FEATURES.register("char3_cosine")
def _char3_cosine(src: Sequence[str], trg: Sequence[str]) -> np.ndarray:
    # Names, numbers and cognates keep their spelling across languages of one script: the
    # cosine of the two sides' character trigram counts (lower-cased, accents stripped).
    return np.array([_cosine(_trigrams(a), _trigrams(b)) for a, b in zip(src, trg)])


def _trigrams(text: str | None) -> Counter:
    words = " ".join(tokens(text))
    padded = f" {words} "
    return Counter(padded[i : i + 3] for i in range(len(padded) - 2)) if words else Counter()


def _cosine(a: Counter, b: Counter) -> float:
    if not a or not b:
        return 0.0
    dot = sum(n * b[g] for g, n in a.items() if g in b)
    return dot / math.sqrt(sum(n * n for n in a.values()) * sum(n * n for n in b.values()))


#: Score columns read from the table, and features computed from the two sentences (name ->
#: function of the src and trg columns), as registered above.
SCORE_COLUMNS: tuple[str, ...] = tuple(name for name, fn in FEATURES.items() if fn is None)
DERIVED: Mapping[str, Callable[[Sequence[str], Sequence[str]], np.ndarray]] = {
    name: fn for name, fn in FEATURES.items() if fn is not None
}


def available_features(table: pa.Table) -> list[str]:
    """The features this table can give, in a stable order."""
    names = [c for c in SCORE_COLUMNS if c in table.column_names]
    if "src" in table.column_names and "trg" in table.column_names:
        names += list(DERIVED)
    names += sorted(
        c
        for c in table.column_names
        if c.startswith(RULE_PREFIX) and pa.types.is_boolean(table.schema.field(c).type)
    )
    return names


def feature_matrix(table: pa.Table, features: Sequence[str]) -> np.ndarray:
    """``(rows, features)`` float64; NaN where a score is missing (imputed by the model)."""
    cols = []
    src = trg = None
    for name in features:
        if name in DERIVED:
            if src is None:
                src = table.column("src").to_pylist()
                trg = table.column("trg").to_pylist()
            cols.append(DERIVED[name](src, trg))
        elif name in table.column_names:
            arr = table.column(name).to_numpy(zero_copy_only=False)
            cols.append(np.asarray(arr, dtype=np.float64))
        else:
            raise KeyError(f"feature {name!r} is not in the pairs table")
    if not cols:
        return np.zeros((table.num_rows, 0))
    x = np.column_stack(cols).astype(np.float64)
    x[~np.isfinite(x)] = np.nan
    return x


@dataclass
class CombinedScorer:
    """A fitted logistic model over named features (means/scales standardise, NaN -> mean)."""

    features: list[str]
    mean: list[float]
    scale: list[float]
    weights: list[float]
    intercept: float

    def score_matrix(self, x: np.ndarray) -> np.ndarray:
        mean = np.asarray(self.mean)
        z = np.where(np.isnan(x), mean, x)
        z = (z - mean) / np.asarray(self.scale)
        logit = z @ np.asarray(self.weights) + self.intercept
        return 1.0 / (1.0 + np.exp(-np.clip(logit, -50, 50)))

    def score(self, table: pa.Table) -> np.ndarray:
        """P(GOOD) of each pair of ``table``."""
        return self.score_matrix(feature_matrix(table, self.features))

    def to_json(self) -> dict:
        return {
            "features": self.features,
            "mean": self.mean,
            "scale": self.scale,
            "weights": self.weights,
            "intercept": self.intercept,
        }

    @classmethod
    def from_json(cls, doc: Mapping) -> CombinedScorer:
        try:
            s = cls(
                features=list(doc["features"]),
                mean=[float(v) for v in doc["mean"]],
                scale=[float(v) for v in doc["scale"]],
                weights=[float(v) for v in doc["weights"]],
                intercept=float(doc["intercept"]),
            )
        except (KeyError, TypeError) as e:
            raise ValueError(f"not a combined-score model: {e}") from e
        n = len(s.features)
        if not (len(s.mean) == len(s.scale) == len(s.weights) == n):
            raise ValueError(
                "combined-score model: features, mean, scale and weights differ in length"
            )
        return s


def _fit(x: np.ndarray, y: np.ndarray, c: float, seed: int) -> CombinedScorer:
    from sklearn.linear_model import LogisticRegression

    mean = np.nanmean(x, axis=0) if len(x) else np.zeros(x.shape[1])
    mean = np.where(np.isfinite(mean), mean, 0.0)
    z = np.where(np.isnan(x), mean, x)
    scale = z.std(axis=0)
    scale = np.where(scale > 1e-12, scale, 1.0)  # a constant feature gets weight ~0, not NaN
    z = (z - mean) / scale
    model = LogisticRegression(C=c, max_iter=1000, random_state=seed)
    model.fit(z, y)
    return CombinedScorer(
        features=[],
        mean=mean.tolist(),
        scale=scale.tolist(),
        weights=model.coef_[0].tolist(),
        intercept=float(model.intercept_[0]),
    )


def out_of_fold(x: np.ndarray, y: np.ndarray, folds: int, c: float, seed: int) -> np.ndarray:
    """P(GOOD) of each labelled pair from a model fitted on the other folds (stratified)."""
    from sklearn.model_selection import StratifiedKFold

    k = max(2, min(folds, int(y.sum()), int((~y).sum())))
    oof = np.empty(len(y), dtype=np.float64)
    for train, test in StratifiedKFold(k, shuffle=True, random_state=seed).split(x, y):
        oof[test] = _fit(x[train], y[train], c, seed).score_matrix(x[test])
    return oof


@dataclass
class FeatureReport:
    name: str
    auc: float  # of the feature alone on the labelled sample (0.5 = no information)
    weight: float  # standardised weight in the final model


@dataclass
class CombinedFit:
    scorer: CombinedScorer
    features: list[FeatureReport]
    oof_auc: float  # out-of-fold ROC AUC of the combined score
    oof_brier: float  # out-of-fold Brier score (calibration + sharpness)
    calibration: Calibration | None  # the global threshold (None: target unreachable)
    unreachable: str | None  # why no threshold reaches the target, when so
    per_pair: dict[str, Calibration | str] = field(default_factory=dict)
    oof_scores: np.ndarray | None = field(default=None, repr=False)

    def to_json(self) -> dict:
        return {
            "model": self.scorer.to_json(),
            "features": [f.__dict__ for f in self.features],
            "oof_auc": self.oof_auc,
            "oof_brier": self.oof_brier,
            "calibration": self.calibration.to_json() if self.calibration else None,
            "unreachable": self.unreachable,
            "per_pair": {
                k: (v.to_json() if isinstance(v, Calibration) else {"unreachable": v})
                for k, v in self.per_pair.items()
            },
        }


def fit_combined(table: pa.Table, good: np.ndarray, cfg: CombineConfig) -> CombinedFit:
    """Fit the combined score on a labelled sample and choose its threshold(s).

    ``good``: bool per row of ``table``; every setting comes from the typed ``combine:`` section
    (its defaults live there only). With ``cfg.per_pair``, a threshold per ``src_lang`` value
    whose labelled rows allow a calibration on their own; the others use the global one. Raises
    :class:`CalibrationError` for a sample that cannot be fitted at all.
    """
    good = np.asarray(good, dtype=bool)
    if len(good) != table.num_rows:
        raise ValueError("labels and table differ in length")
    names = _checked_features(table, cfg.features)
    # Too few labels, or one label only, is a refusal, not an unreachable target.
    check_labels(good, cfg)
    x = feature_matrix(table, names)
    final = _fit(x, good, cfg.c, cfg.seed)
    final.features = names
    if len(names) == 1:
        # One feature: any fitted model is a monotone map of it, so the in-sample probabilities
        # rank the labelled pairs exactly as the feature does: the single-score threshold, with
        # no fold noise (folds guard against weights fitted to the pairs they then rank).
        oof = final.score_matrix(x)
    else:
        fewest = min(int(good.sum()), int((~good).sum()))
        if fewest < 2:  # a fold would train on one label only (scikit-learn refuses it)
            raise CalibrationError(
                f"{fewest} {'GOOD' if good.sum() < 2 else 'BAD'} labelled pair: the combined "
                f"score of {len(names)} features is fitted out of fold and needs at least 2 of "
                "each label (label more pairs, or set combine.min_per_label to 2 or more)"
            )
        oof = out_of_fold(x, good, cfg.folds, cfg.c, cfg.seed)
    reports = []
    for j, name in enumerate(names):
        col = x[:, j]
        ok = ~np.isnan(col)
        auc = roc_auc(col[ok], good[ok]) if ok.any() else float("nan")
        reports.append(FeatureReport(name, auc, final.weights[j]))
    cal, why = None, None
    try:
        cal = calibrate(oof, good, cfg)
    except CalibrationError as e:
        why = str(e)
    pair_column = "src_lang" if cfg.per_pair else None
    per_pair = _per_pair_calibrations(table, oof, good, cfg, pair_column)
    brier = float(np.mean((oof - good) ** 2))
    return CombinedFit(final, reports, roc_auc(oof, good), brier, cal, why, per_pair, oof)


def _checked_features(table: pa.Table, features: Sequence[str] | None) -> list[str]:
    """The feature names to fit (``None``: every one the table has), each present and numeric."""
    names = list(features) if features is not None else available_features(table)
    if not names:
        raise CalibrationError("the labelled pairs have no score column to combine")
    absent = [n for n in names if n not in DERIVED and n not in table.column_names]
    if absent:
        raise CalibrationError(
            f"feature(s) {', '.join(absent)} not in the pairs table (columns: "
            f"{', '.join(table.column_names)})"
        )
    for n in names:  # a score stored as text would be parsed, or fail nameless, in numpy
        t = None if n in DERIVED else table.schema.field(n).type
        if t is not None and not (
            pa.types.is_floating(t)
            or pa.types.is_integer(t)
            or pa.types.is_boolean(t)
            or pa.types.is_decimal(t)
        ):
            raise CalibrationError(f"feature column {n!r} holds {t}, not numbers")
    return names


def _per_pair_calibrations(
    table: pa.Table,
    scores: np.ndarray,
    good: np.ndarray,
    cfg: CombineConfig,
    pair_column: str | None,
) -> dict[str, Calibration | str]:
    """Each language pair's own threshold, or why its labelled rows cannot support one."""
    per_pair: dict[str, Calibration | str] = {}
    if not pair_column or pair_column not in table.column_names:
        return per_pair
    keys = np.asarray(table.column(pair_column).to_pylist(), dtype=object)
    for key in sorted(set(keys.tolist()), key=str):
        m = keys == key
        try:
            per_pair[str(key)] = calibrate(scores[m], good[m], cfg)
        except CalibrationError as e:
            per_pair[str(key)] = str(e)
    return per_pair


def in_feature_units(fit: CombinedFit, cal: Calibration, x: np.ndarray) -> tuple[Calibration, str]:
    """A one-feature fit's calibration with its threshold, interval and curve in the feature's
    own units, and the direction: ``higher`` keeps ``feature >= threshold``, ``lower`` keeps
    ``feature <= threshold``; the same pairs as ``combined_score >= cal.threshold`` (the map is
    monotone). ``x``: the labelled pairs' feature values, in the order the fit saw them."""
    s = fit.scorer
    if len(s.features) != 1:
        raise ValueError("a threshold in feature units needs a one-feature fit")
    w = s.weights[0]
    # Thresholds on the curve are labelled pairs' probabilities: read their values back exactly
    # rather than re-derive them through the logit.
    value_of = dict(zip(fit.oof_scores.tolist(), np.asarray(x, dtype=np.float64).tolist()))

    def back(p: float) -> float:  # an interval bound is a quantile, not a labelled pair's
        if p in value_of:
            return value_of[p]
        if not (0.0 < p < 1.0) or w == 0:
            return float("nan")
        return float(s.mean[0] + s.scale[0] * (math.log(p / (1.0 - p)) - s.intercept) / w)

    curve = {**cal.curve, "threshold": np.array([value_of[p] for p in cal.curve["threshold"]])}
    units = dataclasses.replace(
        cal,
        threshold=value_of[cal.threshold],
        threshold_ci=sorted(back(p) for p in cal.threshold_ci),
        score_column=s.features[0],
        curve=curve,
    )
    return units, ("higher" if w >= 0 else "lower")


def thresholds_for(fit: CombinedFit, keys: Sequence[object]) -> np.ndarray:
    """The threshold each row gets: its language pair's own where calibrated, else the global
    one (NaN where neither exists: such rows cannot be kept at the target)."""
    glob = fit.calibration.threshold if fit.calibration else math.nan
    own = {k: v.threshold for k, v in fit.per_pair.items() if isinstance(v, Calibration)}
    return np.array([own.get(str(k), glob) for k in keys], dtype=np.float64)
