"""The labelling TSV format, read by one reader: the sample a person labels (``filters sample``),
the label page, ``combine``, ``calibrate`` and the runner's labels stage.

Kept below :mod:`filters.bitext.sample` and :mod:`filters.bitext.label_match` (both read sheets,
and ``sample`` matches labels by their text): with the format in either of them the two would
import each other.
"""

from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass, field

from filters.bitext.calibrate import BAD, GOOD
from labse_common.errors import InputError

LABEL = "label"


def tsv_cell(v: object) -> str:
    """A value as the labelling TSV holds it: tabs and line breaks become spaces, None blank."""
    return "" if v is None else str(v).replace("\t", " ").replace("\n", " ").replace("\r", " ")


@dataclass
class Sheet:
    """Every row of a labelling TSV as written (blank labels included), its labels upper-cased,
    and whether it began with a byte-order mark (a spreadsheet's UTF-8 export)."""

    header: list[str]
    rows: list[list[str]]
    labels: list[str]
    bom: bool = False
    lines: list[int] = field(default_factory=list)  # each row's line number in the file


def read_sheet(path: str | os.PathLike, flag: str | None = None) -> Sheet:
    """The one reader of the labelling format (``filters label``, ``combine``, the runner's
    labels stage): UTF-8 (a BOM is allowed), a header with src, trg and label, every row as
    long as the header, labels GOOD, BAD or blank; empty lines are not rows."""
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(path, f"not UTF-8 text (byte {e.start})", flag) from e
    bom = text.startswith("\ufeff")
    rows = list(
        csv.reader(io.StringIO(text[1:] if bom else text), delimiter="\t", quoting=csv.QUOTE_NONE)
    )
    if not rows:
        raise InputError(path, "empty labelling file", flag)
    header = rows[0]
    for need in ("src", "trg", LABEL):
        if need not in header:
            raise InputError(path, f"no {need!r} column in the header {header}", flag)
    col = header.index(LABEL)
    sheet = Sheet(header, [], [], bom)
    for lineno, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        if len(row) != len(header):
            raise InputError(
                path, f"line {lineno}: {len(row)} fields, the header has {len(header)}", flag
            )
        lab = row[col].strip().upper()
        if lab not in ("", GOOD, BAD):
            raise InputError(path, f"line {lineno}: label {lab!r} is not GOOD, BAD or blank", flag)
        sheet.rows.append(row)
        sheet.labels.append(lab)
        sheet.lines.append(lineno)
    return sheet
