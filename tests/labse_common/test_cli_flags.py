"""The common flags have one spelling: the removed legacy forms are usage errors (exit 2) that
name what was given, not silently accepted aliases.

Removed: ``--preset`` (now ``--config``), ``--out`` and ``--output-dir`` (now ``--output``), and
the positional ``KEY=VALUE`` overrides of the filters commands (now ``--set KEY=VALUE``)."""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from pathlib import Path

import pytest

from filters.__main__ import main as filters_main
from labse_common.cli import add_config_options, add_output_option, add_overwrite_option
from mining.__main__ import main as mining_main
from tests.support.source_ast import parse_file


def _mine_argv(tmp_path: Path, *extra: str) -> list[str]:
    return ["mine", "--src-text", str(tmp_path / "s"), "--trg-text", str(tmp_path / "t"), *extra]


@pytest.mark.parametrize(
    ("legacy", "named"),
    [
        (["--preset", "demo"], "--preset"),
        (["--out", "elsewhere"], "--out"),
        (["--output-dir", "elsewhere"], "--output-dir"),
    ],
)
def test_a_removed_flag_is_a_usage_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], legacy: list[str], named: str
) -> None:
    argv = _mine_argv(tmp_path, "--output", str(tmp_path / "o"), *legacy)
    with pytest.raises(SystemExit) as e:
        mining_main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"unrecognized arguments: {named}" in err
    assert not (tmp_path / "o").exists()  # refused before any work


@pytest.mark.slow
def test_a_positional_override_of_a_filters_command_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pairs = tmp_path / "p.tsv"
    pairs.write_text("Hallo Welt\tHello world\n", encoding="utf-8")
    argv = ["rules", "--pairs", str(pairs), "--output", str(tmp_path / "o"), "max_ratio=2.5"]
    with pytest.raises(SystemExit) as e:
        filters_main(argv)
    assert e.value.code == 2
    assert "unrecognized arguments: max_ratio=2.5" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_the_documented_override_still_works(tmp_path: Path) -> None:
    pairs = tmp_path / "p.tsv"
    pairs.write_text("Hallo Welt\tHello world\n", encoding="utf-8")
    out = tmp_path / "o"
    argv = ["rules", "--pairs", str(pairs), "--output", str(out), "--set", "max_ratio=2.5"]
    argv += ["--src-lang", "de", "--trg-lang", "en"]
    assert filters_main(argv) == 0
    assert (out / "stats.json").is_file()


def test_prefixes_of_the_common_flags_are_not_accepted(capsys: pytest.CaptureFixture[str]):
    # argparse takes any unambiguous prefix by default: --out would still mean --output.
    p = argparse.ArgumentParser(prog="x")
    add_output_option(p, "where")
    add_overwrite_option(p)
    add_config_options(p, "corpus")
    assert p.parse_args(["--output", "o", "--config", "paper"]).config == "paper"
    for prefix in (["--outp", "o"], ["--output", "o", "--conf", "paper"]):
        with pytest.raises(SystemExit) as e:
            p.parse_args(prefix)
        assert e.value.code == 2
    assert "unrecognized arguments: --conf" in capsys.readouterr().err


def test_the_exit_status_of_the_process_is_2(tmp_path: Path) -> None:
    # The in-process tests see SystemExit; this is what a shell sees.
    proc = subprocess.run(
        [sys.executable, "-m", "mining", "mine", "--src-text", "s", "--trg-text", "t"]
        + ["--output", "o", "--out", "o2"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "unrecognized arguments: --out o2" in proc.stderr


def test_an_unknown_filters_command_is_one_line_and_exit_2(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert filters_main(["nope"]) == 2
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1
    assert errors[0].startswith("unknown command 'nope'; the commands: ")
    assert "rules" in errors[0]


#: Being split into a package by another change; it keeps its own SIGINT set-up for now.
_NOT_YET: tuple[str, ...] = ()


@pytest.mark.slow
def test_every_command_exits_through_exit_with() -> None:
    """One way a command exits: ``if __name__ == "__main__": exit_with(main)``, where ``main``
    returns run_main's status; no ``sys.exit``/``raise SystemExit`` of its own anywhere."""
    root = Path(__file__).resolve().parents[2]
    wrong = []
    for package in ("labse_common", "filters", "mining", "labse_model", "pipelines"):
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel.startswith(_NOT_YET) or rel == "labse_common/command.py":
                continue
            tree = parse_file(path)
            for node in ast.walk(tree):
                if isinstance(node, ast.Raise) and "SystemExit" in ast.unparse(node):
                    wrong.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
                if isinstance(node, ast.Call) and ast.unparse(node.func) == "sys.exit":
                    wrong.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
                if isinstance(node, ast.If) and ast.unparse(node.test) == "__name__ == '__main__'":
                    body = [ast.unparse(s) for s in node.body]
                    if not body or not body[-1].startswith("exit_with("):
                        wrong.append(f"{rel}:{node.lineno}: __main__ block ends in {body[-1:]}")
    assert wrong == []
