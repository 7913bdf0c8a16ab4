"""The shared stats contract and preset loading."""

import pytest

from labse_common.config import apply_overrides, load_section
from labse_common.stats import StageCounter, check_balanced, merge_counts, to_report


def test_stats_report_shape_and_balance():
    c = StageCounter()
    c.add_in("sentences", 5)
    c.add_out("sentences", 3)
    c.add_dropped("sentences", "too_short", 2)
    c.add_event("sentences", "truncated")
    r = c.to_report("x", extra=1)
    assert r == {
        "stage": "x",
        "extra": 1,
        "counts": {
            "sentences": {
                "in": 5,
                "out": 3,
                "dropped": {"too_short": 2},
                "events": {"truncated": 1},
            }
        },
    }
    assert check_balanced(r) == []
    c.add_in("sentences")
    assert check_balanced(c.to_report("x")) == ["sentences: in=6 != out=3 + dropped=2"]


def test_merge_counts_and_drain():
    a, b = StageCounter(), StageCounter()
    a.add_in("docs", 2)
    b.add_in("docs", 3)
    b.add_out("docs", 1)
    merged = merge_counts([a.drain(), b.drain()])
    assert merged == {"docs/in": 5, "docs/out": 1}
    assert a.drain() == {}
    assert to_report("s", merged)["counts"]["docs"]["in"] == 5


def test_presets_and_overrides():
    demo = load_section("demo", "corpus")
    paper = load_section("paper", "corpus")
    assert demo["min_chars"] == paper["min_chars"] == 10
    assert demo["max_chars"] == paper["max_chars"] == 5000
    cfg = apply_overrides(demo, ["lid_threshold=0.3", "langs=[en, sr]", "new.nested=1e-5"])
    assert cfg["lid_threshold"] == 0.3 and cfg["langs"] == ["en", "sr"]
    assert cfg["new"]["nested"] == 1e-5
    with pytest.raises(ValueError):
        apply_overrides(demo, ["no_equals_sign"])
    with pytest.raises(FileNotFoundError):
        load_section("/nonexistent.yaml", "corpus")
