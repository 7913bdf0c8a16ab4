"""Round two's marks through the runner's labels stage and into ``combine``.

The labelling page writes, when it draws the near-threshold round
(:mod:`filters.bitext.label_rounds`), the columns ``round``, ``round_score``,
``round_threshold``, ``round_pool`` and ``inclusion_probability`` (and the round-two rows'
``stratum`` and ``weight``), and appends the drawn rows in serving order. The two-round
estimate is computed from those columns alone, so:

* the runner's labels stage, which rebuilds the person's file from the sample, keeps every
  column the sample lacks on the person's own rows (:func:`carry_marks`) and every round-two row,
  labelled or not, in its order (:func:`kept_extra`);
* the labels it hands to ``combine`` carry the marks too (:func:`for_combine`): the labelled
  pairs by pair row as before, then every round-two row in serving order (an unlabelled one with
  a blank label: ``combine`` counts it ``unlabelled``, the estimate needs it to know where the
  labelled prefix ends and that the draw is whole);
* ``combine`` reports :func:`two_round_of` its labels file: the page's own
  :func:`~filters.bitext.label_rounds.two_round_estimate` on the same rows.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from filters.bitext.label_match import Key, key_of, write_rows
from filters.bitext.label_sheet import LABEL, read_sheet
from filters.bitext.round_estimate import ROUND, ROUND_COLUMNS, two_round_estimate
from filters.bitext.sample import TSV_COLUMNS, write_for_labelling

log = logging.getLogger("filters.bitext.round_marks")

#: Columns the page writes on round-two rows besides the round columns.
_DRAW_COLUMNS = ("stratum", "weight")


def is_round_two(row: Mapping[str, Any]) -> bool:
    return str(row.get(ROUND) or "").strip() == "2"


def has_round_two(rows: Sequence[Mapping[str, Any]]) -> bool:
    return any(is_round_two(r) for r in rows)


def carry_marks(merged: list[dict], person_rows: Sequence[Mapping[str, Any]]) -> list[dict]:
    """The sample's rows (``merged``) with the person's cells of the columns the sample lacks
    (the round marks), matched by pair text; round-two rows lend none (they are kept whole)."""
    own = {}
    for r in person_rows:
        if not is_round_two(r):
            own.setdefault(key_of(r["src"], r["trg"]), r)
    out = []
    for r in merged:
        mine = own.get(key_of(r["src"], r["trg"]), {})
        out.append({**{k: v for k, v in mine.items() if k not in r}, **r})
    return out


def kept_extra(person_rows: Sequence[Mapping[str, Any]], in_sample: set[Key]) -> list[dict]:
    """The person's rows the sample does not give back: labelled pairs outside it (a rerun may
    mine them again) and every round-two row, labelled or not, in the file's order."""
    return [
        dict(r)
        for r in person_rows
        if is_round_two(r) or (r[LABEL] and key_of(r["src"], r["trg"]) not in in_sample)
    ]


def for_combine(
    cand: pa.Table,
    ids: Sequence[int],
    labs: Sequence[str],
    person_header: Sequence[str],
    person_rows: Sequence[Mapping[str, Any]],
) -> tuple[list[str], list[dict]] | None:
    """``combine``'s labels with round two's marks: the matched pairs (``ids`` into ``cand``,
    by row, with ``labs``) carrying the person's marks, then the person's round-two rows in
    serving order. None when the file has no round two, or when a marked pair is not among the
    mined pairs (the estimate would silently lose it: the plain labels then go on alone)."""
    if not has_round_two(person_rows):
        return None
    row_of = {}
    for i, (s, t) in enumerate(zip(cand.column("src").to_pylist(), cand.column("trg").to_pylist())):
        row_of.setdefault(key_of(s, t), i)
    label_of = dict(zip((int(i) for i in ids), labs))
    marks = [c for c in (*_DRAW_COLUMNS, *ROUND_COLUMNS) if c in person_header]
    own = {key_of(r["src"], r["trg"]): r for r in person_rows if not is_round_two(r)}
    twos = [r for r in person_rows if is_round_two(r)]
    marked = [r for r in own.values() if str(r.get(ROUND) or "").strip()] + twos
    lost = [r for r in marked if r[LABEL] and key_of(r["src"], r["trg"]) not in row_of]
    if lost:
        log.warning(
            "%d pairs of the two labelling rounds are not among the mined pairs (first: %r): "
            "combine gets the plain labels, without the two-round estimate",
            len(lost),
            lost[0]["src"],
        )
        return None
    second = {key_of(r["src"], r["trg"]) for r in twos}
    base = [c for c in TSV_COLUMNS if c in cand.column_names and c not in (*marks, LABEL)]
    base = [c for c in base if c != "sample_id"]
    ordered = list(label_of)
    recs = dict(zip(ordered, cand.take(pa.array(ordered, pa.int64())).select(base).to_pylist()))
    rows = []
    for i in ordered:  # by pair row, as before; round two's pairs follow in their own order
        key = key_of(recs[i]["src"], recs[i]["trg"])
        if key not in second:
            rows.append(_row(recs[i], own.get(key, {}), marks, i, label_of[i]))
    for r in twos:
        i = row_of.get(key_of(r["src"], r["trg"]))
        if i is None:  # unlabelled (a labelled one not mined returned None above)
            rows.append(_row({c: r.get(c, "") for c in base}, r, marks, r["sample_id"], ""))
        else:
            rec = recs.get(i) or cand.take(pa.array([i], pa.int64())).select(base).to_pylist()[0]
            rows.append(_row(rec, r, marks, i, r[LABEL] if i in label_of else ""))
    present = {*base, *marks, "sample_id", LABEL}
    header = [c for c in TSV_COLUMNS if c in present]
    header += [c for c in ROUND_COLUMNS if c in marks]
    return header, rows


def _row(rec: Mapping, mine: Mapping, marks: Sequence[str], sample_id: Any, label: str) -> dict:
    return {**rec, **{c: mine.get(c, "") for c in marks}, "sample_id": sample_id, LABEL: label}


def write_labels(
    path: str | os.PathLike,
    cand: pa.Table,
    ids: Sequence[int],
    labs: Sequence[str],
    person_rows: Sequence[Mapping[str, Any]],
) -> None:
    """The runner's labels for ``combine``: the matched pairs (``ids`` into ``cand``, by row)
    as a labelling TSV with ``sample_id`` and ``label``, or :func:`for_combine`'s rows when the
    person's file has round two."""
    header = list(person_rows[0]) if person_rows else []
    rounds = for_combine(cand, ids, labs, header, person_rows)
    if rounds is not None:
        write_rows(path, *rounds)
        return
    table = cand.take(pa.array(ids, pa.int64()))
    table = table.append_column("sample_id", pa.array(ids, pa.int64()))
    write_for_labelling(table.append_column(LABEL, pa.array(labs, pa.string())), path)


def two_round_of(path: str | os.PathLike, confidence: float) -> dict[str, Any] | None:
    """The page's two-round estimate of a labels file with round two (None without one)."""
    sheet = read_sheet(path, "--labels")
    if ROUND not in sheet.header:
        return None
    col = sheet.header.index(ROUND)
    if not any(r[col].strip() == "2" for r in sheet.rows):
        return None
    return two_round_estimate(sheet.header, sheet.rows, sheet.labels, confidence)
