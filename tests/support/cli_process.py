"""Command lines run as ``python -m`` does, forked from a server that imported the heavy libraries
once, so each case costs a fork, not an interpreter start (5-30 s of imports on a loaded 2-core
machine). The server and the child body are the product's (labse_common.forked_main, which the
stage runner forks its stages with, preloading BERT's modelling code, scikit-learn, FAISS and the
rest); a case differs in its own session and its separate stdout and stderr files.

tests/end_to_end/test_cli_contract.py, tests/end_to_end/test_cli_errors.py and
tests/filters/test_cli_contract.py run their commands through :func:`run_cli`.
``LABSE_CONTRACT_SUBPROCESS=1`` runs plain ``python -m`` interpreters instead."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from labse_common.forked_main import child_main
from tests.support.paths import REPO

SUBPROCESS_ENV = "LABSE_CONTRACT_SUBPROCESS"


@dataclass
class CliResult:
    """How one command line ended: exit status (-9: killed at the time limit), its output, its
    wall seconds and argv."""

    rc: int
    stdout: str
    stderr: str
    seconds: float
    argv: list[str]


def run_as_main(module: str, argv: list[str], env: dict, cwd: str, out: str, err: str) -> None:
    """Body of one case's process: what ``python -m module *argv`` does, with its own session
    (a timeout kills it and whatever it started), environment, stdout and stderr; its exit
    status also in ``err + ".rc"``."""
    child_main(
        module, argv, env, cwd, out, err, status=f"{err}.rc", status_format="rc", new_session=True
    )


def server_env() -> dict[str, str]:
    """The fork server's environment: one thread per library (torch and the BLAS libraries read
    these when imported, so the server's values are every child's), the repository importable,
    nothing of this machine's cloud credentials."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "LABSE_", "BOTO"))}
    env.update(
        PYTHONPATH=str(REPO),
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        TOKENIZERS_PARALLELISM="false",
        AWS_EC2_METADATA_DISABLED="true",
    )
    return env


def cli_context() -> multiprocessing.context.BaseContext | None:
    """The fork server (started once per test process, shared by every module using it), or
    None for plain interpreters (``LABSE_CONTRACT_SUBPROCESS=1``, or a server that did not
    start)."""
    if os.environ.get(SUBPROCESS_ENV):
        return None
    from labse_common.forked_main import forkserver

    return forkserver(server_env())


def run_cli(
    module: str,
    argv: list[str],
    env: Mapping[str, str],
    workdir: Path,
    ctx: multiprocessing.context.BaseContext | None,
    timeout: float,
) -> CliResult:
    """``python -m module *argv`` with ``env``, in the repository root: forked from ``ctx``'s
    server, or a new interpreter when ``ctx`` is None. Its stdout and stderr files go to
    ``workdir``; past ``timeout`` it is killed with its process group (rc -9)."""
    workdir.mkdir(parents=True, exist_ok=True)
    stamp = time.monotonic_ns()
    out, err = workdir / f"stdout-{stamp}", workdir / f"stderr-{stamp}"
    t0 = time.monotonic()
    if ctx is None:
        try:
            r = subprocess.run(
                [sys.executable, "-m", module, *argv],
                cwd=REPO,
                env=dict(env),
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            return CliResult(r.returncode, r.stdout, r.stderr, time.monotonic() - t0, argv)
        except subprocess.TimeoutExpired as e:
            return CliResult(-9, str(e.stdout or ""), str(e.stderr or ""), timeout, argv)
    p = ctx.Process(  # type: ignore[attr-defined]
        target=run_as_main, args=(module, argv, dict(env), str(REPO), str(out), str(err))
    )
    p.start()
    p.join(timeout)
    if p.exitcode is None:  # past the limit: kill the process group
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.join(10)
    rc = p.exitcode if p.exitcode is not None else -9
    status = Path(f"{err}.rc")
    if status.exists() and status.read_text().strip():  # the command's own exit status
        rc = int(status.read_text())
    return CliResult(
        rc,
        out.read_text(errors="replace") if out.exists() else "",
        err.read_text(errors="replace") if err.exists() else "",
        time.monotonic() - t0,
        argv,
    )
