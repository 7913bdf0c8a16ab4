"""Threshold calibration: the hand-computed threshold, intervals, refusals, the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from filters.bitext.calibrate import CalibrationError, calibrate, parse_label, roc_auc
from filters.bitext.cli_calibrate import main as calibrate_main
from filters.bitext.combine import fit_combined
from labse_common.sections.combine import CombineConfig
from tests.support.paths import REPO as ROOT

# Scores with labels, best first. Kept-set precision from the top:
#   t=0.9: 1/1  0.8: 2/2  0.7: 2/3  0.6: 3/4  0.5: 4/5=0.80  0.4: 4/6  0.3: 4/7  0.2: 5/8=0.625
#   0.1: 5/9  0.0: 5/10
SCORES = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0]
LABELS = [1, 1, 0, 1, 1, 0, 0, 1, 0, 0]


def _cal(scores=SCORES, labels=LABELS, **kw):
    kw = {"min_labelled": 5, "min_per_label": 2, "min_kept": 1, "bootstrap": 200, **kw}
    return calibrate(np.array(scores), np.array(labels, dtype=bool), CombineConfig(**kw))


def test_hand_computed_threshold():
    c = _cal(target=0.8)
    assert c.threshold == 0.5
    assert c.precision == pytest.approx(0.8)
    assert c.retained_share == pytest.approx(0.5)
    # Precision is not monotone: the lowest threshold reaching 0.6 is 0.2 (5/8), below the
    # dips at 0.4 and 0.3.
    c = _cal(target=0.6)
    assert c.threshold == 0.2 and c.precision == pytest.approx(0.625) and c.retained_share == 0.8
    c = _cal(target=1.0)
    assert c.threshold == 0.8 and c.retained_share == pytest.approx(0.2)


def test_a_threshold_keeping_almost_nothing_is_refused():
    # Scores that do not separate the labels: after the single top pair (GOOD) the kept set is
    # never more than half GOOD, so only a threshold keeping 1 pair reaches 80%.
    labels = [1] + [0, 0] + [1, 0] * 20
    scores = np.linspace(1.0, 0.0, len(labels))
    assert _cal(scores, labels, target=0.8).retained_share == pytest.approx(1 / len(labels))
    with pytest.raises(CalibrationError, match="min_kept=10"):
        _cal(scores, labels, target=0.8, min_kept=10)


def test_ties_are_kept_together():
    # Three pairs share 0.5 (two BAD): keeping them drops precision to 3/5, so t stays at 0.9.
    c = _cal([0.9, 0.8, 0.5, 0.5, 0.5, 0.1], [1, 1, 1, 0, 0, 0], target=0.7, min_per_label=1)
    assert c.threshold == 0.8 and c.retained_share == pytest.approx(2 / 6)


def test_intervals_contain_the_estimates():
    rng = np.random.default_rng(1)
    good = rng.random(400) < 0.6
    scores = rng.normal(loc=np.where(good, 1.0, -1.0), scale=1.0)
    c = calibrate(scores, good, CombineConfig(target=0.8, bootstrap=300, seed=3))
    assert c.precision >= 0.8
    assert c.precision_ci[0] <= c.precision <= c.precision_ci[1]
    assert c.retained_share_ci[0] <= c.retained_share <= c.retained_share_ci[1]
    assert c.threshold_ci[0] <= c.threshold <= c.threshold_ci[1]
    assert c.precision_ci[1] - c.precision_ci[0] < 0.2  # 400 pairs pin it down
    assert 0.85 < c.roc_auc < 0.95  # two unit normals 2 apart: AUC = Phi(2/sqrt 2) = 0.92


def test_roc_auc_by_hand():
    assert roc_auc(np.array([3, 2, 1.0]), np.array([1, 1, 0], dtype=bool)) == 1.0
    assert roc_auc(np.array([1, 2, 3.0]), np.array([1, 1, 0], dtype=bool)) == 0.0
    assert roc_auc(np.array([1, 1, 1.0]), np.array([1, 0, 0], dtype=bool)) == 0.5
    # 2 GOOD {0.8, 0.4} x 2 BAD {0.6, 0.4}: wins 0.8>0.6, 0.8>0.4, tie 0.4=0.4 -> 2.5/4
    assert roc_auc(np.array([0.8, 0.4, 0.6, 0.4]), np.array([1, 1, 0, 0], dtype=bool)) == 0.625


@pytest.mark.parametrize(
    "scores,labels,match",
    [
        (SCORES[:4], LABELS[:4], "at least 5"),
        (SCORES, [1] * 10, "all GOOD"),
        (SCORES, [0] * 10, "all BAD"),
        (SCORES, [1] * 9 + [0], "1 BAD"),
        ([0.9, 0.8, 0.7, 0.6, 0.5, 0.4], [0, 0, 1, 1, 0, 1], "no threshold"),
    ],
)
def test_refusals(scores, labels, match):
    with pytest.raises(CalibrationError, match=match):
        _cal(scores, labels, target=0.8)


def test_labels_parse():
    assert parse_label(" good ", "x") is True and parse_label("BAD", "x") is False
    with pytest.raises(CalibrationError, match="line 3.*'MAYBE'"):
        parse_label("MAYBE", "f: line 3")


# --- the CLI ------------------------------------------------------------------------------


def _scored(tmp_path: Path, n_extra: int = 0) -> Path:
    src = [f"quelle {i}" for i in range(10 + n_extra)]
    trg = [f"target {i}" for i in range(10 + n_extra)]
    scores = SCORES + [-1.0] * n_extra
    path = tmp_path / "scored.parquet"
    pq.write_table(
        pa.table({"src": src, "trg": trg, "cds_score": pa.array(scores, pa.float64())}), path
    )
    return path


def _labels(tmp_path: Path, rows: list[tuple[str, str, str]], extra: str = "") -> Path:
    path = tmp_path / "labels.tsv"
    path.write_text("".join(f"{s}\t{t}\t{lab}\n" for s, t, lab in rows) + extra, encoding="utf-8")
    return path


def _label_rows(labels=LABELS):
    return [(f"quelle {i}", f"target {i}", "GOOD" if g else "BAD") for i, g in enumerate(labels)]


SMALL = [
    "--set",
    "min_labelled=5",
    "--set",
    "min_per_label=2",
    "--set",
    "min_kept=1",
    "--bootstrap",
    "100",
]


@pytest.mark.slow
def test_cli_writes_threshold_plot_and_stats(tmp_path, capsys):
    scored = _scored(tmp_path, n_extra=10)
    # One malformed line (two fields) and one pair that was never scored: counted, not fatal.
    labels = _labels(tmp_path, _label_rows() + [("unscored", "pair", "BAD")], extra="only\tTWO\n")
    out = tmp_path / "cal"
    rc = calibrate_main(
        [
            "--scored",
            str(scored),
            "--labels",
            str(labels),
            "--target",
            "0.8",
            "--output",
            str(out),
            *SMALL,
        ]
    )
    assert rc == 0, capsys.readouterr().err
    doc = json.loads((out / "threshold.json").read_text())
    assert doc["threshold"] == 0.5 and doc["precision"] == pytest.approx(0.8)
    assert doc["retained_share"] == pytest.approx(0.5)
    assert doc["retained_share_scored"] == pytest.approx(5 / 20)  # 10 more pairs score -1
    for key in ("precision_ci", "retained_share_ci", "threshold_ci"):
        assert len(doc[key]) == 2 and doc[key][0] <= doc[key][1]
    assert (out / "calibration.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    stats = json.loads((out / "stats.json").read_text())
    unit = stats["counts"]["labelled_pairs"]
    assert unit == {"in": 11, "out": 10, "dropped": {"not_in_scored": 1}}
    assert stats["counts"]["label_file_lines"]["dropped"] == {"malformed": 1}
    assert "threshold 0.5000" in capsys.readouterr().out


@pytest.mark.parametrize(
    "labels,message",
    [
        (["GOOD"] * 10, "all GOOD"),
        (LABELS[:4], "at least 5"),
    ],
)
def test_cli_refuses_useless_samples(tmp_path, capsys, caplog, labels, message):
    scored = _scored(tmp_path)
    lab = _labels(tmp_path, _label_rows(labels))
    rc = calibrate_main(
        ["--scored", str(scored), "--labels", str(lab), "--output", str(tmp_path / "c"), *SMALL]
    )
    assert rc == 2
    err = capsys.readouterr().err + caplog.text
    assert message in err and f"--labels {lab}" in err and "Traceback" not in err
    assert not (tmp_path / "c").exists()


def test_cli_refuses_a_score_column_stored_as_text(tmp_path, caplog):
    """The same decision as apply: numbers stored as text are refused, the column named."""
    path = tmp_path / "scored.parquet"
    pq.write_table(
        pa.table(
            {
                "src": [f"quelle {i}" for i in range(10)],
                "trg": [f"target {i}" for i in range(10)],
                "cds_score": [str(v) for v in SCORES],
            }
        ),
        path,
    )
    lab = _labels(tmp_path, _label_rows())
    rc = calibrate_main(
        ["--scored", str(path), "--labels", str(lab), "--output", str(tmp_path / "c"), *SMALL]
    )
    assert rc == 2
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and str(path) in errors[0] and "'cds_score'" in errors[0]
    assert "numeric" in errors[0] and not (tmp_path / "c").exists()


def test_cli_bad_label_value_and_missing_file(tmp_path, caplog):
    scored = _scored(tmp_path)
    rows = _label_rows()
    rows[3] = (rows[3][0], rows[3][1], "maybe")
    lab = _labels(tmp_path, rows)
    assert (
        calibrate_main(
            ["--scored", str(scored), "--labels", str(lab), "--output", str(tmp_path / "c")]
        )
        == 2
    )
    assert "'maybe' is not GOOD or BAD" in caplog.text and "line 4" in caplog.text
    caplog.clear()
    assert (
        calibrate_main(
            [
                "--scored",
                str(tmp_path / "nope.parquet"),
                "--labels",
                str(lab),
                "--output",
                str(tmp_path / "c"),
            ]
        )
        == 2
    )
    assert "not found" in caplog.text and "--scored" in caplog.text


@pytest.mark.slow
def test_cli_parquet_labels_via_python_m(tmp_path):
    scored = _scored(tmp_path)
    lab = tmp_path / "labels.parquet"
    rows = _label_rows()
    pq.write_table(
        pa.table(
            {
                "src": [r[0] for r in rows],
                "trg": [r[1] for r in rows],
                "label": [r[2] for r in rows],
            }
        ),
        lab,
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "filters",
            "calibrate",
            "--scored",
            str(scored),
            "--labels",
            str(lab),
            "--output",
            str(tmp_path / "c"),
            "--target",
            "0.6",
            *SMALL,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert json.loads((tmp_path / "c" / "threshold.json").read_text())["threshold"] == 0.2


def test_cli_tsv_labels_with_header_line(tmp_path, capsys):
    scored = _scored(tmp_path)
    lab = tmp_path / "labels.tsv"
    lab.write_text(
        "src\ttrg\tlabel\n" + "".join(f"{s}\t{t}\t{g.lower()}\n" for s, t, g in _label_rows()),
        encoding="utf-8",
    )
    # The preset's combine.target (0.85 in demo) is the default; the hand-computed case is 0.8.
    rc = calibrate_main(
        ["--scored", str(scored), "--labels", str(lab), "--output", str(tmp_path / "c"), *SMALL]
        + ["--target", "0.8"]
    )
    assert rc == 0, capsys.readouterr().err
    doc = json.loads((tmp_path / "c" / "threshold.json").read_text())
    assert doc["threshold"] == 0.5 and doc["labelled"] == 10


def test_cli_unscored_labelled_pairs_are_counted(tmp_path, capsys):
    src = [f"quelle {i}" for i in range(10)]
    scores = list(SCORES)
    scores[9] = float("nan")  # a pair the scorer could not score
    pq.write_table(
        pa.table({"src": src, "trg": [f"target {i}" for i in range(10)], "cds_score": scores}),
        tmp_path / "scored.parquet",
    )
    lab = _labels(tmp_path, _label_rows())
    rc = calibrate_main(
        [
            "--scored",
            str(tmp_path / "scored.parquet"),
            "--labels",
            str(lab),
            "--output",
            str(tmp_path / "c"),
            *SMALL,
            "--target",
            "0.8",
        ]
    )
    assert rc == 0, capsys.readouterr().err
    stats = json.loads((tmp_path / "c" / "stats.json").read_text())
    assert stats["counts"]["labelled_pairs"] == {"in": 10, "out": 9, "dropped": {"no_score": 1}}
    assert json.loads((tmp_path / "c" / "threshold.json").read_text())["threshold"] == 0.5


def test_calibrate_is_combine_with_one_feature(tmp_path, capsys):
    """The alias runs the combined path: its threshold keeps exactly the pairs that the
    one-feature combined score keeps, and a lower-is-better score is kept below its threshold."""
    lab = _labels(tmp_path, _label_rows())
    argv = ["--labels", str(lab), "--target", "0.8", *SMALL]
    rc = calibrate_main(
        ["--scored", str(_scored(tmp_path)), "--output", str(tmp_path / "c"), *argv]
    )
    assert rc == 0, capsys.readouterr().err
    doc = json.loads((tmp_path / "c" / "threshold.json").read_text())
    assert doc["direction"] == "higher" and doc["model"]["features"] == ["cds_score"]
    small = {"min_labelled": 5, "min_per_label": 2, "min_kept": 1, "bootstrap": 100}
    cfg = CombineConfig(features=["cds_score"], per_pair=False, target=0.8, **small)
    table = pa.table({"cds_score": SCORES})
    fit = fit_combined(table, np.array(LABELS, dtype=bool), cfg)
    by_combined = fit.scorer.score(table) >= fit.calibration.threshold
    assert by_combined.tolist() == [s >= doc["threshold"] for s in SCORES]
    assert doc["combined_threshold"] == fit.calibration.threshold

    # dual_xent: lower is better. The same pairs, found with the sign the model learnt.
    neg = tmp_path / "neg.parquet"
    pq.write_table(
        pa.table(
            {
                "src": [f"quelle {i}" for i in range(10)],
                "trg": [f"target {i}" for i in range(10)],
                "dual_xent": [-s for s in SCORES],
            }
        ),
        neg,
    )
    out = tmp_path / "neg_cal"
    rc = calibrate_main(
        ["--scored", str(neg), "--score-column", "dual_xent", "--output", str(out), *argv]
    )
    assert rc == 0, capsys.readouterr().err
    doc = json.loads((out / "threshold.json").read_text())
    assert doc["direction"] == "lower" and doc["threshold"] == -0.5
    assert doc["precision"] == pytest.approx(0.8) and doc["score_column"] == "dual_xent"
