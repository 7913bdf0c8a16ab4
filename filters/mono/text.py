"""Text hygiene shared by the readers and filters: safe decoding and control characters."""

from __future__ import annotations

import re
import unicodedata

from labse_common.textio import sniff_bom

# C0/C1 controls except tab/newline, plus lone surrogates (from lenient decoders) and U+FFFE/FFFF.
_CONTROL_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")
_SPACE_RE = re.compile(r"[ \t\u00a0\u2000-\u200a\u202f\u205f\u3000]+")


def decode_bytes(data: bytes, declared: str | None = None) -> tuple[str, bool]:
    """Decode bytes to text; returns (text, used_fallback).

    A byte-order mark decides the encoding and is removed. Otherwise UTF-8 first (CommonCrawl
    WET is UTF-8), then the declared charset, then a detected one (resiliparse's detector, a
    maintained C implementation), and last UTF-8 with replacement, so decoding never raises.
    """
    bom_enc, n = sniff_bom(data[:4])
    if bom_enc:
        return data[n:].decode(bom_enc, errors="replace"), False
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError:
        pass
    if declared:
        try:
            return data.decode(declared), True
        except (UnicodeDecodeError, LookupError):
            pass
    try:
        from resiliparse.parse.encoding import bytes_to_str, detect_encoding

        return bytes_to_str(data, detect_encoding(data)), True
    except Exception:  # noqa: BLE001 - detector failures must not lose the record
        return data.decode("utf-8", errors="replace"), True


def clean_text(text: str) -> str:
    """Remove control characters and unpaired surrogates; normalise to NFC and collapse spaces."""
    text = _CONTROL_RE.sub("", text)
    if not text.isascii():  # ASCII is already NFC
        text = unicodedata.normalize("NFC", text)
    return _SPACE_RE.sub(" ", text)
