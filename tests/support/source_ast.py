"""``parse_file``: ``ast.parse`` of a source file for the tests that read the code itself.

CPython 3.11 keeps the AST validator's recursion depth in interpreter-wide state, so a parse
can fail with ``SystemError: AST constructor recursion depth mismatch`` while another thread of
the same process (a test's HTTP server left in a worker) runs Python code (CPython gh-106905).
The failure is transient and says nothing about the file: parse again.
"""

from __future__ import annotations

import ast
from pathlib import Path


def parse_file(path: Path, attempts: int = 5) -> ast.Module:
    source = path.read_text(encoding="utf-8")
    for attempt in range(attempts):
        try:
            return ast.parse(source, filename=str(path))
        except SystemError:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")
