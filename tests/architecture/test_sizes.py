"""The size rule for the five packages: no function over 80 lines, no module over 600.

A function that must be longer is listed in ``LONGER`` with the reason; none is today. Nested
functions count on their own and inside their parent (a parent of 80 lines holds them all).
A module that must be longer is listed in ``LONGER_MODULES`` with the reason, and says the same
reason in its docstring (a reader of the module learns why without this file); none is today.
The rule is for the packages only: bench/ and tests/ are tools, not the pipeline."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.source_ast import parse_file

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("labse_common", "labse_model", "mining", "filters", "pipelines")
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 600
LONGER: dict[str, str] = {}  # "path:function" -> why it stays longer
LONGER_MODULES: dict[str, str] = {}  # "package/module.py" -> why it stays over 600 lines


def _modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py"))


def test_the_scan_sees_the_packages():
    assert len(_modules()) > 100  # a wrong root would make both checks pass on nothing


def _lines(p: Path) -> int:
    return len(p.read_text(encoding="utf-8").splitlines())


def test_no_module_over_600_lines_unless_stated():
    big = {
        key: n
        for p in _modules()
        if (n := _lines(p)) > MAX_MODULE_LINES
        and (key := p.relative_to(REPO).as_posix()) not in LONGER_MODULES
    }
    assert not big, (
        f"modules over {MAX_MODULE_LINES} lines (split them by concern, or say why in "
        f"LONGER_MODULES and at the top of the module): {big}"
    )


def _words(text: str) -> str:
    return " ".join(text.split())


def test_a_longer_module_says_why_at_its_top():
    for key, reason in LONGER_MODULES.items():
        path = REPO / key
        assert path.is_file(), f"LONGER_MODULES names {key}, which is not there"
        assert _lines(path) > MAX_MODULE_LINES, f"{key} is not over {MAX_MODULE_LINES} lines"
        doc = ast.get_docstring(parse_file(path)) or ""
        assert _words(reason) in _words(doc), f"{key}: its docstring does not say {reason!r}"


def test_the_rule_is_for_the_packages_not_bench_or_tests():
    tops = {p.relative_to(REPO).parts[0] for p in _modules()}
    assert tops == set(PACKAGES), tops


def test_no_function_over_80_lines_unless_stated():
    long = {}
    for p in _modules():
        for node in ast.walk(parse_file(p)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                key = f"{p.relative_to(REPO)}:{node.name}"
                if lines > MAX_FUNCTION_LINES and key not in LONGER:
                    long[key] = lines
    assert not long, (
        f"functions over {MAX_FUNCTION_LINES} lines (split, or say why in LONGER): {long}"
    )
