"""Cased BERT-style pre-tokenisation, matching the exported tokenizer's normaliser exactly.

The words counted for the vocabulary must be the words the final tokenizer will see, so this
mirrors ``tokenizers``' ``BertNormalizer(clean_text=True, handle_chinese_chars=True,
strip_accents=False, lowercase=False)`` followed by ``BertPreTokenizer``: control characters
are removed, whitespace separates words, every punctuation character is its own word, and each
CJK ideograph is its own word. No lowercasing, no accent stripping, no Unicode normalisation.

The work is done with a handful of compiled regular expressions whose character classes are
built once from ``unicodedata`` (one scan of the code space, about a second, cached).
"""

from __future__ import annotations

import functools
import re
import sys
import unicodedata
from dataclasses import dataclass

# BERT's "Chinese character" blocks (CJK Unified Ideographs and extensions, compatibility
# ideographs). Kana and Hangul are deliberately not in it: BERT does not split them.
CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def _ranges_to_class(codepoints: list[int]) -> str:
    """Compact a sorted list of code points into a regex character-class body."""
    parts = []
    i = 0
    while i < len(codepoints):
        j = i
        while j + 1 < len(codepoints) and codepoints[j + 1] == codepoints[j] + 1:
            j += 1
        lo, hi = codepoints[i], codepoints[j]
        parts.append(
            re.escape(chr(lo)) if lo == hi else f"{re.escape(chr(lo))}-{re.escape(chr(hi))}"
        )
        i = j + 1
    return "".join(parts)


def is_bert_punctuation(ch: str) -> bool:
    cp = ord(ch)
    # BERT treats every non-alphanumeric ASCII symbol as punctuation ("$", "^", "`", ...).
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


@functools.lru_cache(maxsize=1)
def _patterns() -> tuple[re.Pattern, re.Pattern, re.Pattern]:
    control, punct = [], []
    for cp in range(sys.maxunicode + 1):
        if 0xD800 <= cp <= 0xDFFF:
            continue  # surrogates are handled separately (they are not characters)
        ch = chr(cp)
        cat = unicodedata.category(ch)
        if ch in "\t\n\r":
            continue
        if cp == 0 or cp == 0xFFFD or cat.startswith("C"):
            control.append(cp)
        elif is_bert_punctuation(ch):
            punct.append(cp)
    cjk = "".join(f"{re.escape(chr(lo))}-{re.escape(chr(hi))}" for lo, hi in CJK_RANGES)
    punct_cls = _ranges_to_class(punct)
    control_re = re.compile(f"[{_ranges_to_class(control)}]+")
    # After control removal, Python's \s equals Rust's char::is_whitespace (the only
    # differences, U+001C..U+001F, are control characters and already gone).
    word_re = re.compile(f"[{cjk}{punct_cls}]|[^\\s{cjk}{punct_cls}]+")
    surrogate_re = re.compile("[\ud800-\udfff]+")
    return control_re, word_re, surrogate_re


@dataclass
class CleanResult:
    words: list[str]
    control_removed: int = 0  # characters removed by clean_text
    surrogates_removed: int = 0  # unpaired UTF-16 surrogates (invalid text) removed


def pretokenize(text: str) -> CleanResult:
    """Split one sentence into cased BERT words, reporting what had to be cleaned."""
    control_re, word_re, surrogate_re = _patterns()
    n_sur = 0
    if surrogate_re.search(text):
        cleaned = surrogate_re.sub("", text)
        n_sur = len(text) - len(cleaned)
        text = cleaned
    n_ctl = 0
    if control_re.search(text):
        cleaned = control_re.sub("", text)
        n_ctl = len(text) - len(cleaned)
        text = cleaned
    return CleanResult(word_re.findall(text), n_ctl, n_sur)


def has_words(text: str) -> bool:
    """Whether anything of ``text`` is left once the tokenizer cleans it (:func:`pretokenize`
    removes U+FFFD, surrogates and category C*: control, format such as U+200B/U+FEFF, unassigned;
    what is left and not whitespace is a word). Per character, stopping at the first letter or
    digit: this runs on every training record, and nearly all begin with one."""
    for ch in text:
        if ch.isalnum():
            return True
        if ch.isspace() or ch == "\ufffd":
            continue
        if not unicodedata.category(ch).startswith("C"):
            return True
    return False


def split_words(text: str) -> list[str]:
    """The words of one sentence (cleaning silently); the tokenizer's view of the text."""
    return pretokenize(text).words


def is_cjk(ch: str) -> bool:
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in CJK_RANGES)
