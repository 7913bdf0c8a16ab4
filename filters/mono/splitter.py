"""Multilingual sentence splitting that does not need to know the language.

LaBSE splits before language ID, so the splitter is script-driven:
- Latin, Cyrillic, Greek, Armenian, Arabic, Devanagari and similar scripts end sentences with a
  terminator followed by whitespace (``. ! ? …`` ``;``/``;`` as Greek question marks, ``؟ ۔``,
  ``। ॥``, ``։``, ``።``, ``။``, ``។``); a boundary needs whitespace and must not follow a known
  abbreviation or a single-letter initial, and must not precede a lowercase letter.
- CJK full-width terminators ``。！？`` end a sentence with no whitespace after them.
- Thai and Lao use no terminator: a space between two Thai (Lao) characters marks the boundary.

Closing quotes and brackets after a terminator stay with the sentence they close. A regex finds
candidate boundaries (C speed); only the few candidates per sentence are checked in Python.
"""

from __future__ import annotations

import re

# Terminators that need whitespace after them. Greek uses ';' (and U+037E) as its question mark.
_SPACED_TERMINATORS = ".!?…;\u037e\u061f\u06d4\u0964\u0965\u0589\u1362\u104b\u17d4\u0df4"
_CJK_TERMINATORS = "。！？｡"
_CLOSERS = "\"'”’»」』）)]】〕〉》"

_BOUNDARY_RE = re.compile(
    rf"(?P<cjk>[{_CJK_TERMINATORS}]+[{re.escape(_CLOSERS)}]*)\s*"
    rf"|(?P<term>[{re.escape(_SPACED_TERMINATORS)}]+[{re.escape(_CLOSERS)}]*)(?P<space>\s+)"
    r"|(?<=[\u0e00-\u0eff])(?P<thai>\s+)(?=[\u0e00-\u0eff])"
)

# Abbreviations that end with a period but rarely end a sentence (lower-cased, without the dot).
ABBREVIATIONS = frozenset(
    """mr mrs ms dr prof st jr sr vs etc no nr inc ltd co corp gen col lt sgt capt cmdr rev hon
    fig figs eq al approx dept est vol pp ed eds jan feb mar apr jun jul aug sep sept oct nov dec
    mt ft e.g i.e cf ca resp bzw usw vgl z.b d.h u.a s.a ggf dipl ing sv str tel
    г гг т.е т.д т.п др им см стр ул проф
    """.split()
)


_OPENERS = "([{\"'«“"


def _ends_with_abbreviation(prefix: str) -> bool:
    # The token right before the period: "Dr", "e.g", "J" (an initial), "U.S". Only the last
    # few characters matter (no abbreviation is longer), and str methods keep it in C.
    tail = prefix[-24:]
    if not tail or tail[-1].isspace():
        return False
    token = tail.rsplit(None, 1)[-1]
    if len(token) == len(tail) < len(prefix):
        return False  # a token longer than the window is no abbreviation
    cut = max(token.rfind(c) for c in _OPENERS)
    if cut >= 0:
        token = token[cut + 1 :]
    if not token:
        return False
    if token.isdigit() and len(token) <= 2:
        return True  # an ordinal or a date part: "17. avgust", "14. 08. 2019."
    if len(token) == 1 and token.isalpha():
        return True  # an initial ("J. R. R. Tolkien") or a split abbreviation ("z. B.")
    low = token.lower()
    if low in ABBREVIATIONS:
        return True
    # Dotted acronyms like "U.S" or "z.B" with single letters between dots.
    parts = low.split(".")
    return len(parts) > 1 and all(len(p) == 1 for p in parts)


def _opens_sentence(ch: str) -> bool:
    # A boundary must not be followed by a lowercase letter ("e.g. the", "3.5 kg. of").
    return not ch.islower()


def split_sentences(text: str) -> list[str]:
    """Split one line/paragraph into sentences, stripping surrounding whitespace."""
    out: list[str] = []
    start = 0
    n = len(text)
    for m in _BOUNDARY_RE.finditer(text):
        if m.group("term") is not None:
            end = m.end("term")
            nxt = m.end()
            if nxt >= n:
                continue  # end of text is handled below
            term = m.group("term")
            if term[0] == "." and len(term.rstrip(_CLOSERS)) == 1:
                if _ends_with_abbreviation(text[start : m.start("term")]):
                    continue
            if term[0] == ";" and not ("\u0370" <= text[nxt] <= "\u03ff"):
                continue  # ASCII ';' ends a sentence only as a Greek question mark
            if not _opens_sentence(text[nxt]):
                continue
        elif m.group("cjk") is not None:
            end = m.end("cjk")
        else:
            end = m.start("thai")
        piece = text[start:end].strip()
        if piece:
            out.append(piece)
        start = m.end()
    tail = text[start:].strip()
    if tail:
        out.append(tail)
    return out
