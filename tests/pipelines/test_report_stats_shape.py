"""A stats.json unit without ``dropped`` is one line naming the file and the unit
(exit 2), not a KeyError traceback from the report's tables."""

from __future__ import annotations

import json

import pytest

from pipelines.report import main as report_main
from pipelines.run.corpus_stages import SENTENCES
from pipelines.run.declare import manifest_path


def _run_folder(tmp_path, unit: dict):
    run = tmp_path / "run"
    stage = SENTENCES.name
    (run / stage).mkdir(parents=True)
    (run / "_run.json").write_text(
        json.dumps({"plan": [{"stage": stage, "action": "run", "reason": ""}], "ran": [stage]})
    )
    manifest = manifest_path(run, stage)
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"seconds": 1.0, "peak_rss_mb": 10.0}))
    stats = run / stage / "stats.json"
    stats.write_text(json.dumps({"stage": stage, "counts": {"sentences": unit}}))
    return run, stats


@pytest.mark.parametrize(
    "unit",
    [{"in": 3, "out": 3}, {"in": 3, "out": 1, "dropped": 2}, {"in": "3", "out": 3, "dropped": {}}],
)
def test_unit_without_dropped_is_one_line(tmp_path, capsys, caplog, unit):
    run, stats = _run_folder(tmp_path, unit)
    rc = report_main(["--run", str(run), "--output", str(tmp_path / "report")])
    assert rc == 2
    assert "Traceback" not in capsys.readouterr().err
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and str(stats) in errors[0] and "'sentences'" in errors[0], errors


def test_a_well_formed_unit_still_reports(tmp_path, capsys):
    run, _ = _run_folder(tmp_path, {"in": 3, "out": 1, "dropped": {"empty": 2}})
    assert report_main(["--run", str(run), "--output", str(tmp_path / "report")]) == 0, (
        capsys.readouterr().err
    )
    assert "empty 2" in (tmp_path / "report" / "report.md").read_text()
