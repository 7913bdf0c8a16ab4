"""Round two of the labelling page: pairs near the threshold, with an unbiased estimate.

Once the first (stratified) round is enough to continue and ``combine``'s fit gives a threshold
``t``, the page offers a second round (:mod:`filters.bitext.adaptive_sample`): the combined
score of every mined pair (the fitted model, the pairs the sample was drawn from), the band of
pairs nearest ``t``, and ``size`` pairs drawn from it and above it with known inclusion
probabilities (seed ``combine.seed``). They are appended to the labelling file, in serving
order, and the page serves them next.

The file alone says what the estimate needs (so a restarted page, or anyone, recomputes it):

* ``round``: ``1`` on the round-one rows labelled when round two was drawn (round two is
  conditional on exactly those), ``2`` on the drawn rows, blank on the others;
* ``round_score``: the combined score at the draw, on the rows of both rounds;
* ``round_threshold``: ``t``, on the round-two rows;
* ``round_pool`` and ``inclusion_probability``: on the round-two rows, the pairs of its
  round-two stratum (the ``stratum`` column: ``near|below``, ``near|above``, ``far|above``)
  that round one left unlabelled, and ``drawn / pool``; ``weight`` is its inverse,
  ``sample_id`` the pair's row as in round one.

:func:`two_round_estimate` rebuilds, from these columns, a population that
:func:`~filters.bitext.adaptive_sample.estimate_good_share` scores exactly as it scores the
real one at ``t`` (the kept pairs are the round-one rows at or above ``t`` and the pools of the
kept strata; nothing else enters), and uses the labelled prefix of round two (a skipped pair
ends it: a prefix is a stratified sample, a choice of pairs is not). ``combine`` and the
runner read the extra rows and columns as any labels; ``combine``'s own estimate counts the
near-threshold labels as if they were a plain sample, so it also reports this one
(``two_round_estimate`` in combined.json), and the runner's labels stage keeps the marks
(:mod:`filters.bitext.round_marks`). The page shows both.
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

import numpy as np
import pyarrow as pa

from filters.bitext import adaptive_sample as ad
from filters.bitext.calibrate import GOOD, CalibrationError
from filters.bitext.label_view import LabelJudge, _json_safe
from filters.bitext.round_estimate import (  # noqa: F401 (the page's names since round two)
    POOL,
    PROBABILITY,
    ROUND,
    ROUND_COLUMNS,
    SCORE,
    THRESHOLD,
    Unavailable,
    _cell,
    two_round_estimate,
)
from labse_common.errors import InputError

log = logging.getLogger("filters.bitext.label_rounds")

# Round two should hold most of the labels: round one's count only for their own pairs in the
# two-round estimate (bench/HISTORY.md, "Labels near the threshold").
DEFAULT_SIZE = 100


def rounds_of(sheet: Any, size: int | None = None) -> LabelRounds:
    """The sheet's round-two helper (created once; ``size`` given: with that size)."""
    rounds = getattr(sheet, "_label_rounds", None)
    if rounds is None or size is not None:
        rounds = LabelRounds(sheet, DEFAULT_SIZE if size is None else size)
        sheet._label_rounds = rounds
    return rounds


class LabelRounds:
    """Offers, draws and estimates round two for a :class:`~filters.bitext.label_store.LabelSheet`."""

    def __init__(self, sheet: Any, size: int = DEFAULT_SIZE) -> None:
        self.sheet = sheet
        self.size = size

    def _snapshot(self) -> tuple[int, list[str], list[list[str]], list[str]]:
        s = self.sheet
        with s.lock:
            return s.version, list(s.header), [list(r) for r in s.rows], list(s.labels)

    def state(self) -> dict[str, Any]:
        """``GET /api/rounds``: whether round two is offered (or why not), and its estimate."""
        _, header, rows, labels = self._snapshot()
        drawn = [i for i, r in enumerate(rows) if _cell(header, r, ROUND) == "2"]
        out: dict[str, Any] = {"size": self.size, "drawn": len(drawn), "offered": False}
        out["first"] = drawn[0] if drawn else None
        if drawn:
            out["estimate"] = two_round_estimate(header, rows, labels, self.sheet.cfg.confidence)
            return _json_safe(out)
        try:
            self._threshold()
            out["offered"] = True
        except Unavailable as e:
            out["why"] = str(e)
        return _json_safe(out)

    def _threshold(self) -> float:
        """``t``: combine's threshold on the labels as they are, when round two may be drawn."""
        judge = self.sheet.judge
        if getattr(judge, "all_pairs", None) is None:
            raise Unavailable("no second round: the mined pairs are not known (--pairs)")
        with self.sheet.lock:
            enough = self.sheet.summary()["enough"]["ok"]
        if not enough:
            raise Unavailable("no second round yet: the first round is not enough to continue")
        est = self.sheet.estimate()
        if not est.get("ok") or est.get("threshold") is None:
            raise Unavailable(f"no second round yet: {est.get('why') or 'no threshold'}")
        return float(est["threshold"])

    def draw(self) -> dict[str, Any]:
        """``POST /api/round2``: draw round two and append it to the file."""
        t = self._threshold()
        version, header, rows, labels = self._snapshot()
        if any(_cell(header, r, ROUND) == "2" for r in rows):
            raise Unavailable("round two is already drawn in this file")
        first, sizes_total = first_round(header, rows, labels)
        pairs = self.sheet.judge.all_pairs
        if sizes_total != pairs.num_rows:
            raise Unavailable(
                f"no second round: the sample stands for {sizes_total} pairs, the mined pairs "
                f"have {pairs.num_rows} (drawn from a part of them?)"
            )
        scores = self._scores(header, rows, labels)
        band = ad.near_threshold_band(scores, t, ad.band_size(pairs.num_rows, self.size))
        second = ad.draw_second_round(scores, first, band, self.size, self.sheet.cfg.seed)
        if len(second.rows) == 0:
            raise Unavailable("no second round: every pair near the threshold is labelled")
        new_header = header + [c for c in ROUND_COLUMNS if c not in header]
        marked = _mark_first(new_header, rows, labels, scores)
        drawn = _drawn_rows(new_header, pairs, scores, second)
        start = _append(self.sheet, version, new_header, marked, drawn)
        log.info("round two: %d pairs near the threshold %.4g appended", len(drawn), t)
        return {"drawn": len(drawn), "first": start, "threshold": t, "band": [band.lo, band.hi]}

    def _scores(self, header: list[str], rows: list[list[str]], labels: list[str]) -> np.ndarray:
        """The combined score of every mined pair: combine's fit on the labels as they are."""
        from filters.bitext.combine import fit_combined

        judge = self.sheet.judge
        label_rows = [{**dict(zip(header, r)), "label": lab} for r, lab in zip(rows, labels)]
        try:
            _, good, table = judge.used(label_rows, self.sheet.path)
            fit = fit_combined(table, good, self.sheet.cfg)
        except (CalibrationError, InputError) as e:
            raise Unavailable(f"no second round: {e}") from e
        return fit.scorer.score(judge.all_pairs)

    def answer(self) -> tuple[int, dict[str, Any]]:
        """The HTTP answer to ``POST /api/round2``."""
        try:
            return HTTPStatus.OK, self.draw()
        except Unavailable as e:
            return HTTPStatus.CONFLICT, {"error": str(e)}
        except OSError as e:
            log.error("%s: could not save round two (%s)", self.sheet.path, e)
            return HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"could not save: {e}"}


def first_round(
    header: list[str], rows: list[list[str]], labels: list[str]
) -> tuple[ad.FirstRound, int]:
    """Round one as drawn (every row not of round two) and labelled now, and the pairs its
    strata stand for (``sum N_h``)."""
    for need in ("sample_id", "stratum", "weight"):
        if need not in header:
            raise Unavailable(f"no second round: the file has no {need} column (not a sample)")
    ones = [i for i, r in enumerate(rows) if _cell(header, r, ROUND) != "2"]
    try:
        ids = [int(_cell(header, rows[i], "sample_id")) for i in ones]
        weights = [float(_cell(header, rows[i], "weight")) for i in ones]
    except ValueError as e:
        raise Unavailable(f"no second round: a sample_id or weight is not a number ({e})") from e
    strata = [_cell(header, rows[i], "stratum") for i in ones]
    sizes = ad.stratum_sizes(pa.table({"stratum": strata, "weight": weights}))
    done = [k for k, i in enumerate(ones) if labels[i]]
    first = ad.FirstRound(
        rows=np.array([ids[k] for k in done], dtype=np.int64),
        strata=[strata[k] for k in done],
        good=np.array([labels[ones[k]] == GOOD for k in done], dtype=bool),
        sizes=sizes,
    )
    return first, sum(sizes.values())


def _mark_first(
    header: list[str], rows: list[list[str]], labels: list[str], scores: np.ndarray
) -> list[list[str]]:
    """The file's rows with the round columns: ``1`` and the score on the labelled ones."""
    out = []
    sid = header.index("sample_id")
    for r, lab in zip(rows, labels):
        r = r + [""] * (len(header) - len(r))
        if lab:
            r[header.index(ROUND)] = "1"
            r[header.index(SCORE)] = repr(float(scores[int(r[sid])]))
        out.append(r)
    return out


def _drawn_rows(
    header: list[str], pairs: pa.Table, scores: np.ndarray, second: ad.SecondRound
) -> list[list[str]]:
    """Round two's rows in serving order, with the file's columns (those the pairs have)."""
    from filters.bitext.label_sheet import tsv_cell

    picked = pairs.take(pa.array(second.rows, pa.int64())).to_pylist()
    probability = second.inclusion_probability()
    out = []
    for i, rec, b, p in zip(second.rows, picked, second.strata, probability):
        fixed = {
            "sample_id": int(i),
            "stratum": b,
            "weight": repr(1.0 / float(p)),
            "label": "",
            ROUND: "2",
            SCORE: repr(float(scores[i])),
            THRESHOLD: repr(second.band.threshold),
            POOL: second.pool[b],
            PROBABILITY: repr(float(p)),
        }
        out.append([tsv_cell(fixed.get(h, rec.get(h))) for h in header])
    return out


def _append(
    sheet: Any, version: int, header: list[str], rows: list[list[str]], drawn: list[list[str]]
) -> int:
    """Under the sheet's lock: the new columns and rows in memory and saved, or nothing
    changed; the judge then knows the drawn pairs. The index of the first drawn row."""
    with sheet.lock:
        if sheet.version != version:
            raise Unavailable("labels changed while round two was drawn: ask again")
        if sheet._stat() != sheet._stamp:  # the page's own check, said before anything changes
            raise Unavailable(
                f"{sheet.path} was changed on disk by something else since this page read it: "
                "restart python -m filters label"
            )
        old = (sheet.header, sheet.rows, sheet.labels, sheet._col)
        sheet.header, sheet.rows = header, rows + drawn
        sheet.labels = sheet.labels + [""] * len(drawn)
        sheet._col = {h: i for i, h in reversed(list(enumerate(header)))}
        try:
            sheet._save()
        except BaseException:
            sheet.header, sheet.rows, sheet.labels, sheet._col = old
            raise
        sheet.version += 1
        judge = sheet.judge
        sheet.judge = LabelJudge(sheet.cfg, sheet._keys(), judge.all_pairs, judge.earlier)
        return len(rows)


# --- on the page: a button to draw round two, its estimate next to combine's --------------------
# Put before </body>, after the page's own script, whose globals (api, rows, take, render,
# refreshEstimate, queue, show) it uses.

PAGE_ROUNDS = r"""<div id="rounds"><span id="round2-estimate"></span>
<button id="btn-round2" hidden>label near the threshold (round two)</button></div>
<script>
"use strict";
(() => {
  $("status").append($("rounds"));
  const pct1 = (x) => (100 * x).toFixed(1) + "%";
  function say(r) {
    const e = r.estimate;
    if (!r.drawn) return r.offered ? "" : (r.why || "");
    if (!e.ok) return `Two-round estimate: ${e.why}`;
    return `Two-round estimate (unbiased) at ${e.threshold.toPrecision(3)}: ${pct1(e.share)} `
      + `[${pct1(e.interval[0])}, ${pct1(e.interval[1])}] `
      + `(${Math.round(100 * e.confidence)}% interval, width ${pct1(e.width)}), `
      + `on ${e.labelled} of ${r.drawn} round-two labels and round one's`;
  }
  async function refreshRounds() {
    const r = await api("/api/rounds");
    const b = $("btn-round2");
    b.hidden = !r.offered;
    b.textContent = `label ${r.size} pairs near the threshold (round two)`;
    $("round2-estimate").textContent = say(r);
    document.body.dataset.rounds = r.drawn;
  }
  async function draw() {
    const d = await api("/api/round2", {});
    const s = await api("/api/state");
    rows = s.rows; take(s); cur = d.first;
    show(`Round two: ${d.drawn} pairs near the threshold appended to the file; label them in order.`);
    render(); refreshEstimate();
  }
  const plain = window.refreshEstimate;
  window.refreshEstimate = async () => {
    await plain();
    refreshRounds().catch((e) => { $("round2-estimate").textContent = e.message; });
  };
  $("btn-round2").addEventListener("click", () => {
    queue = queue.then(draw).catch((e) => show(e.message, true));
  });
  queue = queue.then(() => {  // a restarted page goes on with round two, in its order
    const i = rows.findIndex((r) => r.other.round === "2" && !r.label);
    if (i >= 0) { cur = i; render(); }
  });
})();
</script>
"""
