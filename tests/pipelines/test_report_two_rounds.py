"""The report's summary box shows combine's two-round estimate (the labels had a near-threshold
round: filters/bitext/round_estimate.py): the GOOD share at the threshold with its interval,
said to come from two rounds of labels."""

from __future__ import annotations

import json

import pytest

from tests.pipelines.test_report_first_screen import make_run, report

pytestmark = pytest.mark.slow  # one report: its figures take seconds


def test_the_summary_box_shows_the_two_round_estimate(tmp_path):
    run = make_run(tmp_path, reached=True, demo=True)
    combined = run / "combine" / "combined.json"
    doc = json.loads(combined.read_text())
    doc["two_round_estimate"] = {
        "ok": True,
        "share": 0.874,
        "interval": [0.831, 0.912],
        "width": 0.081,
        "confidence": 0.9,
        "threshold": 0.4321,
        "kept": 30,
        "labelled": 60,
        "labelled_kept": 25,
    }
    combined.write_text(json.dumps(doc))
    md, html = report(run, tmp_path / "out")
    box = md[md.index("> **Summary**") :].split("\n\n")[0]
    line = next(x for x in box.splitlines() if "Two-round estimate" in x)
    assert "two rounds of labels" in line and "60 pairs drawn near the threshold" in line
    assert "GOOD share 87.4% at threshold 0.4321" in line
    assert "90% interval [83.1%, 91.2%]" in line
    assert "Two-round estimate" in html[: html.index("<h2>Funnel")]
