"""Labels matched to mined pairs by their text, so that a person's work survives a rerun.

A labelled pair is identified by its two texts (tabs and line breaks flattened to spaces, as the
labelling TSV writes them), not by a row number: the mined pairs of a rerun are another table.
:func:`merge_labels` prefills a new sample from earlier labels; :func:`match_to_pairs` finds
each labelled pair among the candidate pairs and counts those it cannot find, never guessing.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa

from filters.bitext.label_sheet import LABEL, read_sheet, replace_text, tsv_cell
from labse_common.errors import InputError
from labse_common.stats import StageCounter

Key = tuple[str, str]


def key_of(src: str | None, trg: str | None) -> Key:
    return tsv_cell(src).strip(), tsv_cell(trg).strip()


def read_rows(path: str | os.PathLike, flag: str | None = None) -> tuple[list[str], list[dict]]:
    """Header and every row (labelled or not) of a labelling TSV as dicts; labels upper-cased."""
    sheet = read_sheet(path, flag)
    return sheet.header, [
        {**dict(zip(sheet.header, row)), LABEL: lab} for row, lab in zip(sheet.rows, sheet.labels)
    ]


#: The reasons a labelled row is not used, in every reader of labels (the runner's labels stage,
#: ``combine``, ``calibrate``): the same pair text labelled again alike, or both GOOD and BAD.
DUPLICATE = "duplicate_label"
CONFLICTING = "conflicting_label"
#: Above this share of the labelled rows in conflict the file is refused rather than thinned: so
#: many contradictions mean a damaged or mixed-up file, not a few slips of a person.
MAX_CONFLICT_SHARE = 0.1


def unique_labels(
    keys: Sequence[Key],
    labels: Sequence[object],
    counter: StageCounter,
    unit: str,
    where: str | os.PathLike | None = None,
    flag: str | None = None,
    rows: Sequence[int] | None = None,
) -> list[int]:
    """Positions of the labelled rows to use, in order: the first row of each pair text. Later
    rows with the same label are counted ``duplicate_label`` (a pair counts once, not twice);
    every row of a pair labelled both ways is counted ``conflicting_label`` and left out, since
    which label is right is the person's to say, not this code's. When the conflicting rows are
    more than :data:`MAX_CONFLICT_SHARE` of all, an InputError names ``where`` and the rows
    (``rows``: their numbers as the user sees them; default position + 1). Counts only drops: the
    caller counts the rows in and the kept ones out."""
    by_key: dict[Key, list[int]] = {}
    for i, k in enumerate(keys):
        by_key.setdefault(k, []).append(i)
    keep, conflicts = [], []
    for idx in by_key.values():
        if len({labels[i] for i in idx}) > 1:
            conflicts += idx
            counter.add_dropped(unit, CONFLICTING, len(idx))
        else:
            keep.append(idx[0])
            if len(idx) > 1:
                counter.add_dropped(unit, DUPLICATE, len(idx) - 1)
    if conflicts and len(conflicts) > MAX_CONFLICT_SHARE * len(keys):
        nums = sorted(rows[i] if rows is not None else i + 1 for i in conflicts)
        shown = ", ".join(map(str, nums[:10])) + (", ..." if len(nums) > 10 else "")
        raise InputError(
            where,
            f"{len(conflicts)} of {len(keys)} labelled rows give the same pair "
            f"both GOOD and BAD (rows {shown}): correct the labels",
            flag,
        )
    return sorted(keep)


def known_labels(
    rows: Iterable[Mapping],
    counter: StageCounter,
    unit: str,
    where: str | os.PathLike | None = None,
) -> dict[Key, str]:
    """Labelled rows as {pair text: label}, by :func:`unique_labels`' rule (blank rows are
    counted ``blank``)."""
    keys, labs, nums = [], [], []
    for n, r in enumerate(rows, start=1):
        counter.add_in(unit)
        if not r[LABEL]:
            counter.add_dropped(unit, "blank")
            continue
        keys.append(key_of(r["src"], r["trg"]))
        labs.append(r[LABEL])
        nums.append(n)
    keep = unique_labels(keys, labs, counter, unit, where, rows=nums)
    counter.add_out(unit, len(keep))
    return {keys[i]: labs[i] for i in keep}


def merge_labels(
    sample_rows: list[dict], earlier: Mapping[Key, str], person: Mapping[Key, str]
) -> list[dict]:
    """The sample's rows with their label filled: the person's own label first, else an earlier
    run's for the same pair text, else blank."""
    out = []
    for r in sample_rows:
        k = key_of(r["src"], r["trg"])
        out.append({**r, LABEL: person.get(k) or earlier.get(k) or ""})
    return out


def match_to_pairs(
    pairs: pa.Table, labels: Mapping[Key, str], counter: StageCounter, unit: str
) -> tuple[np.ndarray, list[str]]:
    """Row indices into ``pairs`` of the labelled pair texts, with their labels; a label whose
    pair is not among ``pairs`` is counted ``not_mined``. Where the same text was mined twice the
    first row stands for it."""
    first: dict[Key, int] = {}
    for i, (s, t) in enumerate(
        zip(pairs.column("src").to_pylist(), pairs.column("trg").to_pylist())
    ):
        first.setdefault(key_of(s, t), i)
    ids, labs = [], []
    for k, lab in labels.items():
        counter.add_in(unit)
        i = first.get(k)
        if i is None:
            counter.add_dropped(unit, "not_mined")
            continue
        counter.add_out(unit)
        ids.append(i)
        labs.append(lab)
    order = np.argsort(ids, kind="stable")
    return np.asarray(ids, dtype=np.int64)[order], [labs[j] for j in order]


def write_rows(path: str | os.PathLike, header: list[str], rows: list[dict]) -> bool:
    """Rewrite a labelling TSV atomically (through a symbolic link, onto the file it points to);
    False (nothing written) when its text is unchanged."""
    text = (
        "\t".join(header)
        + "\n"
        + "".join("\t".join(tsv_cell(r.get(h)) for h in header) + "\n" for r in rows)
    )
    path = os.fspath(path)
    if os.path.isfile(path):
        with open(path, encoding="utf-8", newline="") as f:
            if f.read() == text:
                return False
    replace_text(path, text)
    return True
