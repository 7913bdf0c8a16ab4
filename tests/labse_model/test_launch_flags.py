"""``labse_model pretrain|train`` check their launch flags as the ``launch:`` section is checked:
a bad --nnodes, a --node-rank beyond it or an endpoint that is not HOST:PORT
is one line naming the flag, exit 2, before any worker or rendezvous starts."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.paths import REPO as ROOT

BAD = [
    (["--nnodes", "0"], "--nnodes"),
    (["--nnodes", "two"], "--nnodes"),
    (["--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "head:29400"], "--node-rank"),
    (
        ["--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "head node:29400"],
        "--rdzv-endpoint",
    ),
    (["--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "head:99999"], "--rdzv-endpoint"),
    (["--nnodes", "2", "--node-rank", "0"], "--rdzv-endpoint"),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("command", "flags", "named"),
    [("train", *case) for case in BAD] + [("pretrain", *BAD[2])],
)
def test_a_bad_launch_flag_is_one_line_before_anything_starts(tmp_path, command, flags, named):
    pairs = tmp_path / "p.tsv"
    pairs.write_text("Hello there.\tHallo da.\n")
    data = ["--pairs", str(pairs)] if command == "train" else ["--sentences", str(tmp_path)]
    r = subprocess.run(
        [sys.executable, "-m", "labse_model", command, *data, "--output", str(tmp_path / "o")]
        + flags,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert named in lines[0], lines[0]
    assert not (tmp_path / "o").exists()
