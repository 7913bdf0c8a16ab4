"""One rule for config values, in files and in --set alike: base-10 integers, no
base-60 or octal numbers, booleans only true/false, duplicate keys and unknown sections refused
by every command's reader, not only the runner's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from labse_common.config import ConfigError, apply_overrides, load, read_preset

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "raw, value",
    [
        ("010", 10),
        ("0", 0),
        ("-3", -3),
        ("1_000", 1000),
        ("0.5", 0.5),
        (".5", 0.5),
        ("1e-5", 1e-5),
        ("1:30", "1:30"),
        ("no", "no"),
        ("off", "off"),
        ("true", True),
        ("False", False),
        ("[de-en, no-en]", ["de-en", "no-en"]),
        ("0o17", "0o17"),
        ("0x1F", "0x1F"),
    ],
)
def test_override_values_follow_one_rule(raw, value):
    assert apply_overrides({}, [f"a.b={raw}"])["a"]["b"] == value


def test_the_same_rule_in_a_file_and_typed_sections_refuse_what_it_leaves_as_text(tmp_path: Path):
    f = tmp_path / "c.yaml"
    f.write_text("mining:\n  k: 010\n  threshold: 1.5\n  pairs: [no-en]\n")
    cfg = load("mining", f)
    assert cfg.k == 10 and cfg.pairs == ["no-en"]
    with pytest.raises(ConfigError, match="mining.threshold"):
        load("mining", f, ["threshold=1:30"])


def test_a_key_given_twice_is_refused_with_both_lines(tmp_path: Path):
    f = tmp_path / "c.yaml"
    f.write_text("mining:\n  k: 4\n  margin: ratio\n  k: 8\n")
    with pytest.raises(ConfigError, match=r"'k' given twice \(lines 2 and 4\)"):
        read_preset(f)


def test_a_misspelt_section_is_refused_by_a_stage_command(tmp_path: Path):
    f = tmp_path / "c.yaml"
    f.write_text("minning:\n  k: 8\n")
    with pytest.raises(ConfigError, match="unknown config section.*minning"):
        load("mining", f)
    pairs = tmp_path / "p.tsv"
    pairs.write_text("Ein Satz hier.\tA sentence here.\n", encoding="utf-8")
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "filters",
            "rules",
            "--pairs",
            str(pairs),
            "--config",
            str(f),
            "--output",
            str(tmp_path / "out"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert p.returncode == 2 and "minning" in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_an_empty_demo_language_list_is_refused_naming_the_key():
    """``sources.demo.langs=[]`` planned a run with no planted pairs and an empty gold (exit 0);
    the error of a value inside an optional section names the key inside it."""
    from labse_common.config import ConfigError, load

    with pytest.raises(ConfigError, match=r"^sources\.demo: langs is empty"):
        load("sources", "demo", ["demo.langs=[]"])
    with pytest.raises(ConfigError, match=r"^sources\.demo\.heldout='x' is not an integer"):
        load("sources", "demo", ["demo.heldout=x"])
