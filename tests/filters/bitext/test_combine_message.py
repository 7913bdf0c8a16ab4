"""``filters combine``'s closing line says which threshold it applied and how it was chosen
(it said "threshold none" after applying the best reachable one)."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from filters.bitext import cli_combine
from filters.bitext.drill import planted_candidates
from filters.bitext.sample import auto_label, draw_sample, write_for_labelling


@pytest.fixture(scope="module")
def labelled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Mined pairs and a labelled sample of them, as `filters sample` writes it."""
    d = tmp_path_factory.mktemp("combine")
    table, planted = planted_candidates(2000, 11)
    pq.write_table(table, d / "pairs.parquet")
    write_for_labelling(auto_label(draw_sample(table, 300, seed=1), planted), d / "sample.tsv")
    return d / "pairs.parquet", d / "sample.tsv"


def _closing_line(caplog, labelled, out: Path, *flags: str) -> str:
    pairs, labels = labelled
    argv = ["--pairs", str(pairs), "--labels", str(labels), "--output", str(out)]
    caplog.clear()
    with caplog.at_level(logging.INFO):
        assert cli_combine.main([*argv, "--set", "bootstrap=30", *flags]) == 0
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("kept ")]
    assert len(lines) == 1, [r.getMessage() for r in caplog.records]
    return lines[0]


def _number(text: str) -> float:
    return float(re.search(r">= ([0-9.]+)", text).group(1))


@pytest.mark.slow  # two fits of the combined score: 2-4 s
def test_the_closing_line_names_the_threshold_applied_and_why(caplog, labelled, tmp_path):
    line = _closing_line(
        caplog,
        labelled,
        tmp_path / "best",
        "--target",
        "0.999",
        "--set",
        "min_kept=100",
        "--set",
        "on_unreachable=continue",
    )
    best = json.loads((tmp_path / "best" / "combined.json").read_text())["reachable"]
    assert "none" not in line and "best reachable" in line and "BELOW the target 100%" in line
    assert _number(line) == pytest.approx(best["threshold"], abs=5e-4), line
    line = _closing_line(caplog, labelled, tmp_path / "reached", "--set", "per_pair=false")
    cal = json.loads((tmp_path / "reached" / "combined.json").read_text())["calibration"]
    assert f"reach the target {cal['target']:.0%} GOOD" in line and "per_pair" not in line, line
    assert _number(line) == pytest.approx(cal["threshold"], abs=5e-4), line
