"""The one table of language codes: ISO 639-3 (and 639-2/B) codes to the ISO 639-1 codes that
fastText's lid.176 model (and so the corpus jobs' folder names) use, and the Tatoeba languages
the runner knows.

Every module that maps between Tatoeba's three-letter codes (``deu``) and two-letter LID labels
(``de``) reads this table, so a language added here is known everywhere at once.
"""

from __future__ import annotations

# ISO 639-3 / 639-2 codes -> ISO 639-1 (lid.176 labels). Macro-language members map to their
# macro-language's code (cmn, yue, wuu -> zh; arb -> ar; pes -> fa; swh -> sw).
ISO3_TO_1: dict[str, str] = {
    "eng": "en", "deu": "de", "ger": "de", "fra": "fr", "fre": "fr", "spa": "es", "ita": "it",
    "por": "pt", "nld": "nl", "dut": "nl", "pol": "pl", "tur": "tr", "vie": "vi", "ind": "id",
    "msa": "ms", "zsm": "ms", "swe": "sv", "dan": "da", "nor": "no", "nob": "nb", "nno": "nn",
    "fin": "fi", "est": "et", "lav": "lv", "lit": "lt", "ces": "cs", "cze": "cs", "slk": "sk",
    "slv": "sl", "hrv": "hr", "bos": "bs", "srp": "sr", "sqi": "sq", "alb": "sq", "ron": "ro",
    "rum": "ro", "hun": "hu", "cat": "ca", "eus": "eu", "glg": "gl", "afr": "af", "swa": "sw",
    "swh": "sw", "tgl": "tl", "fil": "tl", "cym": "cy", "gle": "ga", "isl": "is", "mlt": "mt",
    "aze": "az", "uzb": "uz", "epo": "eo", "lat": "la", "ltz": "lb", "rus": "ru", "ukr": "uk",
    "bel": "be", "bul": "bg", "mkd": "mk", "kaz": "kk", "kir": "ky", "mon": "mn", "tgk": "tg",
    "ara": "ar", "arb": "ar", "fas": "fa", "pes": "fa", "per": "fa", "urd": "ur", "pus": "ps",
    "uig": "ug", "heb": "he", "yid": "yi", "ell": "el", "gre": "el", "hin": "hi", "mar": "mr",
    "nep": "ne", "npi": "ne", "san": "sa", "ben": "bn", "asm": "as", "pan": "pa", "guj": "gu",
    "ori": "or", "ory": "or", "tam": "ta", "tel": "te", "kan": "kn", "mal": "ml", "sin": "si",
    "tha": "th", "lao": "lo", "khm": "km", "mya": "my", "bur": "my", "kat": "ka", "geo": "ka",
    "hye": "hy", "arm": "hy", "amh": "am", "tir": "ti", "bod": "bo", "tib": "bo", "zho": "zh",
    "chi": "zh", "cmn": "zh", "yue": "zh", "wuu": "zh", "jpn": "ja", "kor": "ko",
}  # fmt: skip

# The Tatoeba languages of the data this project is run and benchmarked on (``<split>.xxx-eng``
# files); English is the pivot every other one is paired with.
TATOEBA_LANGS: tuple[str, ...] = ("ara", "cmn", "deu", "ell", "fra", "hin", "ita", "jpn", "kor",
                                  "nld", "pol", "por", "rus", "spa", "tur", "vie", "eng")  # fmt: skip

# Tatoeba code -> lid.176 label, for the languages above only (the runner's known languages).
TATOEBA_TO_LID: dict[str, str] = {code: ISO3_TO_1[code] for code in TATOEBA_LANGS}


def base_lang(code: str) -> str:
    """The ISO 639-1 code of any spelling: ``cmn_Hani`` -> ``zh``, ``zh-Hans`` -> ``zh``,
    ``eng`` -> ``en``, ``EN`` -> ``en``; an unknown code comes back lower-cased, without its
    script or region."""
    head = code.strip().lower().replace("-", "_").split("_", 1)[0]
    return ISO3_TO_1.get(head, head)
