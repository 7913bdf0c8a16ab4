"""The combined pair score, calibrated on a labelled sample OF THE MINED PAIRS, judged on the
other half of a known alignment (the threshold's promise must hold on unseen pairs)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from filters.bitext.combine import CombinedScorer, available_features, fit_combined, thresholds_for
from filters.bitext.drill import planted_candidates
from filters.bitext.sample import (
    auto_label,
    draw_sample,
    labels_bool,
    read_labels,
    split_halves,
    write_for_labelling,
)
from labse_common.errors import InputError
from labse_common.sections.combine import CombineConfig


def mined_candidates(n: int = 6000, seed: int = 7) -> tuple[pa.Table, set[tuple[str, str]]]:
    return planted_candidates(n, seed)


def test_calibrated_on_one_half_holds_on_the_other():
    table, planted = mined_candidates()
    half = split_halves(table.column("src").to_pylist())
    calib_pool = table.filter(pa.array(half == 0))
    held_out = table.filter(pa.array(half == 1))
    sample = auto_label(draw_sample(calib_pool, 500, seed=1), planted)
    good = labels_bool(sample)
    fit = fit_combined(
        sample, good, CombineConfig(target=0.8, bootstrap=400, confidence=0.9, seed=0)
    )
    assert fit.calibration is not None, fit.unreachable
    aucs = {f.name: f.auc for f in fit.features}
    # Both scores carry information; their combination is better than either alone.
    assert aucs["margin"] > 0.7 and aucs["cds_score"] > 0.7
    assert fit.oof_auc > max(aucs["margin"], aucs["cds_score"]) + 0.01
    # The promise, checked on the half nobody fitted or calibrated on.
    scores = fit.scorer.score(held_out)
    keep = scores >= thresholds_for(fit, [None] * held_out.num_rows)
    truth = np.array(
        [
            (s, t) in planted
            for s, t in zip(held_out.column("src").to_pylist(), held_out.column("trg").to_pylist())
        ]
    )
    precision = truth[keep].mean()
    lo, hi = fit.calibration.precision_ci
    assert lo <= precision <= hi, (precision, lo, hi)
    assert precision >= 0.75
    # Scores survive a JSON round trip unchanged.
    again = CombinedScorer.from_json(fit.scorer.to_json())
    assert np.allclose(again.score(held_out), scores)


def test_one_feature_is_a_special_case_and_per_pair_thresholds():
    table, planted = mined_candidates(seed=3)
    sample = auto_label(draw_sample(table, 600, seed=2), planted)
    cfg = CombineConfig(features=["margin"], bootstrap=200, seed=0)
    fit = fit_combined(sample, labels_bool(sample), cfg)
    assert [f.name for f in fit.features] == ["margin"]
    assert fit.scorer.weights[0] > 0  # higher margin, more likely GOOD
    assert set(fit.per_pair) == {"de", "fr"}
    thr = thresholds_for(fit, ["de", "fr", "xx"])
    assert np.isfinite(thr).all()
    assert "abs_log_len_ratio" in available_features(table)


def test_unreachable_target_is_reported_not_hidden():
    rng = np.random.default_rng(0)
    n = 300
    table = pa.table(
        {
            "src": [f"s{i}" for i in range(n)],
            "trg": [f"t{i}" for i in range(n)],
            "margin": rng.normal(1.0, 0.1, n),
        }
    )
    good = rng.random(n) < 0.3  # labels unrelated to the score
    fit = fit_combined(table, good, CombineConfig(features=["margin"], target=0.95, bootstrap=50))
    assert fit.calibration is None
    assert "GOOD" in fit.unreachable or "separate" in fit.unreachable


def test_one_label_of_a_kind_is_a_refusal_not_a_scikit_learn_traceback():
    """With combine.min_per_label 1, a single GOOD pair passes the label check; the out-of-fold
    fit of several features would train a fold on BAD pairs only: refused in one line."""
    from filters.bitext.calibrate import CalibrationError

    rng = np.random.default_rng(1)
    n = 40
    table = pa.table({"margin": rng.normal(1.0, 0.1, n), "xsim": rng.normal(0.5, 0.1, n)})
    good = np.zeros(n, dtype=bool)
    good[0] = True
    cfg = CombineConfig(features=["margin", "xsim"], min_per_label=1, min_labelled=10)
    with pytest.raises(CalibrationError, match="at least 2 of each label"):
        fit_combined(table, good, cfg)


def test_stratified_sample_is_proportional_and_labels_round_trip(tmp_path):
    table, planted = mined_candidates(n=2000, seed=5)
    sample = draw_sample(table, 200, margin_buckets=4, seed=0)
    assert sample.num_rows == 200
    assert len(set(sample.column("sample_id").to_pylist())) == 200
    # Proportional: each language's share of the sample matches its share of the candidates.
    for lang in ("de", "fr"):
        share_all = np.mean(np.asarray(table.column("src_lang").to_pylist()) == lang)
        share_smp = np.mean(np.asarray(sample.column("src_lang").to_pylist()) == lang)
        assert abs(share_all - share_smp) < 0.02
    assert abs(sum(sample.column("weight").to_pylist()) - table.num_rows) < 1e-6
    path = tmp_path / "to_label.tsv"
    write_for_labelling(auto_label(sample, planted), path)
    back, blank = read_labels(path)
    assert blank == 0 and back.num_rows == 200
    assert labels_bool(back).sum() == labels_bool(auto_label(sample, planted)).sum()
    lines = path.read_text(encoding="utf-8").splitlines()
    cells = lines[1].split("\t")
    cells[lines[0].split("\t").index("label")] = "MAYBE"
    path.write_text("\n".join([lines[0], "\t".join(cells), *lines[2:]]) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match="line 2: label 'MAYBE'"):
        read_labels(path)


def _run(module, argv: list[str]) -> int:
    return module.main([*argv, "--log-level", "WARNING"])


@pytest.mark.slow
def test_sample_and_combine_commands(tmp_path):
    import pyarrow.parquet as pq

    from filters.bitext import cli_combine, cli_sample
    from labse_common.stats import check_balanced, read_report

    table, planted = mined_candidates(n=3000, seed=11)
    pairs = tmp_path / "scored.parquet"
    pq.write_table(table, pairs)
    gold = tmp_path / "planted.tsv"
    gold.write_text("".join(f"{s}\t{t}\n" for s, t in sorted(planted)), encoding="utf-8")
    smp = tmp_path / "sample"
    assert (
        _run(
            cli_sample,
            ["--pairs", str(pairs), "--planted", str(gold), "--output", str(smp), "--n", "400"],
        )
        == 0
    )
    stats = read_report(smp / "stats.json")
    assert not check_balanced(stats)
    assert stats["counts"]["pairs"]["out"] == 400
    assert stats["counts"]["pairs"]["dropped"]["other_half"] > 1000  # the evaluation half
    out = tmp_path / "combined"
    assert (
        _run(
            cli_combine,
            [
                "--pairs",
                str(pairs),
                "--labels",
                str(smp / "sample.tsv"),
                "--output",
                str(out),
                "--set",
                "bootstrap=100",
            ],
        )
        == 0
    )
    scored = pq.read_table(out / "scored.parquet")
    assert scored.num_rows == table.num_rows
    keep = np.asarray(scored.column("keep").to_pylist())
    truth = np.array(
        [
            (s, t) in planted
            for s, t in zip(table.column("src").to_pylist(), table.column("trg").to_pylist())
        ]
    )
    assert 0.7 <= truth[keep].mean() <= 0.95
    report = read_report(out / "stats.json")
    assert not check_balanced(report)
    assert report["counts"]["pairs"]["out"] == int(keep.sum())
    assert {"margin", "cds_score"} <= set(report["features"])
    # A target no threshold reaches: stop (exit 2, nothing written) or continue (the pairs at the
    # best reachable threshold kept, and the summary says the target was not reached).
    stop = tmp_path / "stop"
    assert (
        _run(
            cli_combine,
            [
                "--pairs",
                str(pairs),
                "--labels",
                str(smp / "sample.tsv"),
                "--output",
                str(stop),
                "--target",
                "0.999",
                "--set",
                "bootstrap=50",
                "--set",
                "min_kept=150",
                "--set",
                "on_unreachable=stop",
            ],
        )
        == 2
    )
    assert not stop.exists()
    cont = tmp_path / "continue"
    assert (
        _run(
            cli_combine,
            [
                "--pairs",
                str(pairs),
                "--labels",
                str(smp / "sample.tsv"),
                "--output",
                str(cont),
                "--target",
                "0.999",
                "--set",
                "bootstrap=50",
                "--set",
                "min_kept=150",
                "--set",
                "on_unreachable=continue",
            ],
        )
        == 0
    )
    summary = json.loads((cont / "combined.json").read_text())
    best = summary["reachable"]
    assert summary["target_reached"] is False and "not reachable" in summary["message"]
    assert (
        best["precision"] < 0.999
        and best["precision_ci"][0] <= best["precision"] <= best["precision_ci"][1]
    )
    kept = pq.read_table(cont / "scored.parquet")
    keep = np.asarray(kept.column("keep").to_pylist())
    assert keep.any() and np.all(
        np.asarray(kept.column("combined_score").to_pylist())[keep] >= best["threshold"]
    )
    # Labels from another pairs table are refused, naming the file.
    other = tmp_path / "other.parquet"
    pq.write_table(table.slice(0, 100), other)
    assert (
        _run(
            cli_combine,
            [
                "--pairs",
                str(other),
                "--labels",
                str(smp / "sample.tsv"),
                "--output",
                str(tmp_path / "x"),
            ],
        )
        == 2
    )
    # CDS alone is the one-feature case: --features cds_score. The kept pairs are exactly those
    # past one cds_score threshold (the model is monotone in it), globally here.
    cds = tmp_path / "cds_only"
    argv = ["--pairs", str(pairs), "--labels", str(smp / "sample.tsv"), "--output", str(cds)]
    flags = ["--features", "cds_score", "--set", "per_pair=false", "--set", "bootstrap=50"]
    assert _run(cli_combine, [*argv, *flags]) == 0
    assert json.loads((cds / "model.json").read_text())["features"] == ["cds_score"]
    scored = pq.read_table(cds / "scored.parquet")
    keep = np.asarray(scored.column("keep").to_pylist())
    cds_score = np.asarray(scored.column("cds_score").to_pylist())
    assert keep.any() and not keep.all()
    assert cds_score[keep].min() > cds_score[~keep].max()
    # A misspelt feature: one line, exit 2, nothing written.
    bad = tmp_path / "bad"
    assert _run(cli_combine, [*argv[:-1], str(bad), "--features", "cds_scor"]) == 2
    assert not bad.exists()


def test_char3_cosine_rewards_spellings_both_sides_share():
    from filters.bitext.combine import DERIVED

    v = DERIVED["char3_cosine"](
        ["Angela Merkel besuchte 2019 Paris.", "Der Hund schläft.", "", "Ça va"],
        ["Angela Merkel visited Paris in 2019.", "The stock market fell sharply.", "x", "CA VA"],
    )
    assert v[0] > 0.5 > 0.2 > v[1]
    assert v[2] == 0.0  # an empty side shares nothing
    assert v[3] == pytest.approx(1.0)  # case and accents folded
