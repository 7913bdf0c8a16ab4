"""Every process a stage starts dies with a runner killed outright (``kill -9``):
the stage's own process and its children, Beam's SDK worker processes included (they
outlived the runner by 18 s or more, until their gRPC channel timed out).

The runner here is a small script that runs one stage command the way run_stage does
(execute._run_command), forked from a fork server (preloading Beam only) or spawned."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.support.paths import REPO as ROOT

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="/proc and prctl are Linux's")

RUNNER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from labse_common import forked_main
    from pipelines.run import execute

    def main():
        forked_main.PRELOAD = ("apache_beam", "labse_common.forked_main")
        log = Path(sys.argv[1])
        with open(log, "a", encoding="utf-8") as f:
            cmd = [sys.executable, "-m", "tests.pipelines.beam_sleep_job"]
            execute._run_command(cmd, f, log, sys.argv[2] == "fork")

    if __name__ == "__main__":  # the fork server's children import this script
        main()
    """
)


def _children() -> dict[int, list[int]]:
    """Every live process's children, from /proc."""
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if fields[0] != "Z":
                kids.setdefault(int(fields[1]), []).append(int(d.name))
    return kids


def _descendants(pid: int) -> set[int]:
    kids, found, todo = _children(), set(), [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            found.add(k)
            todo.append(k)
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"  # a zombie has ended; only its parent's wait is due


@pytest.mark.slow  # Beam's import and two SDK workers starting: 10-20 s
@pytest.mark.parametrize("mode", ["fork", "spawn"])
def test_a_beam_stage_and_its_sdk_workers_die_with_a_killed_runner(tmp_path: Path, mode: str):
    script = tmp_path / "runner.py"
    script.write_text(RUNNER, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "LABSE_STAGE_START"}
    env["PYTHONPATH"] = str(ROOT)
    runner = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "stage.log"), mode],
        env=env,
        cwd=ROOT,
        start_new_session=True,  # the clean-up below can reach whatever is left
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            assert runner.poll() is None, (tmp_path / "stage.log").read_text()
            seen = _descendants(runner.pid)
            if sum("sdk_worker_main" in _cmdline(p) for p in seen) >= 2:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the job's two SDK workers did not start within 300 s")
        time.sleep(1)  # the workers in their elements
        seen = _descendants(runner.pid)
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait()
        deadline = time.monotonic() + 3
        while {p for p in seen if _alive(p)} and time.monotonic() < deadline:
            time.sleep(0.1)
        left = {p: _cmdline(p) for p in seen if _alive(p)}
        assert not left, f"outlived the runner by 3 s: {left}"
    finally:
        for p in seen | {runner.pid}:
            if _alive(p):
                os.kill(p, signal.SIGKILL)
        runner.wait()
