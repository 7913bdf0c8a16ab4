"""``python -m filters apply``: kept pairs with every column, Moses export, rejected, stats."""

from __future__ import annotations

import gzip
import json
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from filters.bitext.cli_apply import main as apply_main
from labse_common.stats import check_balanced


def _scored(tmp_path, langs=(("de", "en"),) * 6):
    n = len(langs)
    scores = [0.9, 0.5, 0.2, float("nan"), 0.49, -1.0][:n]
    table = pa.table(
        {
            "src": [f"Satz {i}" for i in range(n)],
            "trg": [f"sentence {i}" if i != 1 else "a line\nbreak" for i in range(n)],
            "src_lang": [a for a, _ in langs],
            "trg_lang": [b for _, b in langs],
            "margin": pa.array([1.2 + i / 10 for i in range(n)], pa.float32()),
            "src_id": [f"d{i}" for i in range(n)],
            "cds_score": pa.array(scores, pa.float32()),
        }
    )
    path = tmp_path / "scored.parquet"
    pq.write_table(table, path)
    return path


def _threshold(tmp_path, t=0.5, column="cds_score"):
    path = tmp_path / "threshold.json"
    path.write_text(json.dumps({"threshold": t, "score_column": column}))
    return path


def test_apply_outputs(tmp_path, capsys):
    scored, thr = _scored(tmp_path), _threshold(tmp_path)
    out = tmp_path / "out"
    rc = apply_main(
        ["--scored", str(scored), "--threshold", str(thr), "--output", str(out), "--write-rejected"]
    )
    assert rc == 0, capsys.readouterr().err
    kept = pq.read_table(out / "kept.parquet")
    assert kept.column_names == [
        "src",
        "trg",
        "src_lang",
        "trg_lang",
        "margin",
        "src_id",
        "cds_score",
    ]
    assert kept.column("src").to_pylist() == ["Satz 0", "Satz 1"]  # 0.9 and 0.5 (>= t)
    assert kept.column("trg").to_pylist()[1] == "a line\nbreak"  # Parquet keeps text as given
    with gzip.open(out / "kept.tsv.gz", "rt", encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f]
    assert [r[:2] for r in rows] == [["Satz 0", "sentence 0"], ["Satz 1", "a line break"]]
    assert len(rows[0]) == 7
    # Moses: line i of one file translates line i of the other; a line break cannot survive.
    assert (out / "corpus.de").read_text().splitlines() == ["Satz 0", "Satz 1"]
    assert (out / "corpus.en").read_text().splitlines() == ["sentence 0", "a line break"]
    rej = pq.read_table(out / "rejected.parquet")
    reasons = dict(zip(rej.column("src").to_pylist(), rej.column("reason").to_pylist()))
    assert reasons == {
        "Satz 2": "below_threshold",
        "Satz 3": "no_score",
        "Satz 4": "below_threshold",
        "Satz 5": "below_threshold",
    }
    stats = json.loads((out / "stats.json").read_text())
    assert stats["counts"]["pairs"]["in"] == 6 and stats["counts"]["pairs"]["out"] == 2
    assert stats["counts"]["pairs"]["dropped"] == {"below_threshold": 3, "no_score": 1}
    assert stats["counts"]["pairs"]["events"] == {"line_break_replaced": 1}
    assert not check_balanced(stats) and not check_balanced({"counts": stats["steps"]})
    assert stats["steps"]["scored"] == {"in": 6, "out": 5, "dropped": {"no_score": 1}}
    assert stats["steps"]["cds_threshold"]["out"] == 2
    lp = stats["summary"]["by_lang_pair"]["de-en"]
    assert lp["in"] == 6 and lp["out"] == 2 and lp["steps"]["cds_threshold"] == {"in": 5, "out": 2}
    assert sum(b["in"] for b in stats["summary"]["by_length"].values()) == 6
    assert "2 kept" in capsys.readouterr().out


def test_apply_several_language_pairs_and_rules_stats(tmp_path):
    langs = [("de", "en"), ("fr", "en"), ("de", "en"), ("fr", "en"), ("fr", "en"), ("fr", "en")]
    scored, thr = _scored(tmp_path, langs), _threshold(tmp_path, t=0.0)
    rules = tmp_path / "rules_stats.json"
    rules.write_text(
        json.dumps(
            {
                "stage": "pair_rules",
                "steps": {"length": {"in": 9, "out": 6, "dropped": {"too_long": 3}}},
                "summary": {"by_lang_pair": {}},
                "counts": {},
            }
        )
    )
    out = tmp_path / "out"
    assert (
        apply_main(
            [
                "--scored",
                str(scored),
                "--threshold",
                str(thr),
                "--output",
                str(out),
                "--rules-stats",
                str(rules),
            ]
        )
        == 0
    )
    assert (out / "de-en" / "corpus.de").read_text().splitlines() == ["Satz 0", "Satz 2"]
    assert (out / "fr-en" / "corpus.en").read_text().splitlines() == ["a line break", "sentence 4"]
    stats = json.loads((out / "stats.json").read_text())
    assert stats["previous"]["steps"]["length"]["out"] == 6
    assert set(stats["summary"]["by_lang_pair"]) == {"de-en", "fr-en"}
    assert not (out / "rejected.parquet").exists()


def test_apply_other_score_column_and_unknown_languages(tmp_path):
    table = pa.table(
        {
            "src": ["a", "b", "c"],
            "trg": ["x", "y", "z"],
            "cds_score": [0.0, 0.0, 0.0],
            "dual_xent": [0.9, 0.1, 0.5],
        }
    )
    pq.write_table(table, tmp_path / "s.parquet")
    thr = _threshold(tmp_path, t=0.5, column="dual_xent")
    out = tmp_path / "o"
    assert (
        apply_main(
            ["--scored", str(tmp_path / "s.parquet"), "--threshold", str(thr), "--output", str(out)]
        )
        == 0
    )
    assert (out / "corpus.src").read_text().splitlines() == ["a", "c"]
    assert (out / "corpus.trg").read_text().splitlines() == ["x", "z"]


@pytest.mark.parametrize(
    "problem",
    [
        "missing_scored",
        "bad_json",
        "nan_threshold",
        "no_column",
        "not_empty",
        "rules_stats_list",
        "text_scores",
        "threshold_list",
    ],
)
def test_apply_bad_input_is_exit_2(tmp_path, capsys, caplog, problem):
    scored, thr = _scored(tmp_path), _threshold(tmp_path)
    out = tmp_path / "out"
    extra = []
    named = {
        "missing_scored": scored,
        "bad_json": thr,
        "nan_threshold": thr,
        "no_column": scored,
        "rules_stats_list": tmp_path / "rules.json",
        "text_scores": scored,
        "threshold_list": thr,
    }.get(problem)
    if problem == "missing_scored":
        scored = named = tmp_path / "nope.parquet"
    elif problem == "bad_json":
        thr.write_text("{not json")
    elif problem == "nan_threshold":
        thr.write_text(json.dumps({"threshold": math.nan}))
    elif problem == "no_column":
        thr = _threshold(tmp_path, column="dual_xent")
    elif problem == "not_empty":
        out.mkdir()
        (out / "something").write_text("x")
    elif problem == "rules_stats_list":
        named.write_text("[]")
        extra = ["--rules-stats", str(named)]
    elif problem == "threshold_list":
        thr.write_text("[0.5]")
    elif problem == "text_scores":
        # Numbers stored as text: refused with the column named, as calibrate refuses it.
        t = pq.read_table(scored)
        i = t.column_names.index("cds_score")
        pq.write_table(
            t.set_column(i, "cds_score", pa.array(["0.9", "0.5", "0.2", "nan", "0.49", "-1"])),
            scored,
        )
    rc = apply_main(
        ["--scored", str(scored), "--threshold", str(thr), "--output", str(out), *extra]
    )
    assert rc == 2
    err = capsys.readouterr().err + caplog.text
    lines = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(lines) == 1 and "\n" not in lines[0] and "Traceback" not in err
    if named is not None:
        assert str(named) in lines[0]
    if problem == "text_scores":
        assert "'cds_score'" in lines[0] and "numeric" in lines[0]
    if problem == "not_empty":
        assert (out / "something").exists() and sorted(p.name for p in out.iterdir()) == [
            "something"
        ]
    else:
        assert not out.exists()
