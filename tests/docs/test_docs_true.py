"""The docs cannot drift from the code: every command, flag, config key, link and path they name.

Read as a newcomer reads them (README.md, docs/*.md, bench/README.md), every

* ``python -m MODULE [SUBCOMMAND] --flag ...`` names a runnable module, one of its subcommands
  and flags its parser accepts (the parser is taken from the module itself: its ``main`` is run
  with ``parse_args`` intercepted, so no list is kept here to go stale);
* ``section.key`` in backticks or after ``--set`` is a key of the configuration reference (or a
  prefix of nested keys);
* relative link points at a file that exists, and a ``#anchor`` at one of its headings;
* repository path in backticks (``labse_common/config.py``, ``configs/*.yaml``) exists.

The examples that show a command's output (the configuration reference, a dry-run plan, a
``--help``) are generated from the code: tests/docs/test_generated.py.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import io
import re
import runpy
import shlex
import sys
import warnings
from functools import cache
from pathlib import Path

import pytest

from labse_common.config import reference

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", *(ROOT / "bench").glob("*.md"), *(ROOT / "docs").glob("*.md")])
PACKAGES = ("pipelines", "labse_model", "mining", "filters", "labse_common")
TOP = (
    "labse_common",
    "labse_model",
    "mining",
    "filters",
    "pipelines",
    "configs",
    "docs",
    "bench",
    "tests",
    "docker",
    ".ci",
)


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


# --- commands ----------------------------------------------------------------------------------

_COMMAND = re.compile(
    r"python3? -m ((?:{})[\w.]*)((?:[ \t]+[^\s`|;&)#]+)*)".format("|".join(PACKAGES))
)


def _joined_lines(text: str) -> list[str]:
    """Lines with shell continuations (a trailing backslash) joined, and the ends of HTML
    comments (a generated block's marker: ``<!-- generated: python -m ... -->``) dropped."""
    return text.replace("\\\n", " ").replace("-->", " ").splitlines()


def doc_commands() -> list[tuple[str, str]]:
    """``(doc, command line)`` for every ``python -m <our package>`` the docs show."""
    found = []
    for doc in DOCS:
        for line in _joined_lines(doc.read_text(encoding="utf-8")):
            for m in _COMMAND.finditer(line):
                found.append((rel(doc), (m.group(1) + m.group(2)).strip()))
    return sorted(set(found))


class _Parsed(Exception):
    def __init__(self, parser: argparse.ArgumentParser, known: bool) -> None:
        self.parser, self.known = parser, known


@cache
def beam_flags() -> set[str]:
    """Every pipeline option Beam accepts (a Beam job passes the flags it does not know on)."""
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.dask import dask_runner  # noqa: F401  (registers DaskOptions)

    parser = argparse.ArgumentParser(add_help=False)
    todo = list(PipelineOptions.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        with contextlib.suppress(argparse.ArgumentError):
            cls._add_argparse_args(parser)
    return _flags(parser)


@cache
def parser_of(module: str, *sub: str) -> tuple[argparse.ArgumentParser | None, bool]:
    """The argparse parser ``python -m module sub...`` parses its arguments with (None when the
    module has no parser of its own: it is then checked by import only), and whether it passes
    unknown flags on (``parse_known_args``: a Beam job's pipeline options)."""

    def intercept(self, *a, **k):
        raise _Parsed(self, False)

    def intercept_known(self, *a, **k):
        raise _Parsed(self, True)

    saved = (argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args, sys.argv)
    argparse.ArgumentParser.parse_args = intercept  # type: ignore[method-assign]
    argparse.ArgumentParser.parse_known_args = intercept_known  # type: ignore[method-assign]
    sys.argv = [module, *sub, "--help"]
    try:
        with (
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
            warnings.catch_warnings(),
        ):
            warnings.simplefilter("ignore", RuntimeWarning)  # runpy: "found in sys.modules"
            runpy.run_module(module, run_name="__main__", alter_sys=False)
    except _Parsed as p:
        return p.parser, p.known
    except SystemExit:
        return None, False
    finally:
        argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args, sys.argv = (
            saved
        )
    return None, False


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings}


def check_command(line: str) -> list[str]:
    """What is wrong with one documented command line (empty: nothing)."""
    words = shlex.split(line, comments=True) if line.count('"') % 2 == 0 else line.split()
    module, args = words[0], words[1:]
    from importlib.util import find_spec

    if find_spec(module) is None:
        return [f"no module {module}"]
    sub: list[str] = []
    if module == "filters" and args and not args[0].startswith("-"):
        from filters.__main__ import commands

        if args[0] not in commands():
            return [f"no command {args[0]!r} in python -m filters (has {sorted(commands())})"]
        sub, args = [args[0]], args[1:]
    parser, passes_on = parser_of(module, *sub)
    if parser is None:
        return []
    while (subs := _subparsers(parser)) and args and not args[0].startswith("-"):
        if args[0] not in subs:
            if "{" in args[0] or args[0] in ("...", "…"):  # "{pretrain,train,encode}": a list
                names = args[0].strip("{}").split(",")
                return [f"no subcommand {n!r} in {module}" for n in names if n not in subs]
            return [f"no subcommand {args[0]!r} in {module} (has {sorted(subs)})"]
        parser, args = subs[args[0]], args[1:]
    known = _flags(parser) | (beam_flags() if passes_on else set())
    wrong = []
    for word in args:
        if word.startswith("--") and len(word) > 2:
            flag = word.split("=", 1)[0]
            if flag not in known:
                wrong.append(f"{module} {' '.join(sub)}: no flag {flag}")
    return wrong


def test_the_docs_show_commands():
    modules = {line.split()[0] for _, line in doc_commands()}
    assert {"pipelines.run", "filters", "labse_model", "mining"} <= modules, modules


@pytest.mark.parametrize("doc,line", doc_commands(), ids=lambda v: v[:70])
def test_every_documented_command_and_flag_exists(doc: str, line: str):
    wrong = check_command(line)
    assert not wrong, f"{doc}: `python -m {line}`: " + "; ".join(wrong)


# --- config keys -------------------------------------------------------------------------------


@cache
def reference_keys() -> tuple[set[str], set[str]]:
    """``(sections, section.key for every key)`` of the configuration reference."""
    sections, keys, section = set(), set(), None
    for line in reference().splitlines():
        if m := re.match(r"## `(\w+)`", line):
            section = m.group(1)
            sections.add(section)
        elif section and (m := re.match(r"\| ([\w.]+) \|", line)) and m.group(1) != "key":
            keys.add(f"{section}.{m.group(1)}")
    return sections, keys


_KEY = re.compile(r"(?:`|--set[ =]|\bset )([a-z_]+(?:\.[a-z_0-9]+)+)(?![-\w./])")
# Dotted names in backticks that are not config keys: files.
_NOT_A_KEY = re.compile(
    r"\.(py|md|yaml|json|jsonl|tsv|gz|txt|parquet|npy|ftz|bin|log|xml|bz2|safetensors)\b"
)


def is_module(dotted: str) -> bool:
    """``mining.bounded`` (a module of the package named like the section), not a key."""
    from importlib.util import find_spec

    parts = dotted.split(".")
    if parts[0] not in PACKAGES:
        return False
    try:
        return find_spec(".".join(parts[:2])) is not None
    except ImportError:
        return False


def doc_keys() -> list[tuple[str, str]]:
    sections, _ = reference_keys()
    found = []
    for doc in DOCS:
        if doc.name == "config-reference.md":
            continue
        for m in _KEY.finditer(doc.read_text(encoding="utf-8")):
            key = m.group(1)
            if key.split(".")[0] in sections and not _NOT_A_KEY.search(key) and not is_module(key):
                found.append((rel(doc), key))
    return sorted(set(found))


def test_the_docs_name_config_keys():
    assert len(doc_keys()) > 20


@pytest.mark.parametrize("doc,key", doc_keys())
def test_every_documented_config_key_exists(doc: str, key: str):
    _, keys = reference_keys()
    assert key in keys or any(k.startswith(key + ".") for k in keys), (
        f"{doc} names `{key}`, which is not a key of docs/config-reference.md"
    )


# --- links and paths ---------------------------------------------------------------------------


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@cache
def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, flags=re.M)}


_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def test_every_relative_link_and_anchor_resolves():
    wrong = []
    for doc in DOCS:
        for target in _LINK.findall(doc.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (doc.parent / path).resolve() if path else doc
            if not file.exists():
                wrong.append(f"{rel(doc)}: link to missing {target}")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file):
                wrong.append(f"{rel(doc)}: no heading for #{anchor} in {rel(file)}")
    assert not wrong, "\n".join(wrong)


_PATH = re.compile(r"`((?:{})/[\w./*-]*)`".format("|".join(re.escape(t) for t in TOP)))


def test_every_repository_path_in_backticks_exists():
    wrong = []
    for doc in DOCS:
        for path in _PATH.findall(doc.read_text(encoding="utf-8")):
            if path.endswith("/") and (ROOT / path).is_dir():
                continue
            if not glob.glob(str(ROOT / path)):
                wrong.append(f"{rel(doc)}: `{path}` does not exist")
    assert not wrong, "\n".join(wrong)


# --- figures -----------------------------------------------------------------------------------

_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w])")


def _numbers(text: str) -> set[str]:
    text = re.sub(r"`[^`]*`", " ", text)  # commands and paths
    text = re.sub(r"\d{4}-\d{2}-\d{2}", " ", text)  # dates
    text = re.sub(r"\]\([^)]*\)", "]", text)  # link targets
    return set(_NUMBER.findall(text))


def test_the_readme_quotes_only_recorded_figures():
    """Every number of the README's figures paragraph is in bench/README.md's headline table,
    so the two cannot disagree (they did: 644 vs 645 mined pairs, 0.944 vs 0.800)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- figures:.*?-->(.*?)<!-- end figures -->", readme, flags=re.S)
    assert m, "README.md has no <!-- figures: ... --> paragraph"
    bench = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    h = re.search(r"^## Headline figures\n(.*?)^## ", bench, flags=re.S | re.M)
    assert h, "bench/README.md has no '## Headline figures' section"
    quoted, recorded = _numbers(m.group(1)), _numbers(h.group(1))
    assert len(quoted) >= 10
    assert quoted <= recorded, (
        f"README figures not in bench/README.md#headline-figures: {sorted(quoted - recorded)}"
    )


_PY_PATH = re.compile(r"\btests/[\w/]+\.py\b")


def test_code_and_pyproject_cite_files_that_exist():
    """Comments and docstrings that send a reader to a test file or a design document."""
    wrong = []
    sources = [ROOT / "pyproject.toml", ROOT / "Makefile"]
    for package in PACKAGES:
        sources += sorted((ROOT / package).rglob("*.py"))
    for src in sources:
        text = src.read_text(encoding="utf-8")
        for path in set(_PY_PATH.findall(text)):
            if not (ROOT / path).exists():
                wrong.append(f"{rel(src)}: cites {path}, which does not exist")
        if re.search(r"(?<![/\w])DESIGN\.md", text):
            wrong.append(
                f"{rel(src)}: cites DESIGN.md, which is not in the repository (docs/design.md is)"
            )
    assert not wrong, "\n".join(wrong)
