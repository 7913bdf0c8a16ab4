"""The labelling TSV format, read by one reader: the sample a person labels (``filters sample``),
the label page, ``combine``, ``calibrate`` and the runner's labels stage.

Kept below :mod:`filters.bitext.sample` and :mod:`filters.bitext.label_match` (both read sheets,
and ``sample`` matches labels by their text): with the format in either of them the two would
import each other.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

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


def split_rows(text: str) -> list[tuple[int, list[str]]]:
    """Each non-empty line of a labelling TSV as (line number, cells), split on tabs only.

    Lines end with LF or CRLF; a file with no LF at all ends its lines with CR (a classic Mac
    spreadsheet export). A CR anywhere else is a line break inside a cell, read as the space
    :func:`tsv_cell` would have written for it, so the pair text still matches the mined one.
    There is no quoting and no cell size limit (csv's 128 KiB one would refuse a long sentence
    the pipeline itself wrote; the whole file is in memory anyway).
    """
    sep = "\n" if "\n" in text or "\r" not in text else "\r"
    rows = []
    for lineno, line in enumerate(text.split(sep), start=1):
        line = line.removesuffix("\r").replace("\r", " ")
        if line:
            rows.append((lineno, line.split("\t")))
    return rows


def read_sheet(path: str | os.PathLike, flag: str | None = None) -> Sheet:
    """The one reader of the labelling format (``filters label``, ``combine``, the runner's
    labels stage): UTF-8 (a BOM is allowed), a header with src, trg and label, every row as
    long as the header, labels GOOD, BAD or blank; empty lines are not rows (lines and cells
    as :func:`split_rows` reads them)."""
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(path, f"not UTF-8 text (byte {e.start})", flag) from e
    bom = text.startswith("\ufeff")
    rows = split_rows(text[1:] if bom else text)
    if not rows:
        raise InputError(path, "empty labelling file", flag)
    header = rows[0][1]
    for need in ("src", "trg", LABEL):
        if need not in header:
            raise InputError(path, f"no {need!r} column in the header {header}", flag)
    col = header.index(LABEL)
    sheet = Sheet(header, [], [], bom)
    for lineno, row in rows[1:]:
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


def replace_text(path: str | os.PathLike, text: str) -> None:
    """Replace the file at ``path`` with ``text`` atomically, through a symbolic link.

    A temporary copy is written and synced beside the file the link points to, with its mode,
    then renamed onto it: the link stays a link and what it points to gets the text (renaming
    onto the link itself would replace the link by a plain file, and the file it pointed to,
    the one the runner reads, would never see the labels). A reader sees the old text or the
    new, never a part.
    """
    target = Path(os.path.realpath(path))
    tmp = target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp"
    # Created as open() creates a file (0666 less the umask), then given the old file's mode.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if target.exists():
            os.chmod(tmp, os.stat(target).st_mode & 0o7777)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _sync_folder(target.parent)


def _sync_folder(folder: Path) -> None:
    """The rename made durable (a saved label survives a power cut); best effort."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
