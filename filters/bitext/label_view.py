"""What the label page says of the labels and of each row, apart from the page and its server.

* :class:`LabelJudge`: whether the labels are enough to continue, and the GOOD share ``combine``
  would estimate at its threshold with its interval, both by ``combine``'s own code (its label
  readers, its check, its fit), so the page and the run never disagree;
* :func:`margin_text` and :func:`source_view`: a margin to 3 significant digits and one side's
  provenance as a link to its page and a readable locator.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, urlsplit

import numpy as np
import pyarrow as pa

from filters.bitext.calibrate import BAD, GOOD, CalibrationError, check_labels
from filters.bitext.label_match import key_of, known_labels, match_to_pairs
from labse_common.errors import InputError
from labse_common.sections.combine import CombineConfig
from labse_common.stats import StageCounter


class LabelJudge:
    """Whether the labels are enough, and what ``combine`` would estimate from them, by
    ``combine``'s own code: the labels read by the rule of every reader of labels
    (:func:`~filters.bitext.label_match.known_labels`), matched to the mined pairs by their text
    and ordered by pair row as the runner's labels stage does
    (:func:`~filters.bitext.label_match.match_to_pairs`), refused by
    :func:`~filters.bitext.calibrate.check_labels` and fitted by
    :func:`~filters.bitext.combine.fit_combined`."""

    def __init__(
        self,
        cfg: CombineConfig,
        keys: list[tuple[str, str]],
        pairs: pa.Table | None,
        earlier: dict[tuple[str, str], str] | None,
    ) -> None:
        self.cfg = cfg
        self.earlier = dict(earlier or {})
        self.all_pairs = pairs  # every mined pair: what a second round draws from and scores
        # Only the mined rows a label can name: matching per label stays cheap on a big table,
        # and the first row of each text and the row order are those of the whole table.
        self.pairs = None if pairs is None else _rows_named(pairs, {*keys, *self.earlier})
        self._lock = threading.Lock()
        self._cache: tuple[int, dict[str, Any]] | None = None

    def used(
        self, rows: list[dict[str, str]], where: os.PathLike
    ) -> tuple[list[tuple[str, str]], np.ndarray, pa.Table | None]:
        """The labelled pairs ``combine`` would use (their texts, whether GOOD, and their rows
        of the mined pairs when given); without mined pairs, every labelled text."""
        labels = {**self.earlier, **known_labels(rows, StageCounter(), "labels", where)}
        if self.pairs is None:
            keys = list(labels)
            return keys, np.array([labels[k] == GOOD for k in keys], dtype=bool), None
        ids, labs = match_to_pairs(self.pairs, labels, StageCounter(), "labels")
        table = self.pairs.take(pa.array(ids, pa.int64()))
        src, trg = table.column("src").to_pylist(), table.column("trg").to_pylist()
        keys = [key_of(a, b) for a, b in zip(src, trg)]
        return keys, np.array([lab == GOOD for lab in labs], dtype=bool), table

    def verdict(self, good: np.ndarray) -> dict[str, Any]:
        """``combine``'s refusal of these labels, or ok."""
        try:
            check_labels(good, self.cfg)
            why = None
        except CalibrationError as e:
            why = str(e)
        n_good = int(np.sum(good))
        return {
            "ok": why is None,
            "why": why,
            "labelled": len(good),
            GOOD: n_good,
            BAD: len(good) - n_good,
        }

    def enough(
        self, rows: list[dict[str, str]], pair_of: Any, where: os.PathLike
    ) -> dict[str, Any]:
        """Whether ``combine`` accepts the labels as they are (``ok``), and per language pair
        whether its own labels would pass the same check."""
        try:
            keys, good, _ = self.used(rows, where)
        except InputError as e:  # so many conflicting labels that the file is refused
            return {"ok": False, "why": str(e), "pairs": {}, "matched": self.pairs is not None}
        pair_by_key: dict[tuple[str, str], str] = {}
        for i, r in enumerate(rows):
            pair_by_key.setdefault(key_of(r["src"], r["trg"]), pair_of(i))
        of_key = np.array([pair_by_key.get(k, "") for k in keys], dtype=object)
        per = {p: self.verdict(good[of_key == p]) for p in dict.fromkeys(pair_by_key.values())}
        return {**self.verdict(good), "pairs": per, "matched": self.pairs is not None}

    def estimate(self, version: int, rows: list[dict[str, str]], where: os.PathLike) -> dict:
        """:func:`estimate_of` the labels of ``version`` (computed once per version)."""
        with self._lock:
            if self._cache is None or self._cache[0] != version:
                self._cache = (version, self._estimate(rows, where))
            return self._cache[1]

    def _estimate(self, rows: list[dict[str, str]], where: os.PathLike) -> dict[str, Any]:
        if self.pairs is None:
            return {
                "ok": False,
                "why": "no estimate: the mined pairs are not known (start filters label with "
                "--pairs, the pairs table combine reads)",
            }
        from filters.bitext.combine import fit_combined  # scikit-learn: only once it is asked

        try:
            _, good, table = self.used(rows, where)
            fit = fit_combined(table, good, self.cfg)
        except (CalibrationError, InputError) as e:
            return {"ok": False, "why": str(e)}
        return estimate_of(fit, good, self.cfg)


def estimate_of(fit: Any, good: np.ndarray, cfg: CombineConfig) -> dict[str, Any]:
    """The GOOD share at the threshold and its interval as ``combine`` reports them: its
    calibration when the target is reached, else the best reachable threshold (combined.json's
    ``reachable``); and each source language's own threshold where it has one."""
    from filters.bitext.calibrate import Calibration
    from filters.bitext.cli_combine import _reachable

    cal = fit.calibration
    if cal is not None:
        est = {
            "target_reached": True,
            "precision": cal.precision,
            "precision_ci": cal.precision_ci,
            "threshold": cal.threshold,
            "threshold_ci": cal.threshold_ci,
            "retained_share": cal.retained_share,
        }
    else:
        best = _reachable(
            fit.oof_scores, good, cfg.min_kept, cfg.bootstrap, cfg.confidence, cfg.seed
        )
        est = {"target_reached": False, **best, "why": fit.unreachable}
    own = {
        k: (
            {"precision": v.precision, "precision_ci": v.precision_ci, "threshold": v.threshold}
            if isinstance(v, Calibration)
            else {"why": v}
        )
        for k, v in fit.per_pair.items()
    }
    est.update(
        ok=True,
        labelled=len(good),
        target=cfg.target,
        confidence=cfg.confidence,
        per_source_language=own,
    )
    return _json_safe(est)


def _json_safe(v: Any) -> Any:
    """NaN and infinities as null: the page parses strict JSON."""
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    if isinstance(v, (float, np.floating)):
        return float(v) if np.isfinite(v) else None
    if isinstance(v, np.integer):
        return int(v)
    return v


def _rows_named(pairs: pa.Table, keys: set[tuple[str, str]]) -> pa.Table:
    """The rows of ``pairs`` whose texts are among ``keys``, in their order."""
    src, trg = pairs.column("src").to_pylist(), pairs.column("trg").to_pylist()
    keep = [i for i, (a, b) in enumerate(zip(src, trg)) if key_of(a, b) in keys]
    return pairs.take(pa.array(keep, pa.int64()))


# --- how a row is shown -------------------------------------------------------------------------


def strata_counts(rows: Iterable[tuple[str, str, str, str]]) -> list[dict[str, Any]]:
    """Labels per (language pair, stratum) of ``rows`` (pair, stratum, label, margin), in name
    order: GOOD, BAD, unlabelled, total and the margins the stratum spans."""
    counts: dict[tuple[str, str], dict[str, Any]] = {}
    for pair, stratum, lab, margin in rows:
        c = counts.setdefault(
            (pair, stratum),
            {"pair": pair, "stratum": stratum, GOOD: 0, BAD: 0, "unlabelled": 0, "m": []},
        )
        c[lab or "unlabelled"] += 1
        c["m"].append(number(margin))
    out = []
    for key in sorted(counts):
        c = counts[key]
        margins = [m for m in c.pop("m") if m is not None]
        c["total"] = c[GOOD] + c[BAD] + c["unlabelled"]
        c["margins"] = (
            f"{margin_text(min(margins))} to {margin_text(max(margins))}" if margins else ""
        )
        out.append(c)
    return out


def number(v: object) -> float | None:
    try:
        x = float(str(v).strip())
    except ValueError:
        return None
    return x if np.isfinite(x) else None


def margin_text(v: object) -> str:
    """A margin to 3 significant digits (``1.00``, ``0.987``), not ``1.0000``; what is not a
    number as it is."""
    x = number(v)
    if x is None:
        return str(v).strip()
    return f"{x:#.3g}" if abs(x) < 1e4 else f"{x:.0f}"


SOURCE_NAMES = {"commoncrawl": "Common Crawl", "wikipedia": "Wikipedia"}
_LANG = re.compile(r"^[a-z]{2,3}(-[a-z]+)?$")


def source_view(side: Mapping[str, str], prefix: str, lang: str) -> dict[str, str | None]:
    """One side's provenance as a person reads it: a link to the page it came from (its URL,
    or the Wikipedia article of its title), the link's text, and a readable locator (where in
    the source files) in place of a raw ``urn:uuid:`` record id."""

    def get(name: str) -> str:
        return (side.get(f"{prefix}_{name}") or "").strip()

    where, source = get("url_or_title"), get("source")
    url = None
    text = where
    if where.lower().startswith(("http://", "https://")):
        url = where
        parts = urlsplit(where)
        text = parts.netloc + (parts.path if len(parts.path) <= 60 else parts.path[:57] + "...")
    elif where and source.lower() == "wikipedia" and _LANG.match(lang or ""):
        url = f"https://{lang}.wikipedia.org/wiki/{quote(where.replace(' ', '_'))}"
    return {"url": url, "text": text, "locator": _locator(source, get("doc_id"), get("locator"))}


def _locator(source: str, doc_id: str, locator: str) -> str:
    parts = [SOURCE_NAMES.get(source.lower(), source)] if source else []
    if locator:
        name, _, offset = locator.rpartition("@")
        file = (name or locator).rsplit("/", 1)[-1]
        parts.append(f"{file}, byte {int(offset):,}" if name and offset.isdigit() else file)
    if doc_id.lower().startswith("urn:uuid:"):
        parts.append(f"record {doc_id[9:17]}")  # the WARC record id, short: the full one is below
    elif doc_id:
        parts.append(f"page id {doc_id}" if source.lower() == "wikipedia" else doc_id)
    return " \u00b7 ".join(parts)
