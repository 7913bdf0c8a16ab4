"""The one table of language codes: ISO 639-3 (and 639-2/B) codes to the ISO 639-1 codes that
fastText's lid.176 model (and so the corpus jobs' folder names) use, and the Tatoeba languages
the runner knows; every label of the bundled LID model lid.176 (:data:`LID_LANGS`), and
:func:`normalize_lang` / :func:`parse_pair`, which turn any spelling a user writes into those.

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
    # The other two-letter lid.176 languages (ISO 639-3, and 639-2/B where it differs) ...
    "arg": "an", "ava": "av", "bak": "ba", "bre": "br", "che": "ce", "cos": "co", "chv": "cv",
    "div": "dv", "fry": "fy", "gla": "gd", "grn": "gn", "glv": "gv", "hat": "ht", "ina": "ia",
    "ile": "ie", "ido": "io", "jav": "jv", "kur": "ku", "kom": "kv", "cor": "kw", "lim": "li",
    "mlg": "mg", "oci": "oc", "oss": "os", "que": "qu", "roh": "rm", "srd": "sc", "snd": "sd",
    "hbs": "sh", "som": "so", "sun": "su", "tuk": "tk", "tat": "tt", "vol": "vo", "wln": "wa",
    "yor": "yo", "bih": "bh", "slo": "sk", "baq": "eu", "ice": "is", "mac": "mk", "may": "ms",
    "wel": "cy",
    # ... individual languages of a macro-language lid.176 knows by the macro-language's code ...
    "ekk": "et", "lvs": "lv", "khk": "mn", "pbt": "ps", "uzn": "uz", "azj": "az", "kmr": "ku",
    "plt": "mg", "ydd": "yi", "prs": "fa", "gug": "gn",
    # ... and Alemannic, which lid.176 labels with Wikipedia's code "als" (in ISO 639-3 "als"
    # is Tosk Albanian: "als" here means what lid.176 means, Alemannic).
    "gsw": "als",
}  # fmt: skip

# Every label of the bundled lid.176 model (filters/models/lid.176.ftz): the codes a language can
# have in this project (corpus folder names, pair names, LID output). A fact about that file,
# generated once with
#   sorted(l.removeprefix("__label__") for l in fasttext.load_model(path).get_labels())
# and written out here so that importing this module loads no model (tests/labse_common/
# test_sources.py checks the list against the model).
LID_176_LABELS: tuple[str, ...] = (
    "af", "als", "am", "an", "ar", "arz", "as", "ast", "av", "az", "azb", "ba", "bar", "bcl", "be",
    "bg", "bh", "bn", "bo", "bpy", "br", "bs", "bxr", "ca", "cbk", "ce", "ceb", "ckb", "co", "cs",
    "cv", "cy", "da", "de", "diq", "dsb", "dty", "dv", "el", "eml", "en", "eo", "es", "et", "eu",
    "fa", "fi", "fr", "frr", "fy", "ga", "gd", "gl", "gn", "gom", "gu", "gv", "he", "hi", "hif",
    "hr", "hsb", "ht", "hu", "hy", "ia", "id", "ie", "ilo", "io", "is", "it", "ja", "jbo", "jv",
    "ka", "kk", "km", "kn", "ko", "krc", "ku", "kv", "kw", "ky", "la", "lb", "lez", "li", "lmo",
    "lo", "lrc", "lt", "lv", "mai", "mg", "mhr", "min", "mk", "ml", "mn", "mr", "mrj", "ms", "mt",
    "mwl", "my", "myv", "mzn", "nah", "nap", "nds", "ne", "new", "nl", "nn", "no", "oc", "or",
    "os", "pa", "pam", "pfl", "pl", "pms", "pnb", "ps", "pt", "qu", "rm", "ro", "ru", "rue", "sa",
    "sah", "sc", "scn", "sco", "sd", "sh", "si", "sk", "sl", "so", "sq", "sr", "su", "sv", "sw",
    "ta", "te", "tg", "th", "tk", "tl", "tr", "tt", "tyv", "ug", "uk", "ur", "uz", "vec", "vep",
    "vi", "vls", "vo", "wa", "war", "wuu", "xal", "xmf", "yi", "yo", "yue", "zh",
)  # fmt: skip
LID_LANGS: frozenset[str] = frozenset(LID_176_LABELS)

# Codes lid.176 does not use for a language it knows: Norwegian Bokmal is "no" there (ISO3_TO_1
# maps nob to nb), and withdrawn ISO 639-1 codes (iw, ji, in, jw, mo) become their successors.
LID_ALIASES: dict[str, str] = {"nb": "no", "iw": "he", "ji": "yi", "in": "id", "jw": "jv",
                               "mo": "ro"}  # fmt: skip

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


def normalize_lang(code: str) -> str:
    """The lid.176 label of a language code: ISO 639-1, 639-3 or 639-2/B, any case, with an
    optional script or region (``EN``, ``eng``, ``ger``, ``zh-Hans``, ``cmn_Hani`` -> ``en``,
    ``en``, ``de``, ``zh``, ``zh``). Macro-language members become the macro-language, as in
    :func:`base_lang` (``yue`` -> ``zh``). A code that names no lid.176 language: ValueError
    naming it."""
    if not isinstance(code, str) or not code.strip():
        raise ValueError(f"empty language code {code!r}")
    lang = base_lang(code)
    lang = LID_ALIASES.get(lang, lang)
    if lang not in LID_LANGS:
        raise ValueError(f"unknown language code {code!r}: not an ISO 639-1/639-3 code of a "
                         "language the LID model lid.176 knows")  # fmt: skip
    return lang


def parse_pair(text: str) -> tuple[str, str]:
    """A language pair written ``SRC-TRG`` -> both codes normalized (:func:`normalize_lang`):
    ``de-fr``, ``deu-fra``, ``cmn_Hani-eng`` -> ``("de", "fr")``, ..., ``("zh", "en")``.

    ``-`` is the only separator: ``_`` joins a code to its script (``cmn_Hani``), so ``de_fr``
    is refused rather than guessed, and so is a region or script written with ``-`` inside a
    pair (``zh-Hans-en``: write ``zh_Hans-en``). The same language on both sides is refused.
    Every refusal is a ValueError naming the text."""
    parts = text.strip().split("-") if isinstance(text, str) else []
    if len(parts) != 2 or not all(p.strip() for p in parts):
        raise ValueError(f"language pair {text!r} is not SRC-TRG (two codes joined by '-', "
                         "e.g. de-fr or deu-fra; a script goes after '_': zh_Hans-en)")  # fmt: skip
    src, trg = (normalize_lang(p) for p in parts)
    if src == trg:
        raise ValueError(f"language pair {text!r} has the same language on both sides ({src})")
    return src, trg
