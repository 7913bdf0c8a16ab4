"""The filters' hostile inputs: a hostile or mistaken input is one line and exit 2 (or counted),
never a traceback, a silent cast or a label counted twice."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from filters.__main__ import main as filters_main
from filters.bitext.label_match import known_labels
from filters.bitext.sample import read_labels, write_for_labelling
from labse_common.config import ConfigError, load
from labse_common.errors import InputError
from labse_common.stats import StageCounter, check_balanced


def _err_line(capsys, caplog) -> str:
    """The one error line (logging reaches pytest's caplog, not stderr, under pytest)."""
    assert "Traceback" not in capsys.readouterr().err
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "\n" not in errors[0], errors
    return errors[0]


def _scored(tmp_path, **cols):
    n = 4
    table = pa.table(
        {
            "src": [f"Satz {i}" for i in range(n)],
            "trg": [f"sentence {i}" for i in range(n)],
            "cds_score": pa.array([0.9, 0.6, 0.3, 0.1], pa.float32()),
            **cols,
        }
    )
    path = tmp_path / "scored.parquet"
    pq.write_table(table, path)
    return path


@pytest.mark.parametrize("value", [True, "0.5", None, [0.5]])
def test_apply_threshold_must_be_a_number(tmp_path, capsys, caplog, value):
    thr = tmp_path / "threshold.json"
    thr.write_text(json.dumps({"threshold": value, "score_column": "cds_score"}))
    rc = filters_main(
        [
            "apply",
            "--scored",
            str(_scored(tmp_path)),
            "--threshold",
            str(thr),
            "--output",
            str(tmp_path / "out"),
        ]
    )
    assert rc == 2
    line = _err_line(capsys, caplog)
    assert "--threshold" in line and "not a number" in line, line
    assert not (tmp_path / "out").exists()


def test_rules_refuse_an_integer_text_column(tmp_path, capsys, caplog):
    path = tmp_path / "pairs.parquet"
    pq.write_table(pa.table({"src": [0, 1, 2], "trg": ["a b c", "d e f", "g h i"]}), path)
    rc = filters_main(
        [
            "rules",
            "--pairs",
            str(path),
            "--src-lang",
            "en",
            "--trg-lang",
            "de",
            "--output",
            str(tmp_path / "out"),
        ]
    )
    assert rc == 2
    line = _err_line(capsys, caplog)
    assert "'src'" in line and "int64" in line and "not UTF-8 text" in line, line


def test_encode_and_rules_share_the_text_rule():
    from labse_common.datafiles import is_text_type
    from labse_model import embed_inputs

    for t in (
        pa.string(),
        pa.large_string(),
        pa.null(),
        pa.dictionary(pa.int32(), pa.string()),
        pa.int64(),
        pa.float32(),
        pa.binary(),
    ):
        assert embed_inputs._text_type(t) == is_text_type(t), t


def test_sample_refuses_a_text_margin_column(tmp_path, capsys, caplog):
    path = tmp_path / "pairs.parquet"
    pq.write_table(pa.table({"src": ["a", "b"], "trg": ["c", "d"], "margin": ["1.2", "x"]}), path)
    rc = filters_main(["sample", "--pairs", str(path), "--output", str(tmp_path / "out")])
    assert rc == 2
    line = _err_line(capsys, caplog)
    assert "'margin'" in line and "not numbers" in line and str(path) in line, line


def test_unknown_combine_feature_refused_at_load():
    with pytest.raises(ConfigError) as e:
        load("combine", "demo", ["features=[margin,cds_scroe]"])
    assert "cds_scroe" in str(e.value) and "known:" in str(e.value) and "cds_score" in str(e.value)
    assert load("combine", "demo", ["features=[margin,rule_length]"]).features == [
        "margin",
        "rule_length",
    ]


def test_unknown_combine_feature_is_one_line(tmp_path, capsys, caplog):
    labels = tmp_path / "labels.tsv"
    labels.write_text("sample_id\tlabel\tsrc\ttrg\n")
    rc = filters_main(
        [
            "combine",
            "--pairs",
            str(_scored(tmp_path)),
            "--labels",
            str(labels),
            "--output",
            str(tmp_path / "out"),
            "--set",
            "features=[nope]",
        ]
    )
    assert rc == 2
    assert "nope" in _err_line(capsys, caplog)


def _sheet(tmp_path, labels: list[str], texts: list[int] | None = None):
    texts = texts or list(range(len(labels)))
    n = len(labels)
    sample = pa.table(
        {
            "sample_id": list(range(n)),
            "src": [f"Satz {t}" for t in texts],
            "trg": [f"sentence {t}" for t in texts],
            "label": labels,
        }
    )
    path = tmp_path / "sample.tsv"
    write_for_labelling(sample.drop_columns(["label"]), path)
    lines = path.read_text().splitlines()
    path.write_text(
        "\n".join(
            [lines[0]] + [ln.replace("\t\t", f"\t{lab}\t", 1) for ln, lab in zip(lines[1:], labels)]
        )
        + "\n"
    )
    return path


def test_read_labels_counts_a_duplicate_once_and_drops_a_conflict(tmp_path):
    # 20 distinct pairs; pair 0 labelled GOOD twice; pair 1 GOOD then BAD (1 of 22 rows: a slip).
    labels = ["GOOD", "BAD"] * 10 + ["GOOD", "GOOD"]
    texts = list(range(20)) + [0, 1]
    counter = StageCounter()
    table, blank = read_labels(_sheet(tmp_path, labels, texts), counter, "labelled_pairs")
    assert blank == 0 and table.num_rows == 19
    assert "Satz 1" not in table.column("src").to_pylist()
    assert table.column("src").to_pylist().count("Satz 0") == 1
    rep = {
        "counts": {
            "labelled_pairs": {
                "in": 22,
                "out": 19,
                "dropped": {"duplicate_label": 1, "conflicting_label": 2},
            }
        }
    }
    assert counter.counts["labelled_pairs/dropped/duplicate_label"] == 1
    assert counter.counts["labelled_pairs/dropped/conflicting_label"] == 2
    assert not check_balanced(rep)


def test_read_labels_refuses_many_conflicts_naming_the_lines(tmp_path):
    # Every pair labelled GOOD and again BAD: a mixed-up file, not a slip.
    labels = ["GOOD"] * 5 + ["BAD"] * 5
    path = _sheet(tmp_path, labels, list(range(5)) * 2)
    with pytest.raises(InputError) as e:
        read_labels(path)
    msg = str(e.value)
    assert str(path) in msg and "both GOOD and BAD" in msg and "rows 2, 3, 4" in msg, msg


def test_runner_rule_is_the_same(tmp_path):
    rows = (
        [
            {"src": "a", "trg": "b", "label": "GOOD"},
            {"src": "a", "trg": "b", "label": "GOOD"},
            {"src": "c", "trg": "d", "label": "BAD"},
        ]
        + [{"src": f"s{i}", "trg": f"t{i}", "label": "GOOD"} for i in range(20)]
        + [{"src": "c", "trg": "d", "label": "GOOD"}, {"src": "e", "trg": "f", "label": ""}]
    )
    counter = StageCounter()
    got = known_labels(rows, counter, "labels")
    assert ("a", "b") in got and ("c", "d") not in got and len(got) == 21
    assert counter.counts["labels/dropped/duplicate_label"] == 1
    assert counter.counts["labels/dropped/conflicting_label"] == 2
    assert counter.counts["labels/in"] == 25 and counter.counts["labels/out"] == 21


@pytest.mark.slow
def test_calibrate_counts_duplicates_once(tmp_path, capsys, caplog):
    n = 40
    scored = tmp_path / "scored.parquet"
    pq.write_table(
        pa.table(
            {
                "src": [f"s{i}" for i in range(n)],
                "trg": [f"t{i}" for i in range(n)],
                "cds_score": pa.array([i / n for i in range(n)], pa.float32()),
            }
        ),
        scored,
    )
    rows = [f"s{i}\tt{i}\t{'GOOD' if i >= n // 2 else 'BAD'}" for i in range(n)]
    rows += [rows[-1]] * 3 + ["s0\tt0\tGOOD"]  # three duplicates, one conflict (s0 was BAD)
    labels = tmp_path / "labels.tsv"
    labels.write_text("\n".join(rows) + "\n")
    out = tmp_path / "out"
    rc = filters_main(
        [
            "calibrate",
            "--scored",
            str(scored),
            "--labels",
            str(labels),
            "--output",
            str(out),
            "--set",
            "min_kept=2",
            "--set",
            "bootstrap=50",
        ]
    )
    assert rc == 0, capsys.readouterr().err
    stats = json.loads((out / "stats.json").read_text())
    unit = stats["counts"]["labelled_pairs"]
    assert unit["in"] == n + 4 and unit["dropped"]["duplicate_label"] == 3
    assert unit["dropped"]["conflicting_label"] == 2 and unit["out"] == n - 1
    doc = json.loads((out / "threshold.json").read_text())
    assert doc["labelled"] == n - 1


@pytest.mark.parametrize("layout", ["empty", "meta_only", "no_weights"])
def test_cds_model_that_is_not_a_cds_folder_is_one_line(tmp_path, capsys, caplog, layout):
    from pipelines.filter_pairs import run as filter_pairs

    model = tmp_path / "model"
    model.mkdir()
    if layout != "empty":
        (model / "cds.json").write_text(
            json.dumps({"format": 1, "directions": ["fwd"], "max_length": 64})
        )
        (model / "tokenizer_config.json").write_text("{}")
    if layout == "no_weights":
        for half in ("noisy", "clean"):
            (model / "fwd" / half).mkdir(parents=True)
            (model / "fwd" / half / "config.json").write_text("{}")
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("ein Satz\ta sentence\n")
    rc = filter_pairs(
        [
            "--input",
            str(pairs),
            "--output",
            str(tmp_path / "out"),
            "--cds-model",
            str(model),
            "--runner",
            "DirectRunner",
        ]
    )
    assert rc == 2
    line = _err_line(capsys, caplog)
    assert "--cds-model" in line and str(model) in line and "not a CDS model folder" in line, line
    assert not (tmp_path / "out").exists()
