"""Command lines run as ``python -m`` does, forked from a server that imported the heavy libraries
once, so each case costs a fork, not an interpreter start (5-30 s of imports on a loaded 2-core
machine). The server and the child body are the product's (labse_common.forked_main, which the
stage runner forks its stages with, preloading BERT's modelling code, scikit-learn, FAISS and the
rest); a case differs in its own session and its separate stdout and stderr files.

tests/end_to_end/test_cli_contract.py, tests/end_to_end/test_cli_errors.py and
tests/filters/test_cli_contract.py run their commands through :func:`run_cli`; the runner tests
(tests/pipelines) through :class:`ForkedCommands`, the same server and child body with the
command's own modules imported once more. ``LABSE_CONTRACT_SUBPROCESS=1`` runs plain
``python -m`` interpreters instead."""

from __future__ import annotations

import importlib
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
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
    out, err = _files(workdir)
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
    return _result(p.exitcode, out, err, t0, argv)


def _files(workdir: Path) -> tuple[Path, Path]:
    workdir.mkdir(parents=True, exist_ok=True)
    stamp = time.monotonic_ns()
    return workdir / f"stdout-{stamp}", workdir / f"stderr-{stamp}"


def _result(exitcode: int | None, out: Path, err: Path, t0: float, argv: list[str]) -> CliResult:
    rc = exitcode if exitcode is not None else -9
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


def _command_server(conn: Connection, preload: list[str]) -> None:
    """Body of :class:`ForkedCommands`' server, a child of the fork server: ``preload`` imported
    once, then one :func:`run_as_main` child forked per request until the pipe closes."""
    for name in preload:
        importlib.import_module(name)
    fork = multiprocessing.get_context("fork")
    while True:
        try:
            module, argv, env, out, err, timeout = conn.recv()
        except EOFError:  # the test process closed it (or died): nothing more to run
            return
        p = fork.Process(target=run_as_main, args=(module, argv, env, str(REPO), out, err))
        p.start()
        p.join(timeout)
        if p.exitcode is None:  # past the limit: its session (the command and its children)
            os.killpg(p.pid, signal.SIGKILL)
            p.join()
        conn.send(p.exitcode)


class ForkedCommands:
    """``python -m <module>`` with arguments, each call forked from a server that imported the
    command's own modules once (``preload``); the result as :func:`subprocess.run` gives it.

    One mechanism with :func:`run_cli`: the server is a child of the same fork server
    (:func:`cli_context`, whose preload is the libraries) and each command runs the same body
    (:func:`run_as_main`: its own session, environment, stdout and stderr files). The extra
    level is for the command's own modules, which the fork server does not import: the stage
    runner's take ~1 s on the shared cores, paid by every one of the tests' ~40 runner commands
    otherwise. Without a fork server (``LABSE_CONTRACT_SUBPROCESS=1``), plain interpreters."""

    def __init__(self, workdir: Path, preload: tuple[str, ...] = ()) -> None:
        self.workdir = workdir
        self.server = None
        ctx = cli_context()
        if ctx is not None:
            self.conn, theirs = multiprocessing.Pipe()
            self.server = ctx.Process(target=_command_server, args=(theirs, list(preload)))
            self.server.start()
            theirs.close()

    def run(
        self, module: str, *args: str, env: Mapping[str, str] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess:
        env = dict(env or {**os.environ, "PYTHONPATH": str(REPO)})
        if self.server is None:
            r = run_cli(module, list(args), env, self.workdir, None, timeout)
        else:
            out, err = _files(self.workdir)
            t0 = time.monotonic()
            self.conn.send((module, list(args), env, str(out), str(err), timeout))
            try:
                exitcode = self.conn.recv()
            except EOFError:
                raise AssertionError(f"the command server ended ({self.server.exitcode})") from None
            r = _result(exitcode, out, err, t0, list(args))
        return subprocess.CompletedProcess(
            ["python", "-m", module, *args], r.rc, r.stdout, r.stderr
        )

    def close(self) -> None:
        if self.server is not None:
            self.conn.close()  # the server's recv ends
            self.server.join(30)
            if self.server.exitcode is None:
                self.server.kill()
                self.server.join()
