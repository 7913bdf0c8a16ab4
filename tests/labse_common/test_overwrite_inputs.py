"""--overwrite never deletes a command's own input: an input inside the output folder
is refused in one line with exit status 2 before anything is read or written, for every command
that ends in run_main with its arguments."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from labse_common.cli import refuse_inputs_inside_output
from labse_common.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]


def cmd(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_rules_and_export_refuse_an_input_inside_the_output(tmp_path: Path):
    out = tmp_path / "X"
    (out / "de-en").mkdir(parents=True)
    pairs = out / "p.tsv"
    pairs.write_text("Ein kleiner Satz hier.\tA small sentence here.\n", encoding="utf-8")
    (out / "de-en" / "mined.parquet").write_bytes(b"kept as it was")
    for args in (
        ["filters", "rules", "--pairs", str(pairs)],
        ["filters", "export", "--mined", str(out)],
    ):
        p = cmd(*args, "--output", str(out), "--overwrite")
        assert (
            p.returncode == 2 and "inside --output" in p.stderr and "Traceback" not in p.stderr
        ), p.stderr
    assert (
        pairs.read_text(encoding="utf-8").startswith("Ein")
        and (out / "de-en" / "mined.parquet").is_file()
    )


def test_the_rule_itself(tmp_path: Path):
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    inside, beside = out / "sub" / "a.tsv", tmp_path / "b.tsv"
    inside.write_text("x")
    beside.write_text("x")
    ns = argparse.Namespace
    with pytest.raises(UsageError, match="--pairs .* is inside --output"):
        refuse_inputs_inside_output(
            ns(output=str(out), overwrite=True, pairs=[str(beside), str(inside)])
        )
    refuse_inputs_inside_output(
        ns(output=str(out), overwrite=False, pairs=[str(inside)])
    )  # refused later if not empty
    refuse_inputs_inside_output(ns(output=str(out), overwrite=True, pairs=[str(beside)]))
    refuse_inputs_inside_output(
        ns(output=str(tmp_path / "new"), overwrite=True, pairs=[str(inside)])
    )
