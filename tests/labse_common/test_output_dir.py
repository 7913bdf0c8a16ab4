"""Outputs are exclusive and committed at the end (labse_common/output_dir.py).

Two writers into one folder: the second gets a clear error and exit status 2, and the folder
holds exactly the first job's files, matching its stats.json. ``--overwrite`` leaves nothing of
the previous run (old shards, empty language folders, temporary folders of killed jobs).
"""

from __future__ import annotations

import glob
import json
import logging
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from labse_common.output_dir import CLAIM, OutputBusy, OutputDir, OutputNotEmpty
from tests.support.paths import REPO as ROOT

SAMPLE = ROOT / "pipelines" / "sample_data" / "sample.warc.wet.gz"
BEAM = ["--direct_running_mode", "in_memory", "--direct_num_workers", "1"]


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _rows(out: Path) -> int:
    return sum(pq.read_metadata(f).num_rows for f in glob.glob(str(out / "[!_]*" / "*.parquet")))


def _stats(out: Path) -> dict:
    return json.loads((out / "stats.json").read_text())


def _claim_once(path: str, barrier, results) -> None:
    barrier.wait()
    try:
        OutputDir(path).claim()
        results.put("won")
    except OutputBusy:
        results.put("busy")
    except OutputNotEmpty:  # what the race made of the winner before the fix: a clear failure
        results.put("not empty")


def test_claim_is_atomic_among_simultaneous_processes(tmp_path):
    ctx = multiprocessing.get_context("fork")
    n = 6
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [
        ctx.Process(target=_claim_once, args=(str(tmp_path / "o"), barrier, results))
        for _ in range(n)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    got = sorted(results.get(timeout=5) for _ in range(n))
    assert got == ["busy"] * (n - 1) + ["won"]


def test_another_writers_claim_in_the_making_is_not_content(tmp_path):
    """A writer that loses the race for the claim has ``_CLAIM.json.<its job>`` for a moment;
    the winner, checking that the folder is empty, must not count it (both stopped before)."""
    out = tmp_path / "o"
    out.mkdir()
    (out / f"{CLAIM}.20261124T201400-21004-403891").write_text("{}")
    with OutputDir(out).open() as o:
        (Path(o.tmp) / "f.txt").write_text("x")
    assert (out / "f.txt").read_text() == "x"
    with pytest.raises(OutputNotEmpty):  # real content still counts
        OutputDir(out).claim()


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_killed_jobs_claim_is_taken_over_a_live_one_is_not(tmp_path, caplog):
    out = tmp_path / "o"
    out.mkdir()
    host = socket.gethostname()
    # What a SIGKILLed job leaves: its claim (nobody holds its lock; its process is gone).
    (out / CLAIM).write_text(json.dumps({"job_id": "killed", "host": host, "pid": _dead_pid()}))
    with OutputDir(out).open() as o:
        assert json.loads((out / CLAIM).read_text())["job_id"] == o.job_id
        (Path(o.tmp) / "x.txt").write_text("x")
    assert sorted(os.listdir(out)) == ["x.txt"] and "taking over the claim" in caplog.text
    # A live job's claim stays busy: one held (locked) by this process, and an unlocked one
    # naming a live process of this host (a job of an older version, which took no lock).
    held = OutputDir(out, overwrite=True).claim()
    try:
        with pytest.raises(OutputBusy):
            OutputDir(out, overwrite=True).claim()
    finally:
        held.release()
    (out / CLAIM).write_text(json.dumps({"job_id": "alive", "host": host, "pid": os.getpid()}))
    with pytest.raises(OutputBusy):
        OutputDir(out, overwrite=True).claim()
    assert json.loads((out / CLAIM).read_text())["job_id"] == "alive"


def test_commit_abort_and_overwrite_leave_no_stale_files(tmp_path):
    out = tmp_path / "o"
    with OutputDir(out).open() as o:
        (Path(o.tmp) / "de").mkdir()
        (Path(o.tmp) / "de" / "part-0.parquet").write_text("x")
        (Path(o.tmp) / "stats.json").write_text("{}")
        assert (out / CLAIM).exists() and not (out / "stats.json").exists()  # not yet visible
    assert sorted(os.listdir(out)) == ["de", "stats.json"]
    with pytest.raises(OutputNotEmpty, match="--overwrite"):
        OutputDir(out).claim()
    assert not (out / CLAIM).exists()  # a refused job releases its claim
    # A failing job leaves the previous output as it was.
    with pytest.raises(RuntimeError), OutputDir(out, overwrite=True).open() as o:
        (Path(o.tmp) / "fr").mkdir()
        raise RuntimeError("job failed")
    assert sorted(os.listdir(out)) == ["de", "stats.json"]
    (out / "_tmp-killedjob").mkdir()  # left by a killed job
    with OutputDir(out, overwrite=True).open() as o:
        (Path(o.tmp) / "en").mkdir()
        (Path(o.tmp) / "en" / "part-0.parquet").write_text("y")
    assert sorted(os.listdir(out)) == ["en"]
    # Never created folder: an aborted job leaves no clutter.
    with pytest.raises(RuntimeError), OutputDir(tmp_path / "new").open():
        raise RuntimeError
    assert not (tmp_path / "new").exists()


@pytest.mark.slow
def test_two_corpus_jobs_into_one_folder(tmp_path, caplog):
    """Job A runs; while it holds the folder (paused mid-run), job B starts: exit 2, clear
    message; A then finishes and the folder holds exactly A's files, matching its stats."""
    from pipelines import commoncrawl

    out = tmp_path / "cc"
    argv = ["--input", str(SAMPLE), "--output", str(out), *BEAM]
    # A is a process of its own (it must be paused mid-run); B and the last job are the
    # command's main() in this process, another process than A's all the same: what is proved
    # is the claim between jobs, not the command line (tests/end_to_end has that).
    a = subprocess.Popen(
        [sys.executable, "-m", "pipelines.commoncrawl", *argv],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )

    def errors() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]

    try:
        deadline = time.monotonic() + 120
        while not (out / CLAIM).exists():
            assert a.poll() is None, a.stdout.read().decode()
            assert time.monotonic() < deadline, "job A never claimed its output"
            time.sleep(0.02)
        os.killpg(a.pid, signal.SIGSTOP)  # A holds the claim, mid-run, for as long as B needs
        try:
            caplog.clear()
            rc_b = commoncrawl.main([*argv, "--overwrite"])
        finally:
            os.killpg(a.pid, signal.SIGCONT)
        assert rc_b == 2 and len(errors()) == 1, errors()
        assert "being written by another job" in errors()[0] and "\n" not in errors()[0]
        assert a.wait(timeout=180) == 0, a.stdout.read().decode()
    finally:
        if a.poll() is None:
            os.killpg(a.pid, signal.SIGKILL)
            a.wait()
    stats = _stats(out)
    assert _rows(out) == stats["counts"]["sentences"]["out"] > 0
    assert not (out / CLAIM).exists() and not glob.glob(str(out / "_tmp-*"))
    # Without --overwrite a finished folder is refused too (exit 2, files untouched).
    before = sorted(p for p in glob.glob(str(out / "**"), recursive=True))
    caplog.clear()
    assert commoncrawl.main(argv) == 2
    assert len(errors()) == 1 and "not empty" in errors()[0], errors()
    assert sorted(glob.glob(str(out / "**"), recursive=True)) == before


def test_corpus_overwrite_leaves_no_stale_language_folders(tmp_path):
    from pipelines import commoncrawl

    out = tmp_path / "cc"
    assert (
        commoncrawl.main(["--input", str(SAMPLE), "--output", str(out), "--write-dropped", *BEAM])
        == 0
    )
    first = {p.name for p in out.iterdir() if p.is_dir()}
    assert "_dropped" in first and len(first) > 2
    keep = sorted(first - {"_dropped"})[0]
    (out / "_tmp-killedjob").mkdir()
    (out / keep / "part-99999-00000.parquet").write_bytes(b"old shard")
    assert (
        commoncrawl.main(
            ["--input", str(SAMPLE), "--output", str(out), "--langs", keep, "--overwrite", *BEAM]
        )
        == 0
    )
    assert sorted(os.listdir(out)) == sorted([keep, "stats.json"])
    assert not (out / keep / "part-99999-00000.parquet").exists()
    assert _rows(out) == _stats(out)["counts"]["sentences"]["out"]


def test_mining_mine_refuses_a_busy_or_full_output(tmp_path, caplog):
    """`mining mine` and the store writers use the same claim: a second writer exits 2."""
    from labse_common.embedding_store import StoreWriter
    from mining.__main__ import main as mining_main

    rng = np.random.default_rng(0)
    for side in ("s", "t"):
        w = StoreWriter(tmp_path / side, dim=8, dtype="float32", rows_per_shard=10)
        w.add(
            rng.normal(size=(12, 8)).astype(np.float32),
            [str(i) for i in range(12)],
            text=[f"{side}{i}" for i in range(12)],
        )
        w.close()
    argv = [
        "mine",
        "--src-text",
        str(tmp_path / "s"),
        "--trg-text",
        str(tmp_path / "t"),
        "--src-emb",
        str(tmp_path / "s"),
        "--trg-emb",
        str(tmp_path / "t"),
        "--output",
        str(tmp_path / "m"),
    ]
    held = OutputDir(tmp_path / "m").claim()  # another job is writing
    assert mining_main(argv) == 2
    assert "being written by another job" in caplog.text
    held.abort()
    assert mining_main(argv) == 0
    assert sorted(os.listdir(tmp_path / "m")) == sorted(
        ["mined.parquet", "mined.tsv.gz", "score_hist.png", "stats.json"]
    )
    assert mining_main(argv) == 2  # not empty
    (tmp_path / "m" / "stale.txt").write_text("old")
    assert mining_main([*argv, "--overwrite"]) == 0
    assert not (tmp_path / "m" / "stale.txt").exists()
