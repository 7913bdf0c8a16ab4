"""Every entry point is built by the one parser builder (labse_common.cli.command_parser).

For every command a user can type (the console scripts, ``python -m filters <command>``,
``python -m mining <command>``, ``python -m labse_model <command>``, every module with a main
block, the runner), in-process:

* a shortened flag (a prefix of its longest ``--flag``) exits 2 with one line naming it;
* ``--help`` exits 0 and starts with the usage, then the summary (what the command does), with
  no source-code markup (Sphinx roles, double-backtick literals);

and, statically, no module of the five packages calls ``argparse.ArgumentParser(`` itself except
labse_common/cli.py, where the builder is.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("labse_common", "labse_model", "mining", "filters", "pipelines")
BUILDER = "labse_common/cli.py"
#: Modules with a main block that are not commands a user types, and why.
NOT_COMMANDS = {
    "labse_common.forked_main": "the entry of a forked child process, started by the code",
}
_MAIN_GUARD = re.compile(r"^if __name__ == [\"']__main__[\"']:", re.M)
_MARKUP = re.compile(r":(mod|func|class|meth|attr|data|exc|obj|ref|doc):`|``")
_FLAG = re.compile(r"(?<![\w-])--[a-z][\w-]*")
#: Appended after the shortened flag: a parser that took the prefix still stops (exit 2) on
#: this, instead of running the command.
_STOP = "--no-such-flag-anywhere"


# --- the entry points ------------------------------------------------------------------------


def _python_m_modules() -> list[str]:
    """Every module ``python -m`` runs as a command: packages with ``__main__.py`` and modules
    with a main block (a group's commands are listed by their group)."""
    found = set()
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if path.name == "__main__.py":
                found.add(".".join(parts[:-1]))
            elif _MAIN_GUARD.search(path.read_text(encoding="utf-8")):
                if parts[:2] == ["filters", "bitext"] and parts[-1].startswith("cli_"):
                    continue  # python -m filters <command>
                found.add(".".join(parts))
    return sorted(found - set(NOT_COMMANDS))


def _main_of(module: str) -> Callable:
    """The function the module's main block runs (``exit_with(main)``: ``main``)."""
    target = module + (".__main__" if (ROOT / module.replace(".", "/")).is_dir() else "")
    path = ROOT / (target.replace(".", "/") + ".py")
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", "") == "exit_with"
            and isinstance(node.args[0], ast.Name)
        ):
            return getattr(importlib.import_module(target), node.args[0].id)
    raise AssertionError(f"{target}: its main block does not end in exit_with(<function>)")


def _subcommands(module: str) -> list[str]:
    """The sub-commands of a program: its command group's, or its parser's sub-parsers."""
    target = module + (".__main__" if (ROOT / module.replace(".", "/")).is_dir() else "")
    try:
        mod = importlib.import_module(target)
    except ImportError:  # the program's own test below fails on it, naming it
        return []
    group = getattr(mod, "GROUP", None)
    if group is not None and hasattr(group, "commands"):
        return list(group.commands())
    for name in ("build_parser", "parser"):
        fn = getattr(mod, name, None)
        if not callable(fn):
            continue
        try:
            p = fn()
        except (TypeError, ImportError):  # needs arguments; or broken: its own test says so
            continue
        if isinstance(p, argparse.ArgumentParser):
            for a in p._actions:  # noqa: SLF001 - argparse has no public accessor
                if isinstance(a, argparse._SubParsersAction):  # noqa: SLF001
                    return list(a.choices)
    return []


def entry_points() -> list[tuple[str, str, tuple[str, ...]]]:
    """``(shown as, module, argv before the flags)`` for every command and sub-command."""
    out = []
    for module in _python_m_modules():
        out.append((f"python -m {module}", module, ()))
        out += [(f"python -m {module} {s}", module, (s,)) for s in _subcommands(module)]
    return out


ENTRY_POINTS = entry_points()
IDS = [shown for shown, _, _ in ENTRY_POINTS]


def _run(main: Callable, argv: list[str], capsys: pytest.CaptureFixture[str]):
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def _help(module: str, argv: tuple[str, ...], capsys) -> str:
    code, out, err = _run(_main_of(module), [*argv, "--help"], capsys)
    assert code in (0, None), f"--help exits {code}\n{err[-2000:]}"
    return out


# --- the tests -------------------------------------------------------------------------------


def test_the_entry_points_are_found():
    shown = set(IDS)
    for must in (
        "python -m filters rules",
        "python -m mining",
        "python -m labse_model",
        "python -m pipelines.run",
        "python -m pipelines.filter_pairs",
    ):
        assert must in shown, f"{must} not among the entry points found"
    assert any(s.startswith("python -m mining ") for s in shown), "mining's commands not found"
    assert any(s.startswith("python -m labse_model ") for s in shown), "labse_model's commands"


def test_every_console_script_is_an_entry_point_tested_here():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "scripts"
    ]
    modules = {module for _, module, _ in ENTRY_POINTS}
    for name, target in scripts.items():
        module, _, function = target.partition(":")
        assert callable(getattr(importlib.import_module(module), function, None)), name
        module = module.removesuffix(".__main__")
        assert module in modules, f"console script {name} -> {target}: not an entry point here"


@pytest.mark.parametrize(("shown", "module", "argv"), ENTRY_POINTS, ids=IDS)
def test_help_is_usage_then_summary_without_source_markup(shown, module, argv, capsys):
    out = _help(module, argv, capsys)
    assert out.startswith("usage:"), f"{shown} --help does not start with the usage:\n{out[:500]}"
    paragraphs = [p for p in out.split("\n\n") if p.strip()]
    assert len(paragraphs) > 1, f"{shown} --help: nothing after the usage"
    summary = paragraphs[1].strip()
    assert not summary.endswith(":") and not summary.startswith(("options:", "positional ")), (
        f"{shown} --help: no summary (what the command does) after the usage:\n{out[:800]}"
    )
    found = _MARKUP.search(out)
    assert found is None, f"{shown} --help shows source markup {found.group()!r}"


def _shortened(flags: set[str]) -> str | None:
    """A prefix of the longest flag that is no flag itself and starts no other flag."""
    longest = max(flags, key=len)
    for cut in range(len(longest) - 1, 3, -1):
        short = longest[:cut]
        if short not in flags and [f for f in flags if f.startswith(short)] == [longest]:
            return short
    return None


@pytest.mark.parametrize(("shown", "module", "argv"), ENTRY_POINTS, ids=IDS)
def test_a_shortened_flag_is_one_line_and_exit_2(shown, module, argv, capsys):
    text = _help(module, argv, capsys)
    # The flags listed under its options (not those of its description or examples).
    text = text.partition("\noptions:\n")[2].partition("\nexamples:\n")[0]
    flags = set(_FLAG.findall(text)) - {"--help"}
    if not flags:
        pytest.skip(f"{shown} has no --flag of its own")  # a group: its commands have them
    short = _shortened(flags)
    assert short, f"{shown}: no prefix of its longest flag is unambiguous: {sorted(flags)}"
    code, _, err = _run(_main_of(module), [*argv, short, "x", _STOP], capsys)
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("WARNING:")]
    assert code == 2, f"{shown} {short}: exit {code}, not 2\n{err[-2000:]}"
    assert len(lines) == 1, f"{shown} {short}: {len(lines)} lines, not one:\n{err[-2000:]}"
    assert re.search(re.escape(short) + r"(?![\w-])", lines[0]), (
        f"{shown}: the error does not name the shortened flag {short}: {lines[0]}"
    )


def test_only_the_builder_calls_argument_parser():
    calls = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel == BUILDER:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.Call):
                    continue
                f = node.func
                name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
                if name == "ArgumentParser":
                    calls.append(f"{rel}:{node.lineno}")
    assert not calls, (
        "parsers built without labse_common.cli.command_parser (shortened flags, one help "
        f"style): {calls}"
    )
