"""Unit tests of the filters library (no Beam)."""

import time

import pytest

from filters.langid import LanguageFilter, LanguageIdentifier, LidResult, default_lid_model_path
from filters.mono.boilerplate import boilerplate_flags, heuristic_quality
from filters.mono.dedup import dedup_key
from filters.mono.length import LengthFilter
from filters.mono.quality import (
    QualityFilter,
    QualityScorer,
    QualityTrainParams,
    train_quality_model,
)
from filters.mono.text import clean_text, decode_bytes
from filters.mono.timeout import TimeLimitedWorker
from filters.mono.wikitext import wikitext_to_text


def test_length_bounds_and_reasons():
    f = LengthFilter(10, 20)
    assert f("x" * 9) == "too_short"
    assert f("x" * 10) is None
    assert f("x" * 20) is None
    assert f("x" * 21) == "too_long"
    with pytest.raises(ValueError):
        LengthFilter(10, 5)


def test_default_lid_model_is_the_wheel_lid176():
    assert default_lid_model_path().endswith("lid.176.ftz")


@pytest.fixture(scope="module")
def lid():
    return LanguageIdentifier()


def test_lid_predicts_languages(lid):
    res = lid.predict(
        [
            "The quick brown fox jumps over the lazy dog near the river bank.",
            "Der schnelle braune Fuchs springt über den faulen Hund am Flussufer.",
            "这是一个关于中文语言识别的句子。",
            "Быстрая коричневая лиса прыгает через ленивую собаку.",
        ]
    )
    assert [r.lang for r in res] == ["en", "de", "zh", "ru"]
    assert all(r.score > 0.8 for r in res)


def test_lid_confusable_group_sums_probability(lid):
    # lid.176 splits Serbian Latin over sr/hr/sh/bs; the group total is the confidence.
    sent = "Večeras nešto pre 19 sati na Sodari je ubijena ženska osoba."
    (res,) = lid.predict([sent])
    labels, probs = lid.model.predict([sent], k=1)
    assert res.lang in {"sr", "hr", "bs", "sh"}
    assert res.score > float(probs[0][0]) + 0.1


def test_language_filter_reasons():
    f = LanguageFilter.from_options(0.5, ["en", "de"])
    assert f(LidResult("en", 0.9)) is None
    assert f(LidResult("en", 0.4)) == "lang_low_confidence"
    assert f(LidResult("fr", 0.9)) == "lang_not_wanted"
    assert LanguageFilter.from_options(0.5, None)(LidResult("fr", 0.9)) is None


def test_lid_unreadable_model_is_clear_error(tmp_path):
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"not a fasttext model")
    with pytest.raises(ValueError, match="cannot load fastText model"):
        LanguageIdentifier(str(bad))
    with pytest.raises(FileNotFoundError):
        LanguageIdentifier(str(tmp_path / "missing.bin"))


@pytest.mark.parametrize(
    "line",
    [
        "Skip to main content",
        "Share on Facebook",
        "17. 08. 2019.",
        "©2015 Portal | Vesti | Pančevo",
        "Privacy Policy | Terms of Use",
        "Accept all cookies",
    ],
)
def test_heuristic_flags_boilerplate(line):
    assert heuristic_quality(line) < 0.5, boilerplate_flags(line)


@pytest.mark.parametrize(
    "line",
    [
        "Večeras nešto pre 19 sati na Sodari je ubijena ženska osoba.",
        "The aardvark has a long, thin tongue and a keen sense of smell.",
        "这是一个关于中文语言识别的句子。",
    ],
)
def test_heuristic_keeps_content(line):
    assert heuristic_quality(line) >= 0.5, boilerplate_flags(line)


@pytest.mark.slow
def test_quality_classifier_trains_loads_and_separates(tmp_path):
    subjects = ["The committee", "Scientists", "The mayor", "Our reporter", "The court", "Farmers"]
    verbs = ["discussed", "observed", "approved", "criticised", "announced", "studied"]
    objects = [
        "the new budget",
        "the river pollution",
        "the school reform",
        "the harvest",
        "the election results",
        "the bridge repairs",
    ]
    content = [
        f"{s} {v} {o} during the long meeting on Tuesday."
        for s in subjects
        for v in verbs
        for o in objects
    ]
    widgets = [
        "Share on Facebook",
        "Tweet",
        "Menu",
        "Home",
        "Contact",
        "Log in",
        "Subscribe",
        "Privacy Policy",
        "Terms of Use",
        "Cookies",
        "All rights reserved",
        "Next",
    ]
    boiler = [f"{a} | {b} | {c}" for a in widgets for b in widgets for c in widgets[:3] if a != b]
    model = tmp_path / "q.bin"
    report = train_quality_model(content, boiler, str(model), QualityTrainParams(epoch=25))
    assert report.accuracy >= 0.9
    assert (tmp_path / "q.bin.train.txt").exists()  # the bootstrap is inspectable
    scorer = QualityScorer(str(model))
    assert scorer.kind == "fasttext"
    good, bad = scorer.score(
        [
            "The committee approved the plan for the new school year.",
            "Share on Facebook | Tweet | Menu",
        ]
    )
    assert good > 0.5 > bad
    assert QualityFilter(0.5)(bad) == "low_quality"
    assert QualityFilter(0.5)(good) is None


def test_quality_rejects_a_lid_model_as_quality_model():
    with pytest.raises(ValueError, match="not a quality model"):
        QualityScorer(default_lid_model_path())


def test_dedup_key_normalises_case_punct_space_and_width():
    assert dedup_key("Hello, World!") == dedup_key("hello world")
    assert dedup_key("ＡＢＣ test") == dedup_key("abc TEST")
    assert dedup_key("Hello, World!") != dedup_key("Hello, World again!")


def test_decode_bytes_never_raises():
    assert decode_bytes("čćž".encode()) == ("čćž", False)
    text, fallback = decode_bytes("Grüße aus Köln, schöne Straße".encode("latin-1"))
    assert fallback and "K" in text
    text, fallback = decode_bytes(b"broken \x80\x81 bytes \xfa here")
    assert fallback and "broken" in text


def test_clean_text_removes_controls_and_surrogates():
    assert clean_text("a\x00b\x07c\ud800d\u00a0 e") == "abcd e"


WIKI = """{{Infobox person|name=Ada|birth_date={{birth date|1815|12|10}}}}
'''Ada Lovelace''' (1815{{ndash}}1852) was an [[England|English]] [[mathematician]].<ref>{{cite book|title=X}}</ref> She wrote notes.<ref name="a" />
== Early life ==
She was born in [[London]].<!-- hidden comment --> Her father was [[Lord Byron|Byron]].
[[File:Ada.jpg|thumb|right|Ada in 1840]]
{| class="wikitable"
|-
! Year !! Event
|-
| 1843 || Notes
|}
* She studied [[mathematics]] with {{lang|de|Mary Somerville}}.
<gallery>
File:A.jpg|Caption
</gallery>
<math>x^2</math>
[[Category:Mathematicians]]
[[de:Ada Lovelace]]
{{Authority control}}
"""


def test_wikitext_to_text_removes_markup_and_keeps_prose():
    text = wikitext_to_text(WIKI)
    assert "Ada Lovelace (1815–1852) was an English mathematician." in text
    assert "She was born in London. Her father was Byron." in text
    assert "She studied mathematics with Mary Somerville." in text
    for residue in (
        "{{",
        "}}",
        "[[",
        "]]",
        "<ref",
        "thumb|",
        "Category:",
        "Early life",
        "wikitable",
        "1843",
        "Caption",
        "x^2",
        "de:Ada",
        "hidden comment",
        "Infobox",
    ):
        assert residue not in text, residue


def _sleepy(seconds):
    time.sleep(seconds)
    return seconds


def _boom(_):
    raise RuntimeError("parser exploded")


@pytest.mark.slow
def test_time_limited_worker_times_out_and_recovers():
    w = TimeLimitedWorker(_sleepy, timeout_s=1.0)
    try:
        assert w(0.01) == ("ok", 0.01)
        t0 = time.time()
        assert w(30) == ("timeout", None)
        assert time.time() - t0 < 10
        assert w(0.01) == ("ok", 0.01)  # a fresh helper took over
    finally:
        w.close()


def _in_daemon(q):
    w = TimeLimitedWorker(_sleepy, timeout_s=1.0)
    try:
        q.put((w(0.01), w(30)))
    except BaseException as e:  # the old helper raised "daemonic processes are not allowed..."
        q.put(repr(e))
    finally:
        w.close()


@pytest.mark.slow
def test_time_limited_worker_runs_inside_a_daemonic_process():
    # What `dask worker` starts by default: daemonic processes, which may not start
    # multiprocessing children; the helper must still run and still time out.
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_in_daemon, args=(q,), daemon=True)
    p.start()
    try:
        assert q.get(timeout=120) == (("ok", 0.01), ("timeout", None))
    finally:
        p.join(timeout=30)


def test_time_limited_worker_reports_errors():
    w = TimeLimitedWorker(_boom, timeout_s=5.0)
    try:
        status, msg = w("x")
        assert status == "error" and "parser exploded" in msg
    finally:
        w.close()
