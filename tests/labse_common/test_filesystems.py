"""The one rule for "is this path remote" and the one ``join`` (labse_common.filesystems)."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from labse_common import filesystems
from labse_common.filesystems import is_remote, join
from tests.support.source_ast import parse_file

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("path", "remote"),
    [
        ("/data/corpus/de.txt", False),
        ("data/corpus/de.txt", False),
        ("./de.txt", False),
        ("~/de.txt", False),
        ("file:///data/de.txt", False),  # Beam has no file:// filesystem: the OS serves it
        ("FILE:///data/de.txt", False),
        ("s3://bucket/key/de.txt", True),
        ("gs://bucket/de.txt", True),
        ("hdfs://namenode/de.txt", True),
        ("C:\\x", False),  # a Windows path
        ("C://x", False),  # a drive letter, not a scheme
        ("data/s3://not-a-scheme", False),  # a scheme only counts at the start
        ("", False),
    ],
)
def test_one_rule_for_remote_paths(path: str, remote: bool) -> None:
    assert is_remote(path) is remote


def test_is_remote_takes_path_likes_and_refuses_other_values() -> None:
    assert is_remote(Path("/data/x")) is False
    assert is_remote(None) is False
    assert is_remote(3) is False
    assert is_remote(["s3://b/k"]) is False  # a list is not a path (remote_paths looks into it)


def test_join_of_a_local_path_is_the_os_join_without_beam(tmp_path: Path) -> None:
    assert join(str(tmp_path), "a", "b.txt") == os.path.join(str(tmp_path), "a", "b.txt")
    assert join(tmp_path, "c") == os.path.join(str(tmp_path), "c")


def test_join_of_a_remote_path_uses_the_store_separator() -> None:
    pytest.importorskip("apache_beam.io.aws.s3filesystem")
    assert join("s3://bucket/run", "de", "x.npy") == "s3://bucket/run/de/x.npy"


def _defined_functions(path: Path) -> set[str]:
    tree = parse_file(path)
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}


@pytest.mark.slow
def test_no_module_keeps_its_own_copy_of_the_path_helpers() -> None:
    """One helper per job: a private remote-check, join or lazy _fs() elsewhere is a second
    rule that drifts from this one (one of them once took file:// for remote)."""
    copies = []
    for package in ("labse_common", "filters", "mining", "labse_model", "pipelines"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == Path(filesystems.__file__).resolve():
                continue
            names = _defined_functions(path)
            for name in ("is_remote", "_is_remote", "_remote", "_fs", "join"):
                if name in names:
                    copies.append(f"{path.relative_to(ROOT)}: {name}")
    assert copies == []


def _scheme_substring_tests(path: Path) -> list[int]:
    """Lines of ``path`` with a ``"://" in x`` / ``"://" not in x`` membership test."""
    return [
        node.lineno
        for node in ast.walk(parse_file(path))
        if isinstance(node, ast.Compare)
        and isinstance(node.left, ast.Constant)
        and node.left.value == "://"
        and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops)
    ]


def test_no_module_asks_for_a_scheme_by_substring() -> None:
    """``"://" in path`` took file:// (and a drive letter's C://) for an object store: every
    module of the five packages asks ``is_remote``. Not membership tests, so not caught here and
    allowed: pair_rules' ``_MARKUP_HINTS`` (a text heuristic) and the splits of a known-remote
    URL (remote.py, filesystems.py)."""
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for package in ("labse_common", "filters", "mining", "labse_model", "pipelines")
        for path in sorted((ROOT / package).rglob("*.py"))
        for line in _scheme_substring_tests(path)
    ]
    assert found == []


def test_the_substring_check_sees_both_spellings(tmp_path: Path) -> None:
    # The check above must be able to fail: both forms are found, a tuple of hints is not.
    sample = tmp_path / "sample.py"
    sample.write_text(
        'a = "://" in p\nb = "://" not in p\nHINTS = ("://", "www.")\nc = p.split("://", 1)\n',
        encoding="utf-8",
    )
    assert _scheme_substring_tests(sample) == [1, 2]
