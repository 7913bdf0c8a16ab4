import pytest

from filters.mono.splitter import split_sentences

CASES = {
    "latin": (
        "Dr. Smith went to Washington. He arrived at 5 p.m. on Monday! Did he stay? Yes.",
        [
            "Dr. Smith went to Washington.",
            "He arrived at 5 p.m. on Monday!",
            "Did he stay?",
            "Yes.",
        ],
    ),
    "latin_initials_and_abbrev": (
        "J. R. R. Tolkien wrote it. The U.S. Army, e.g. the infantry, came. Einige z. B. hier.",
        [
            "J. R. R. Tolkien wrote it.",
            "The U.S. Army, e.g. the infantry, came.",
            "Einige z. B. hier.",
        ],
    ),
    "latin_quotes": (
        '"Stop!" he said. "Go." She left.',
        ['"Stop!" he said.', '"Go."', "She left."],
    ),
    "ordinal_dates": (
        "Dana 17. avgusta 2019. godine je padala kiša.",
        ["Dana 17. avgusta 2019. godine je padala kiša."],
    ),
    "cyrillic": (
        "Это первое предложение. Это второе предложение! А это третье?",
        ["Это первое предложение.", "Это второе предложение!", "А это третье?"],
    ),
    "greek": (
        "Αυτή είναι η πρώτη πρόταση. Πού είσαι; Είμαι εδώ.",
        ["Αυτή είναι η πρώτη πρόταση.", "Πού είσαι;", "Είμαι εδώ."],
    ),
    "arabic": (
        "هذه هي الجملة الأولى. هل أنت هنا؟ نعم أنا هنا.",
        ["هذه هي الجملة الأولى.", "هل أنت هنا؟", "نعم أنا هنا."],
    ),
    "urdu": ("یہ پہلا جملہ ہے۔ یہ دوسرا جملہ ہے۔", ["یہ پہلا جملہ ہے۔", "یہ دوسرا جملہ ہے۔"]),
    "devanagari": (
        "यह पहला वाक्य है। यह दूसरा वाक्य है॥ तीसरा वाक्य।",
        ["यह पहला वाक्य है।", "यह दूसरा वाक्य है॥", "तीसरा वाक्य।"],
    ),
    "chinese": (
        "这是第一句。这是第二句！这是第三句？",
        ["这是第一句。", "这是第二句！", "这是第三句？"],
    ),
    "japanese": (
        "これは日本語の文です。二番目の文です。",
        ["これは日本語の文です。", "二番目の文です。"],
    ),
    "thai": (
        "ภาษาไทยไม่มีเครื่องหมายวรรคตอน ประโยคที่สองอยู่ที่นี่ ประโยคที่สาม",
        ["ภาษาไทยไม่มีเครื่องหมายวรรคตอน", "ประโยคที่สองอยู่ที่นี่", "ประโยคที่สาม"],
    ),
    "ascii_semicolon_is_not_a_boundary": (
        "First clause; Second clause continues here.",
        ["First clause; Second clause continues here."],
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_split_per_script(name):
    text, expected = CASES[name]
    assert split_sentences(text) == expected


def test_split_is_lossless_up_to_whitespace():
    text = " ".join(t for t, _ in CASES.values())
    joined = "".join(split_sentences(text)).replace(" ", "")
    assert joined == text.replace(" ", "")


def test_empty_and_no_terminator():
    assert split_sentences("") == []
    assert split_sentences("   ") == []
    assert split_sentences("no terminator at all") == ["no terminator at all"]
