"""The weighting rule of the training stream (labse_model/lanes.py): sources by weight, languages
inside a source by ``p ** alpha``, on constructed corpora whose shares are known in advance."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from labse_model import stream
from labse_model.lanes import Lane, mixing_probabilities, source_of, unknown_sources
from tests.support.two_node_util import run_labse_model

# Source "tat": two languages of 900 and 100 pairs; source "pud": one language of 400 pairs.
SIZES = {"tat.de-en": 900, "tat.fr-en": 100, "pud.de-en": 400}


def _documented(weights: dict[str, float], alpha: float) -> dict[str, float]:
    """The rule written out by hand, independently of the code under test."""
    src_w = {"tat": weights.get("tat", 1.0), "pud": weights.get("pud", 1.0)}
    norm = src_w["tat"] + src_w["pud"]
    de, fr = 0.9**alpha, 0.1**alpha
    return {
        "tat.de-en": src_w["tat"] / norm * de / (de + fr),
        "tat.fr-en": src_w["tat"] / norm * fr / (de + fr),
        "pud.de-en": src_w["pud"] / norm,
    }


@pytest.mark.parametrize(
    "weights,alpha",
    [({}, 0.3), ({"tat": 3.0, "pud": 1.0}, 0.5), ({"tat": 1.0, "pud": 0.0}, 1.0), ({}, 0.0)],
)
def test_shares_follow_the_documented_rule(weights, alpha):
    got = mixing_probabilities(SIZES, alpha, weights)
    want = _documented(weights, alpha)
    assert got.keys() == want.keys()
    for g in want:
        assert math.isclose(got[g], want[g], abs_tol=1e-12), (g, got[g], want[g])
    assert math.isclose(sum(got.values()), 1.0)


def test_one_source_is_the_language_rule():
    """Plain ``<lang>/`` folders (no source prefix) keep LaBSE's language smoothing unchanged."""
    got = mixing_probabilities({"de": 900, "fr": 100}, 0.3)
    de, fr = 0.9**0.3, 0.1**0.3
    assert math.isclose(got["fr"], fr / (de + fr))
    assert source_of("de") == "" and source_of("pud.de-en") == "pud"


def test_bad_weights_are_refused():
    with pytest.raises(ValueError, match=r"name \['tatoeba'\]"):  # the source is "tat"
        mixing_probabilities(SIZES, 0.3, {"tatoeba": 2.0})
    with pytest.raises(ValueError, match=r"name \['tat'\]"):  # plain <lang> groups: no source
        mixing_probabilities({"de": 900, "fr": 100}, 0.3, {"tat": 2.0})
    assert unknown_sources(SIZES, {"tat": 2.0, "pud": 0.0}) == []
    with pytest.raises(ValueError, match="weight 0"):
        mixing_probabilities(SIZES, 0.3, {"tat": 0.0, "pud": 0.0})
    with pytest.raises(ValueError, match=">= 0"):
        mixing_probabilities(SIZES, 0.3, {"tat": -1.0})


def test_the_stream_draws_the_documented_shares(tmp_path):
    """The real lane stream over scanned ``<source>.<lang>/`` folders delivers the shares."""
    for group, n in SIZES.items():
        d = tmp_path / group
        d.mkdir()
        (d / "pairs.tsv").write_text(
            "".join(f"{group} {i}\tpair {i}\n" for i in range(n)), encoding="utf-8"
        )
    groups = stream.expand_inputs([str(tmp_path)])
    assert sorted(groups) == sorted(SIZES)
    res = stream.scan(groups, stream.PAIRS, block_rows=50)
    weights = {"tat": 3.0, "pud": 1.0}
    lane = Lane(res, stream.PAIRS, 0, 1, seed=0, alpha=0.5, source_weights=weights)
    it = lane.records(0)
    n = 20000
    counts = Counter(next(it)[0].split(" ")[0] for _ in range(n))
    want = _documented(weights, 0.5)
    for g, share in want.items():
        # 20,000 draws: the binomial standard error is below 0.0036, so 0.015 is over 4 sigma.
        assert abs(counts[g] / n - share) < 0.015, (g, counts[g] / n, share)


def test_training_refuses_weights_for_a_source_the_pairs_lack(tmp_path):
    """A misspelt source in train.source_weights was silently weighed 1: now the training
    command names it and the sources found, one line and exit 2, before building a model."""
    d = tmp_path / "pairs" / "tat.de-en"
    d.mkdir(parents=True)
    (d / "pairs.tsv").write_text("".join(f"Satz {i}.\tSentence {i}.\n" for i in range(20)))
    # The command forked from this process as `python -m` runs it (an interpreter start was
    # ~10 s of imports).
    rc, stderr = run_labse_model(
        ["train", "--pairs", str(tmp_path / "pairs")]
        + ["--output", str(tmp_path / "out"), "--max-steps", "1", "threads=1"]
        + ["--set", "source_weights={tatoeba: 2, tat: 1}"],
        tmp_path / "cli",
    )
    assert rc == 2, stderr[-2000:]
    assert "Traceback" not in stderr
    assert "train.source_weights names ['tatoeba']" in stderr
    assert "the sources ['tat']" in stderr
    assert not (tmp_path / "out" / "model").exists()
