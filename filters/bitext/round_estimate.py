"""The two-round estimate from a labelling file's round columns alone.

:func:`two_round_estimate` is what the labelling page shows (:mod:`filters.bitext.label_rounds`
draws round two and writes the columns) and what ``combine`` reports
(:mod:`filters.bitext.round_marks`): one code for both. It rebuilds, from the columns, a
population that :func:`~filters.bitext.adaptive_sample.estimate_good_share` scores exactly as it
scores the real one at round two's threshold (see label_rounds' docstring).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from filters.bitext import adaptive_sample as ad
from filters.bitext.calibrate import GOOD, CalibrationError

ROUND, SCORE, THRESHOLD, POOL, PROBABILITY = (
    "round",
    "round_score",
    "round_threshold",
    "round_pool",
    "inclusion_probability",
)
ROUND_COLUMNS = (ROUND, SCORE, THRESHOLD, POOL, PROBABILITY)


class Unavailable(Exception):
    """Why no second round can be drawn now (shown on the page)."""


def _cell(header: list[str], row: list[str], column: str) -> str:
    return row[header.index(column)].strip() if column in header else ""


def two_round_estimate(
    header: list[str], rows: list[list[str]], labels: list[str], confidence: float
) -> dict[str, Any]:
    """The GOOD share at round two's threshold from the file's round columns alone:
    :func:`~filters.bitext.adaptive_sample.estimate_good_share` on a population that has, at
    that threshold, the kept pairs and labels of the real one (the module docstring)."""
    try:
        scores, first, second, good2, t = _rebuilt(header, rows, labels)
        est = ad.estimate_good_share(scores, t, first, second, good2, confidence)
    except (Unavailable, CalibrationError) as e:
        return {"ok": False, "why": str(e)}
    return {
        "ok": True,
        "share": est.share,
        "interval": list(est.interval),
        "width": est.width,
        "confidence": est.confidence,
        "threshold": t,
        "kept": est.kept,
        "labelled": len(good2),
        "labelled_kept": est.labelled_kept,
    }


def _rebuilt(
    header: list[str], rows: list[list[str]], labels: list[str]
) -> tuple[np.ndarray, ad.FirstRound, ad.SecondRound, np.ndarray, float]:
    ones = [i for i, r in enumerate(rows) if _cell(header, r, ROUND) == "1"]
    twos = [i for i, r in enumerate(rows) if _cell(header, r, ROUND) == "2"]
    if not ones:  # e.g. the file was rebuilt from the sample by something that drops columns
        raise Unavailable("the file lost its round-one marks (round 1): no two-round estimate")
    if any(not labels[i] for i in ones):
        raise Unavailable("a pair labelled in round one when round two was drawn lost its label")
    try:
        s1 = [float(_cell(header, rows[i], SCORE)) for i in ones]
        t = float(_cell(header, rows[twos[0]], THRESHOLD))
        sizes = [int(_cell(header, rows[i], POOL)) for i in twos]
        prob = [float(_cell(header, rows[i], PROBABILITY)) for i in twos]
    except (ValueError, IndexError) as e:
        raise Unavailable(f"the round columns are damaged ({e})") from e
    strata = [_cell(header, rows[i], "stratum") for i in twos]
    drawn = {b: strata.count(b) for b in ad.STRATA if b in strata}
    pool = {b: sizes[strata.index(b)] for b in drawn}
    for b, n in drawn.items():
        # Every drawn row is needed (its stratum's pool is known only with all of them).
        if abs(prob[strata.index(b)] * pool[b] - n) > 1e-6:
            raise Unavailable(f"round two's rows of {b} are not all in the file")
    # Stand-ins for the pools: a score in each round-two stratum of a band [t - 1, t].
    stand_in = {ad.BELOW: t - 1.0, ad.ABOVE: t, ad.FAR: t + 1.0}
    scores = s1 + [stand_in[b] for b in drawn for _ in range(pool[b])]
    start, at = {}, len(s1)
    for b in drawn:
        start[b], at = at, at + pool[b]
    seen = {b: 0 for b in drawn}
    order = []
    for b in strata:
        order.append(start[b] + seen[b])
        seen[b] += 1
    first = ad.FirstRound(
        rows=np.arange(len(ones), dtype=np.int64),
        strata=[_cell(header, rows[i], "stratum") for i in ones],
        good=np.array([labels[i] == GOOD for i in ones], dtype=bool),
        sizes={},
    )
    band = ad.Band(lo=t - 1.0, hi=t, threshold=t)
    second = ad.SecondRound(band, np.array(order, dtype=np.int64), strata, pool, drawn)
    prefix = next((k for k, i in enumerate(twos) if not labels[i]), len(twos))
    good2 = np.array([labels[i] == GOOD for i in twos[:prefix]], dtype=bool)
    if prefix == 0:
        raise Unavailable("label the first pair of round two for its estimate")
    return np.asarray(scores, dtype=np.float64), first, second, good2, t
