"""Opening text files the same way in every stage: byte-order marks honoured and removed.

A file saved by a Windows editor starts with a UTF-8 BOM (EF BB BF); read as plain UTF-8 it
becomes a ``\\ufeff`` glued to the first sentence, which then never matches its translation nor
its duplicate. UTF-16/32 files announce themselves with a BOM too. Every reader of sentence
files goes through :func:`open_text` (or :func:`strip_bom` for text already decoded).
"""

from __future__ import annotations

import codecs
import gzip
import io
import os

# Longest first: the UTF-32-LE BOM starts with the UTF-16-LE one.
_BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
BOM_CHAR = "\ufeff"


def sniff_bom(head: bytes) -> tuple[str | None, int]:
    """(encoding, BOM length) for bytes that start with a BOM, else (None, 0)."""
    for bom, enc in _BOMS:
        if head.startswith(bom):
            return enc, len(bom)
    return None, 0


def strip_bom(text: str) -> str:
    """``text`` without a leading U+FEFF (a BOM decoded as a character)."""
    return text[1:] if text.startswith(BOM_CHAR) else text


def wrap_text(
    raw: io.BufferedIOBase, encoding: str = "utf-8", errors: str = "replace"
) -> io.TextIOWrapper:
    """Text view of a seekable binary stream at its start; a BOM picks the encoding and is skipped.

    Lines end at ``\\n`` only (a stray ``\\r`` inside a sentence does not split it: line i must
    stay row i of the embeddings); callers strip a trailing ``\\r``.
    """
    enc, n = sniff_bom(raw.read(4))
    raw.seek(n)
    return io.TextIOWrapper(raw, encoding=enc or encoding, errors=errors, newline="\n")


def open_text(
    path: str | os.PathLike, encoding: str = "utf-8", errors: str = "replace"
) -> io.TextIOWrapper:
    """Open a text file (``.gz`` decompressed) for reading, honouring and removing a BOM.

    ``errors="replace"``: a stray invalid byte costs one character, not the whole file.
    """
    p = os.fspath(path)
    raw = gzip.open(p, "rb") if p.endswith(".gz") else open(p, "rb")  # noqa: SIM115 - wrapped
    try:
        return wrap_text(raw, encoding, errors)
    except Exception:
        raw.close()
        raise


def read_lines(path: str | os.PathLike) -> list[str]:
    """All lines of a text file, without line ends (``\\n`` or ``\\r\\n``) and without a BOM."""
    with open_text(path) as f:
        return [line.rstrip("\n").rstrip("\r") for line in f]
