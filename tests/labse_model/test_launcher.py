"""The torchrun launcher: two gloo workers, one killed with SIGKILL, the job resumes and ends."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labse_model import checkpoint as ckpt
from tests.support.paths import REPO
from tests.support.scaleout_util import kill_group
from tests.support.two_node_util import fork_labse_model, run_labse_model

pytestmark = pytest.mark.slow  # torchrun launches, a kill -9 of a worker

DATA = REPO.parent / "shared" / "data" / "tatoeba"


def _children(pid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        # Field 4 (after the parenthesised command name) is the parent pid.
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(d))
    return out


def _cmd(*extra: str) -> list[str]:
    return [sys.executable, "-m", "labse_model", *extra]


def test_help_and_bad_arguments(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run(_cmd("train", "--help"), capture_output=True, text=True, env=env, cwd=REPO)
    assert r.returncode == 0 and "--nproc-per-node" in r.stdout and "--rdzv-endpoint" in r.stdout
    # The usage errors forked from this process as `python -m` runs them (the real interpreter
    # is the --help case above).
    rc, err = run_labse_model(
        ["train", "--pairs", str(tmp_path / "missing.tsv"), "--output", str(tmp_path / "o")],
        tmp_path / "missing",
    )
    assert rc != 0 and "pair file not found" in err
    (tmp_path / "p.tsv").write_text("a\tb\n", encoding="utf-8")
    rc, err = run_labse_model(
        [
            "train",
            "--pairs",
            str(tmp_path / "p.tsv"),
            "--output",
            str(tmp_path / "o"),
            "no_such_key=1",
        ],
        tmp_path / "bad-key",
    )
    assert rc != 0 and "no_such_key" in err


def test_kill_9_of_a_worker_leaves_a_resumable_checkpoint(tmp_path):
    if not DATA.is_dir():
        pytest.skip(f"Tatoeba data not found under {DATA}")
    pairs = tmp_path / "deu.tsv"
    src = (DATA / "train.deu-eng.deu").read_text(encoding="utf-8").splitlines()
    trg = (DATA / "train.deu-eng.eng").read_text(encoding="utf-8").splitlines()
    pairs.write_text("".join(f"{s}\t{t}\n" for s, t in zip(src, trg)), encoding="utf-8")
    out = tmp_path / "run"
    # A checkpoint every 4 steps: the kill comes after the first, 36 steps before the end (the
    # poll below reacts in 50 ms), and the resumed run is short.
    steps = 40
    cmd = _cmd(
        "train",
        "--pairs",
        str(pairs),
        "--output",
        str(out),
        "--nproc-per-node",
        "2",
        "--max-steps",
        str(steps),
        "batch_size=16",
        "save_every=4",
        "log_every=1",
        "threads=1",
        "progress=false",
        "vocab_size=2000",
        "model.hidden_size=32",
        "model.intermediate_size=64",
        "model.num_hidden_layers=1",
    )
    env = dict(os.environ, PYTHONPATH=str(REPO), LABSE_DIST_TIMEOUT_S="60")
    # The launcher is forked from this process, as `python -m` runs it (torch is imported here
    # already; test_help_and_bad_arguments starts the real interpreter), in a session of its
    # own, so every worker it leaves behind can be reaped by process group. Its workers are
    # torchrun's: interpreters of their own.
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    proc = fork_labse_model(cmd[3:], env, first_log)
    try:
        killed = None
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None:
            if ckpt.list_checkpoints(str(out / "checkpoints")):
                workers = _children(proc.pid)
                if workers:
                    killed = workers[-1]
                    os.kill(killed, signal.SIGKILL)
                    break
            time.sleep(0.05)
        assert killed is not None, "no checkpoint appeared before the run ended"
        proc.wait(timeout=120)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the launcher
        except ProcessLookupError:
            pass
        for pid in _children(proc.pid):  # and any surviving worker (a session of its own)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        proc.wait(timeout=30)
    log_text = first_log.read_text()
    # The job fails (no restarts asked for) and says so ...
    assert proc.returncode != 0, log_text[-3000:]
    # ... but leaves a complete checkpoint that verifies ...
    resume_from = ckpt.latest_valid(str(out / "checkpoints"))
    assert resume_from is not None
    # ... and the same command resumes from it and finishes.
    again = fork_labse_model(cmd[3:], env, second_log)
    try:
        rc = again.wait(timeout=180)
    finally:
        kill_group(again)
    text = second_log.read_text()
    assert rc == 0, text[-3000:]
    assert "resuming from" in text, text[-3000:]
    records = [json.loads(line) for line in open(out / "metrics.jsonl")]
    # The metrics continue from the checkpoint without duplicates up to the last step.
    assert [r["step"] for r in records] == list(range(1, steps + 1))
    assert (out / "model" / "model.safetensors").exists()
    assert not [p for p in os.listdir(out / "checkpoints") if p.startswith(".tmp")]
