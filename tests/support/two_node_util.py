"""Shared by the two-node tests: synthetic translation pairs, an S3-compatible server holding
them, and one `python -m labse_model <stage> --nnodes 2` launcher per node on loopback."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.support.paths import REPO as ROOT
from tests.support.scaleout_util import (
    env,
    kill_group,
    s3_args,
    s3_available,
    s3_client,
    s3_server,
)


def synthetic_pairs(n: int = 160) -> str:
    """Synthetic translation pairs: a fixed word mapping, so the task is learnable."""
    rng = np.random.default_rng(0)
    src_words = [f"wort{chr(97 + i % 26)}{i}" for i in range(60)]
    trg_words = [f"word{chr(122 - i % 26)}{i}" for i in range(60)]
    lines = []
    for _ in range(n):
        idx = rng.choice(60, size=int(rng.integers(3, 8)), replace=False)
        lines.append(
            " ".join(src_words[i] for i in idx) + "\t" + " ".join(trg_words[i] for i in idx) + "\n"
        )
    return "".join(lines)


def write_vocab(vocab: Path, vocab_size: int = 400) -> str:
    """One vocabulary for every run of a test: WordPiece learning breaks ties differently run
    to run."""
    if not (vocab / "tokenizer.json").exists():
        from labse_model.tiny import train_wordpiece

        texts = [t for line in synthetic_pairs().splitlines() for t in line.split("\t")]
        train_wordpiece(texts, str(vocab), vocab_size=vocab_size)
    return str(vocab)


@contextlib.contextmanager
def s3_objects(log_dir: Path, bucket: str, objects: dict[str, bytes]) -> Iterator[dict[str, str]]:
    """A moto S3 server holding ``objects`` in ``bucket``; yields the environment that points
    the labse_model CLIs at it (skips the test when moto/boto3 are missing)."""
    why = s3_available()
    if why:
        pytest.skip(why)
    with s3_server(log_dir) as endpoint:
        client = s3_client(endpoint)
        client.create_bucket(Bucket=bucket)
        for key, body in objects.items():
            client.put_object(Bucket=bucket, Key=key, Body=body)
        # One way for code outside Beam pipelines: Beam flags in LABSE_BEAM_OPTIONS.
        yield {"LABSE_BEAM_OPTIONS": " ".join(s3_args(endpoint)), "LABSE_DIST_TIMEOUT_S": "30"}


class ForkedNode:
    """A node's launcher forked from the test process (torch already imported there: each
    launcher started as a new interpreter spent 5-10 s importing it), with the parts of
    ``subprocess.Popen`` the tests use: ``pid``, ``poll()``, ``wait(timeout)``."""

    def __init__(self, proc, status: Path, argv: list[str]) -> None:
        self._proc, self._status, self.args = proc, status, argv

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        if self._proc.exitcode is None:
            return None
        # The command's own exit status; a node killed by a signal wrote none.
        text = self._status.read_text().strip() if self._status.exists() else ""
        return int(text) if text else self._proc.exitcode

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._proc.join(timeout)
        if self._proc.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self.returncode  # type: ignore[return-value]


def start_node(
    cmd: list[str], rank: int, port: int, rdzv_id: str, extra_env: dict, log: Path
) -> ForkedNode:
    """One node of a two-node job: ``cmd`` (``python -m labse_model ...``) plus the launcher
    flags, forked from this process as ``python -m`` would run it, in its own session (so
    kill_group ends the launcher and its workers), its output appended to ``log``. The workers
    the launcher starts are interpreters of their own, as under torchrun anywhere."""
    assert cmd[1:3] == ["-m", "labse_model"], cmd
    argv = [
        *cmd[3:],
        "--nnodes",
        "2",
        "--node-rank",
        str(rank),
        "--nproc-per-node",
        "1",
        "--rdzv-endpoint",
        f"127.0.0.1:{port}",
        "--rdzv-backend",
        "c10d",
        "--rdzv-id",
        rdzv_id,
    ]
    return fork_labse_model(argv, env(**extra_env), log, f"{rdzv_id}.{rank}")


def fork_labse_model(
    argv: list[str], environ: dict, log: Path, tag: str = "rc", err: Path | None = None
) -> ForkedNode:
    """``python -m labse_model *argv`` forked from this process, in a session of its own, with
    ``environ`` as its environment, its stdout (and its stderr unless ``err`` is given)
    appended to ``log``."""
    # What the command imports (torch.distributed.run: the launcher's) is imported here once,
    # free where an earlier test did: every forked command then starts with it, as the
    # product's fork server's children do.
    import multiprocessing
    import sys

    import torch.distributed.run  # noqa: F401

    import labse_model.__main__  # noqa: F401
    import labse_model.train  # noqa: F401
    from labse_common.forked_main import child_main

    status = log.with_name(f"{log.name}.{tag}.rc")
    status.unlink(missing_ok=True)
    proc = multiprocessing.get_context("fork").Process(
        target=child_main,
        args=("labse_model", argv, environ, str(ROOT), str(log), str(err) if err else None),
        kwargs={"status": str(status), "status_format": "rc", "new_session": True},
    )
    proc.start()
    return ForkedNode(proc, status, [sys.executable, "-m", "labse_model", *argv])


def run_labse_model(argv: list[str], workdir: Path, timeout: float = 300) -> tuple[int, str]:
    """``python -m labse_model *argv`` forked from this process (no interpreter start: torch is
    imported here already) in this environment; its exit status and stderr (stdout to
    ``workdir/stdout``). A run past ``timeout`` is killed with its process group."""
    import os

    workdir.mkdir(parents=True, exist_ok=True)
    out, err = workdir / "stdout", workdir / "stderr"
    proc = fork_labse_model(argv, dict(os.environ), out, err=err)
    try:
        rc = proc.wait(timeout)
    finally:
        kill_group(proc)
    return rc, err.read_text(errors="replace") if err.exists() else ""


def kill_node(node: ForkedNode) -> None:
    """SIGKILL a whole node: its workers (torchrun starts each in a session of its own, so a
    kill of the launcher's process group alone leaves them training) and then its launcher."""
    import os
    import signal

    for pid in _children(node.pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(node.pid, signal.SIGKILL)


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        # Field 4 (after the parenthesised command name) is the parent pid.
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(d.name))
    return out


def read_metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in open(out / "metrics.jsonl")]


def _torchrun_rank(rank: int, fn, world: int, port: int, args: tuple) -> None:
    import os

    # The environment torchrun gives its workers (env:// rendezvous on this machine).
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    fn(rank, *args)


def run_forked_ranks(fn, args: tuple, nprocs: int, timeout: float) -> None:
    """``fn(rank, *args)`` in ``nprocs`` processes forked from this one, each with the environment
    torchrun gives its workers (torch already imported: spawned ranks or a torchrun launcher
    spend their time importing it); a rank still running after ``timeout`` seconds fails the
    test and every rank is killed."""
    import time

    import torch.multiprocessing as mp

    from tests.support.scaleout_util import free_port

    ctx = mp.start_processes(
        _torchrun_rank,
        args=(fn, nprocs, free_port(), args),
        nprocs=nprocs,
        join=False,
        start_method="fork",
    )
    deadline = time.monotonic() + timeout
    try:
        while not ctx.join(timeout=1):
            assert time.monotonic() < deadline, f"the {nprocs} ranks did not finish in {timeout} s"
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
