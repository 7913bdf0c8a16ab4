"""Helpers for the corpus-pipeline tests: paths to shared data and reading job output."""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.support.paths import SHARED_DATA


def shared(rel: str) -> Path:
    path = SHARED_DATA / rel
    if not path.exists():
        pytest.skip(
            f"real sample {path} is absent (../shared/data not checked out beside the repo)"
        )
    return path


def read_rows(out: str | os.PathLike, sub: str = "[!_]*") -> list[dict]:
    rows: list[dict] = []
    for f in sorted(glob.glob(os.path.join(out, sub, "*.parquet"))):
        rows += pq.read_table(f).to_pylist()
    return rows


def read_stats(out: str | os.PathLike) -> dict:
    with open(os.path.join(out, "stats.json"), encoding="utf-8") as f:
        return json.load(f)


def assert_balanced(stats: dict) -> None:
    for unit, c in stats["counts"].items():
        assert c["in"] == c["out"] + sum(c["dropped"].values()), (unit, c)
