"""Fixtures of the pipelines tests used by more than one module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.paths import REPO


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    """A 1-layer, 32-wide checkpoint (labse_model.tiny) for the embedding jobs; its path."""
    pytest.importorskip("torch")
    try:
        from labse_model.tiny import make_tiny_checkpoint
    except ImportError as exc:
        pytest.skip(f"labse_model.tiny not available: {exc}")
    out = tmp_path_factory.mktemp("tiny")
    sents = [f"sentence number {i} about topic {i % 7}" for i in range(200)]
    return make_tiny_checkpoint(str(out / "m"), sentences=sents, hidden=32, layers=1)


# A process that imports a command's modules once and forks one child per request, each running
# ``python -m <module>`` the way the stage runner starts its own stages
# (labse_common.forked_main.child_main: its own session, environment, folder, stdout and stderr).
# An interpreter start with those imports is 2-7 s on the shared cores; a fork is a fraction.
# A process of its own, not this worker's multiprocessing fork server, which other modules start
# with other imports.
_SERVER = textwrap.dedent(
    """
    import importlib, json, os, signal, sys
    import multiprocessing
    from tests.support.cli_process import run_as_main

    ctx = multiprocessing.get_context("fork")
    for line in sys.stdin:
        r = json.loads(line)
        for name in r["preload"]:  # once: later requests find them in sys.modules
            importlib.import_module(name)
        p = ctx.Process(
            target=run_as_main,
            args=(r["module"], r["argv"], r["env"], r["cwd"], r["out"], r["err"]),
        )
        p.start()
        p.join(r["timeout"])
        if p.exitcode is None:  # past the limit: its session (the command and its children)
            os.killpg(p.pid, signal.SIGKILL)
            p.join()
        print(json.dumps({"exitcode": p.exitcode}), flush=True)
    """
)

# What each command imports before it reads its arguments.
PRELOAD = {
    "pipelines.run": ("pipelines.run.cli",),
    "filters": ("filters.__main__", "filters.bitext.cli_export"),
}


class ForkedCommands:
    """``python -m <module>`` with arguments, each call a process forked from a server that
    imported the command once; the result as :func:`subprocess.run` gives it."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.calls = 0
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.server = subprocess.Popen(
            [sys.executable, "-c", _SERVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=REPO,
            env=env,
            text=True,
        )

    def run(
        self, module: str, *args: str, env: dict[str, str] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess:
        self.calls += 1
        out = self.workdir / f"{self.calls}.stdout"
        err = self.workdir / f"{self.calls}.stderr"
        request = {
            "module": module,
            "preload": list(PRELOAD.get(module, ())),
            "argv": list(args),
            "env": env or {**os.environ, "PYTHONPATH": str(REPO)},
            "cwd": str(REPO),
            "out": str(out),
            "err": str(err),
            "timeout": timeout,
        }
        assert self.server.stdin and self.server.stdout
        self.server.stdin.write(json.dumps(request) + "\n")
        self.server.stdin.flush()
        answer = self.server.stdout.readline()
        assert answer, f"the command server ended (status {self.server.poll()})"
        rc = json.loads(answer)["exitcode"]
        status = Path(f"{err}.rc")  # the command's own exit status (child_main writes it)
        if status.is_file() and status.read_text().strip():
            rc = int(status.read_text())
        return subprocess.CompletedProcess(
            ["python", "-m", module, *args],
            -9 if rc is None else rc,
            out.read_text(errors="replace") if out.exists() else "",
            err.read_text(errors="replace") if err.exists() else "",
        )

    def close(self) -> None:
        assert self.server.stdin
        self.server.stdin.close()
        try:
            self.server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.server.kill()
            self.server.wait()


@pytest.fixture(scope="module")
def forked_commands(tmp_path_factory) -> Iterator[ForkedCommands]:
    """``forked_commands.run(module, *args, env=None, timeout=120)``: ``python -m module *args``
    in a process forked from a server that imported the command once (the way the stage runner
    starts its stages); a :class:`subprocess.CompletedProcess` with its exit status, stdout and
    stderr."""
    commands = ForkedCommands(tmp_path_factory.mktemp("forked-commands"))
    yield commands
    commands.close()
