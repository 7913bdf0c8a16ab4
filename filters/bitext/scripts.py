"""Writing systems: which script a language is written in, how much of a text is in it, and a
per-script length unit so that a length ratio does not penalise CJK.

Script properties come from the ``regex`` module's Unicode tables (``\\p{Han}``...). Language
codes may be ISO 639-1 (``zh``), ISO 639-3 (``cmn``), BCP-47-ish (``zh-Hans``) or GlotLID-style
(``cmn_Hani``); a script suffix, when present, wins over the table.
"""

from __future__ import annotations

from functools import lru_cache

import regex

from labse_common.langs import base_lang  # the one code table; pair_rules imports it from here

_LATIN = ("Latin",)
_SCRIPTS_OF = {
    **{
        c: _LATIN
        for c in (
            "en de fr es it pt nl pl tr vi id ms sv da no nb nn fi et lv lt cs sk sl hr bs sq ro hu "
            "ca eu gl af sw tl cy ga is mt az uz eo la lb"
        ).split()
    },
    **{c: ("Cyrillic",) for c in "ru uk be bg mk kk ky mn tg".split()},
    "sr": ("Cyrillic", "Latin"),
    **{c: ("Arabic",) for c in "ar fa ur ps ug".split()},
    **{c: ("Hebrew",) for c in "he yi".split()},
    "el": ("Greek",),
    **{c: ("Devanagari",) for c in "hi mr ne sa".split()},
    "bn": ("Bengali",),
    "as": ("Bengali",),
    "pa": ("Gurmukhi",),
    "gu": ("Gujarati",),
    "or": ("Oriya",),
    "ta": ("Tamil",),
    "te": ("Telugu",),
    "kn": ("Kannada",),
    "ml": ("Malayalam",),
    "si": ("Sinhala",),
    "th": ("Thai",),
    "lo": ("Lao",),
    "km": ("Khmer",),
    "my": ("Myanmar",),
    "ka": ("Georgian",),
    "hy": ("Armenian",),
    "am": ("Ethiopic",),
    "ti": ("Ethiopic",),
    "bo": ("Tibetan",),
    "zh": ("Han",),
    "ja": ("Han", "Hiragana", "Katakana"),
    "ko": ("Hangul", "Han"),
}

# ISO 15924 codes (GlotLID labels, BCP-47 subtags) -> regex script names.
_ISO15924 = {
    "latn": ("Latin",),
    "cyrl": ("Cyrillic",),
    "arab": ("Arabic",),
    "hebr": ("Hebrew",),
    "grek": ("Greek",),
    "deva": ("Devanagari",),
    "beng": ("Bengali",),
    "guru": ("Gurmukhi",),
    "gujr": ("Gujarati",),
    "orya": ("Oriya",),
    "taml": ("Tamil",),
    "telu": ("Telugu",),
    "knda": ("Kannada",),
    "mlym": ("Malayalam",),
    "sinh": ("Sinhala",),
    "thai": ("Thai",),
    "laoo": ("Lao",),
    "khmr": ("Khmer",),
    "mymr": ("Myanmar",),
    "geor": ("Georgian",),
    "armn": ("Armenian",),
    "ethi": ("Ethiopic",),
    "tibt": ("Tibetan",),
    "hani": ("Han",),
    "hans": ("Han",),
    "hant": ("Han",),
    "jpan": ("Han", "Hiragana", "Katakana"),
    "kore": ("Hangul", "Han"),
    "hang": ("Hangul",),
}

# Lines of Tatoeba (../shared/data) give the median character-length ratio English/xx:
# cmn 3.1, jpn 2.2, kor 1.9, others 0.9-1.2. Weights per character of these scripts bring CJK
# lengths to Latin-character units (Japanese mixes Han and kana: 1/3 x 3 + 2/3 x 1.5 = 2).
DEFAULT_SCRIPT_UNITS = {"Han": 3.0, "Hiragana": 1.5, "Katakana": 1.5, "Hangul": 2.0}

_LETTER = regex.compile(r"\p{L}")


def scripts_of(code: str) -> tuple[str, ...] | None:
    """The scripts a language code is written in, or None when unknown (no script check)."""
    parts = code.strip().lower().replace("-", "_").split("_")
    for p in parts[1:]:
        if p in _ISO15924:
            return _ISO15924[p]
    return _SCRIPTS_OF.get(base_lang(code))


@lru_cache(maxsize=256)
def _script_pattern(scripts: tuple[str, ...]) -> regex.Pattern:
    return regex.compile("[" + "".join(rf"\p{{{s}}}" for s in scripts) + "]")


def script_ratio(text: str, scripts: tuple[str, ...]) -> float | None:
    """Fraction of the letters of ``text`` that are in ``scripts``; None when it has no letter."""
    if text.isascii():
        letters = sum(c.isalpha() for c in text)
        if not letters:
            return None
        return 1.0 if "Latin" in scripts else 0.0
    letters = len(text) - len(_LETTER.sub("", text))
    if not letters:
        return None
    pat = _script_pattern(scripts)
    return (len(text) - len(pat.sub("", text))) / letters


class LengthUnits:
    """Length of a text in Latin-character units: characters of the weighted scripts count
    ``weight`` each, every other character 1."""

    def __init__(self, weights: dict[str, float] | None = None) -> None:
        self.weights = dict(DEFAULT_SCRIPT_UNITS if weights is None else weights)
        weighted = [s for s, w in self.weights.items() if w != 1.0]
        self._patterns = [(regex.compile(rf"\p{{{s}}}"), self.weights[s] - 1.0) for s in weighted]
        self._any = (
            regex.compile("[" + "".join(rf"\p{{{s}}}" for s in weighted) + "]")
            if weighted
            else None
        )

    def __call__(self, text: str) -> float:
        n = float(len(text))
        if text.isascii() or self._any is None or not self._any.search(text):
            return n
        for pat, extra in self._patterns:
            n += extra * (len(text) - len(pat.sub("", text)))
        return n
