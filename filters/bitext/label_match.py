"""Labels matched to mined pairs by their text, so that a person's work survives a rerun.

A labelled pair is identified by its two texts (tabs and line breaks flattened to spaces, as the
labelling TSV writes them), not by a row number: the mined pairs of a rerun are another table.
:func:`merge_labels` prefills a new sample from earlier labels; :func:`match_to_pairs` finds
each labelled pair among the candidate pairs and counts those it cannot find, never guessing.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

import numpy as np
import pyarrow as pa

from filters.bitext.sample import LABEL, read_sheet, tsv_cell
from labse_common.stats import StageCounter

Key = tuple[str, str]


def key_of(src: str | None, trg: str | None) -> Key:
    return tsv_cell(src).strip(), tsv_cell(trg).strip()


def read_rows(path: str | os.PathLike, flag: str | None = None) -> tuple[list[str], list[dict]]:
    """Header and every row (labelled or not) of a labelling TSV as dicts; labels upper-cased."""
    sheet = read_sheet(path, flag)
    return sheet.header, [{**dict(zip(sheet.header, row)), LABEL: lab}
                          for row, lab in zip(sheet.rows, sheet.labels)]  # fmt: skip


def known_labels(rows: Iterable[Mapping], counter: StageCounter, unit: str) -> dict[Key, str]:
    """Labelled rows as {pair text: label}. A pair labelled twice alike counts once
    (``duplicate``); labelled both GOOD and BAD it is left out (``conflicting``): which label is
    right is the person's to say, not this code's."""
    seen: dict[Key, set[str]] = {}
    for r in rows:
        counter.add_in(unit)
        if not r[LABEL]:
            counter.add_dropped(unit, "blank")
            continue
        k = key_of(r["src"], r["trg"])
        if k in seen:
            counter.add_dropped(unit, "duplicate")
        seen.setdefault(k, set()).add(r[LABEL])
    out = {}
    for k, labs in seen.items():
        if len(labs) == 1:
            out[k] = next(iter(labs))
            counter.add_out(unit)
        else:
            counter.add_dropped(unit, "conflicting")
    return out


def merge_labels(sample_rows: list[dict], earlier: Mapping[Key, str], person: Mapping[Key, str]
                 ) -> list[dict]:  # fmt: skip
    """The sample's rows with their label filled: the person's own label first, else an earlier
    run's for the same pair text, else blank."""
    out = []
    for r in sample_rows:
        k = key_of(r["src"], r["trg"])
        out.append({**r, LABEL: person.get(k) or earlier.get(k) or ""})
    return out


def match_to_pairs(pairs: pa.Table, labels: Mapping[Key, str], counter: StageCounter, unit: str
                   ) -> tuple[np.ndarray, list[str]]:  # fmt: skip
    """Row indices into ``pairs`` of the labelled pair texts, with their labels; a label whose
    pair is not among ``pairs`` is counted ``not_mined``. Where the same text was mined twice the
    first row stands for it."""
    first: dict[Key, int] = {}
    for i, (s, t) in enumerate(zip(pairs.column("src").to_pylist(), pairs.column("trg").to_pylist())):
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
    """Rewrite a labelling TSV atomically; False (nothing written) when its text is unchanged."""
    text = "\t".join(header) + "\n" + "".join(
        "\t".join(tsv_cell(r.get(h)) for h in header) + "\n"
        for r in rows
    )
    path = os.fspath(path)
    if os.path.isfile(path):
        with open(path, encoding="utf-8", newline="") as f:
            if f.read() == text:
                return False
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    os.replace(tmp, path)
    return True
