"""``mining mine-many`` resumes by language pair: killed with
``LABSE_KILL_AFTER=mine:1`` right after its first pair, the same command keeps that pair
(``resumed_shards`` 1 in stats.json), mines the rest, and writes what an uninterrupted run
writes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from labse_common.stats import check_balanced
from tests.mining.test_cli import unit, write_side
from tests.support.paths import REPO

PAIRS = ["de-en", "fr-en", "es-en"]


def _mine(d: Path, out: Path, kill: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("LABSE_KILL_AFTER", None)
    if kill:
        env["LABSE_KILL_AFTER"] = kill
    cmd = [sys.executable, "-m", "mining", "mine-many", "--pairs", *PAIRS]
    cmd += ["--corpus", str(d / "{lang}.txt"), "--emb", str(d / "{lang}.npy")]
    cmd += ["--output", str(out), "--set", "progress=false"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO, env=env)


def _rows(out: Path) -> dict[str, list]:
    return {p: pq.read_table(out / p / "mined.parquet").to_pylist() for p in PAIRS}


@pytest.mark.slow  # three mine-many processes, one killed: ~5 s
def test_a_killed_mine_many_keeps_its_finished_pairs(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    base = rng.standard_normal((40, 16))
    for lang in ("de", "fr", "es", "en"):
        vec = unit(base + 0.2 * rng.standard_normal((40, 16)))
        write_side(tmp_path, lang, [f"{lang} sentence {i}" for i in range(40)], vec)
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    assert _mine(tmp_path, whole).returncode == 0
    r = _mine(tmp_path, killed, kill="mine:1")
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert (
        not (killed / "de-en").exists() and (killed / "_partial" / "_done" / "de-en.json").exists()
    )
    r = _mine(tmp_path, killed)
    assert r.returncode == 0, r.stderr
    stats = json.loads((killed / "stats.json").read_text())
    assert stats["resumed_shards"] == 1 and stats["shards"] == 3 and check_balanced(stats) == []
    whole_stats = json.loads((whole / "stats.json").read_text())
    assert whole_stats["resumed_shards"] == 0
    # The pairs' counts summed, the same whether a pair was resumed or mined again.
    assert stats["counts"] == whole_stats["counts"] and "candidates" in stats["counts"]
    assert _rows(killed) == _rows(whole)
    assert sorted(os.listdir(killed)) == sorted(os.listdir(whole))
