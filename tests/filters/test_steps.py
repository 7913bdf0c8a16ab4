"""The step protocol (filters/steps.py) and the sentence cleaner moved onto it."""

from __future__ import annotations

import json

import pytest

from filters.steps import Chain, KeepSummary, Step, chain_report, length_bucket
from labse_common.stats import StageCounter, check_balanced
from tests.support.cleaner_samples import DATA, EXPECTED


class MinLen(Step):
    name = "min_len"

    def __call__(self, rec: str) -> str | None:
        return "too_short" if len(rec) < 3 else None


class NoDigits(Step):
    name = "no_digits"

    def __init__(self) -> None:
        self.annotated = 0

    def annotate(self, records) -> None:
        self.annotated += len(records)

    def __call__(self, rec: str) -> str | None:
        return "has_digit" if any(c.isdigit() for c in rec) else None


def test_chain_counts_each_step_and_reports_balanced():
    digits = NoDigits()
    chain = Chain([MinLen(), digits], unit="items")
    counter = StageCounter()
    dropped = []
    kept = chain.run(
        ["ab", "abc", "a1b2", "xyz", "9"], counter, lambda r, s, why: dropped.append((r, s, why))
    )
    assert kept == ["abc", "xyz"]
    assert dropped == [
        ("ab", "min_len", "too_short"),
        ("9", "min_len", "too_short"),
        ("a1b2", "no_digits", "has_digit"),
    ]
    assert digits.annotated == 3  # only the records that reached the step are annotated
    rep = chain.report("t")
    assert rep["counts"]["items"] == {
        "in": 5,
        "out": 2,
        "dropped": {"too_short": 2, "has_digit": 1},
    }
    assert rep["steps"]["min_len"] == {"in": 5, "out": 3, "dropped": {"too_short": 2}}
    assert rep["steps"]["no_digits"] == {"in": 3, "out": 2, "dropped": {"has_digit": 1}}
    assert list(rep["steps"]) == ["min_len", "no_digits"]
    assert not check_balanced(rep) and not check_balanced({"counts": rep["steps"]})
    assert counter.to_report("t")["counts"] == rep["counts"]


def test_chain_counts_merge_across_batches_and_unique_names():
    a, b = Chain([MinLen()], unit="items"), Chain([MinLen()], unit="items")
    a.run(["a", "abcd"])
    b.run(["abc"])
    merged = {**a.drain()}
    for k, v in b.drain().items():
        merged[k] = merged.get(k, 0) + v
    rep = chain_report("t", merged, ["min_len"])
    assert rep["counts"]["items"] == {"in": 3, "out": 2, "dropped": {"too_short": 1}}
    assert a.counts == {}
    with pytest.raises(ValueError, match="unique"):
        Chain([MinLen(), MinLen()])


def test_keep_summary_by_lang_pair_and_length():
    chain = Chain([MinLen(), NoDigits()], unit="pairs")
    recs = ["ab", "abc", "a1b2", "x" * 30]
    outcomes = chain.decide(recs)
    s = KeepSummary()
    s.add_outcomes(
        chain.step_names, outcomes, ["en-de", "en-de", "en-fr", "en-fr"], [len(r) for r in recs]
    )
    d = s.to_dict(chain.step_names)
    de = d["by_lang_pair"]["en-de"]
    assert (de["in"], de["out"]) == (2, 1)
    assert de["steps"]["min_len"] == {"in": 2, "out": 1}
    assert de["steps"]["no_digits"] == {"in": 1, "out": 1}
    fr = d["by_lang_pair"]["en-fr"]
    assert fr["steps"]["no_digits"] == {"in": 2, "out": 1}
    assert list(d["by_length"]) == ["0-9", "20-49"]
    assert d["by_length"]["0-9"]["in"] == 3 and d["by_length"]["20-49"]["out"] == 1
    assert (
        length_bucket(0) == "0-9"
        and length_bucket(10) == "10-19"
        and length_bucket(10_000) == "500+"
    )


@pytest.mark.slow
def test_sentence_chain_on_steps_gives_the_same_rows_and_counts_as_before():
    """The cleaner before the step protocol produced tests/data/cleaner_expected.json on the
    shared CommonCrawl and Wikipedia samples; the chain version must reproduce it."""
    if not (DATA / "wikipedia" / "enwiki-sample.xml.bz2").is_file():
        pytest.skip(f"shared sample data not found at {DATA}")
    from tests.support.cleaner_samples import clean_digest, shared_documents

    expected = json.loads(EXPECTED.read_text())
    got = clean_digest(shared_documents())
    assert got["counts"] == expected["counts"]
    assert got["kept"] == expected["kept"] > 1000
    assert got["kept_sha256"] == expected["kept_sha256"]
    assert got["dropped_sha256"] == expected["dropped_sha256"]


def test_sentence_cleaner_exposes_per_step_counts():
    from filters.mono.cleaner import CleanerConfig, Document, SentenceCleaner

    cleaner = SentenceCleaner(CleanerConfig())
    counter = StageCounter()
    counter.add_in("documents")
    text = "short\n\nThe city council approved the new budget for public schools on Monday evening."
    res = cleaner.clean(Document(text, "commoncrawl", "d1", "http://x"), counter, keep_dropped=True)
    assert [r["text"] for r in res.kept][0].startswith("The city council")
    assert [(r["reason"], r["unit"]) for r in res.dropped] == [("too_short", "lines")]
    steps = cleaner.line_chain.report("corpus")["steps"]
    assert steps["empty"]["dropped"] == {"empty": 1} and steps["length"]["dropped"] == {
        "too_short": 1
    }
    assert cleaner.sentence_chain.report("corpus")["steps"]["quality"]["out"] == 1
