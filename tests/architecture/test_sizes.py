"""Issue 35's size rule for the five packages: no function over 80 lines, no module over 800.

A function that must be longer is listed in ``LONGER`` with the reason; none is today. Nested
functions count on their own and inside their parent (a parent of 80 lines holds them all)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.source_ast import parse_file

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("labse_common", "labse_model", "mining", "filters", "pipelines")
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 800
LONGER: dict[str, str] = {}  # "path:function" -> why it stays longer


def _modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py"))


def test_the_scan_sees_the_packages():
    assert len(_modules()) > 100  # a wrong root would make both checks pass on nothing


def test_no_module_over_800_lines():
    big = {
        str(p.relative_to(REPO)): n
        for p in _modules()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not big, f"modules over {MAX_MODULE_LINES} lines (split them): {big}"


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
