"""The stage runner's two ways to start a ``python -m`` command (labse_common.forked_main): forked
from the preloaded server (LABSE_STAGE_START=fork) and a new interpreter (spawn) end the same way,
log the same lines and report their resource use; a forked child sees the children's
environment and dies with a runner killed outright.

The commands run in a separate runner process (a script, as the stage runner is one), so the
server is this module's own and started with the environment the test gives it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from labse_common.threads import THREAD_ENV
from tests.support.paths import REPO as ROOT

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="fork mode is Linux's")

CASES = {"ok": [], "exit2": ["--exit", "2"], "raises": ["--raise"]}

# The runner's side: every case in both modes through execute._run_command (what run_stage runs
# each command with), one JSON line of results.
RUNNER = textwrap.dedent(
    """
    import json, os, sys
    from pathlib import Path
    from labse_common import forked_main
    from pipelines.run import execute

    def main():
        out, cases = Path(sys.argv[1]), json.loads(sys.argv[2])
        # What the probe imports, not all a stage does (Beam, BERT, sklearn: 10 s more to
        # start the server); the server still has torch before the children's environment.
        forked_main.PRELOAD = ("torch", "labse_common.forked_main")
        results = {}
        for mode in ("fork", "spawn"):
            for name, extra in cases.items():
                log = out / f"{mode}-{name}.log"
                with open(log, "a", encoding="utf-8") as f:
                    f.write("$ the command\\n")
                    f.flush()
                    cmd = [sys.executable, "-m", "tests.support.stage_probe", "--env", "OMP_NUM_THREADS", "LABSE_PROBE"]
                    r = execute._run_command([*cmd, *extra], f, log, mode == "fork")
                results[f"{mode}-{name}"] = [r.rc, r.cpu_seconds, r.peak_rss_kb]
        print(json.dumps(results))

    if __name__ == "__main__":
        main()
    """
)


def _env(**extra: str) -> dict[str, str]:
    # Without the thread variables an earlier in-process test may have left in this worker's
    # environment (labse_common.threads.size_threads sets them): torch takes MKL_NUM_THREADS
    # over OMP_NUM_THREADS, and the thread-count check below would read the leak.
    drop = {"LABSE_STAGE_START", *THREAD_ENV}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def both_modes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("forked")
    script = out / "runner.py"
    script.write_text(RUNNER, encoding="utf-8")
    p = subprocess.run(
        [sys.executable, str(script), str(out), json.dumps(CASES)],
        env=_env(OMP_NUM_THREADS="1", LABSE_PROBE="custom value"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr
    return out, json.loads(p.stdout.splitlines()[-1])


def _probe_line(log: Path) -> dict:
    lines = [ln for ln in log.read_text(encoding="utf-8").splitlines() if ln.startswith("probe ")]
    assert len(lines) == 1, log.read_text(encoding="utf-8")
    return json.loads(lines[0][len("probe ") :])


@pytest.mark.slow  # the fixture: a fork server and six commands, 25 s
def test_forked_and_spawned_commands_end_and_log_the_same(both_modes):
    out, results = both_modes
    for name, rc in (("ok", 0), ("exit2", 2), ("raises", 1)):
        fork, spawn = results[f"fork-{name}"], results[f"spawn-{name}"]
        assert fork[0] == spawn[0] == rc, (name, fork, spawn)
        # CPU of the command's own work (>= the probe's 0.2 s burn); the probe touches 64 MB
        for r in (fork, spawn):
            assert r[1] >= 0.15 and r[2] > 64 * 1024, (name, r)
        logs = [(out / f"{m}-{name}.log").read_text(encoding="utf-8") for m in ("fork", "spawn")]
        for text in logs:
            assert text.startswith("$ the command\n"), text  # appended after the runner's line
            assert "INFO probe: to stderr" in text  # stderr lands in the same log
        assert _probe_line(out / f"fork-{name}.log") == _probe_line(out / f"spawn-{name}.log")
    for m in ("fork", "spawn"):
        text = (out / f"{m}-raises.log").read_text(encoding="utf-8")
        assert "Traceback" in text and "ValueError: the probe was told to fail" in text, text
        assert "Traceback" not in (out / f"{m}-exit2.log").read_text(encoding="utf-8")
    assert not list(out.glob("*.status.json"))  # read and removed by the runner


@pytest.mark.slow  # the fixture: a fork server and six commands, 25 s
def test_a_forked_command_sees_the_children_environment(both_modes):
    out, results = both_modes
    seen = _probe_line(out / "fork-ok.log")
    assert seen["env"] == {"OMP_NUM_THREADS": "1", "LABSE_PROBE": "custom value"}
    # torch sized its pool when the server imported it: the server had the children's env
    assert seen["torch_threads"] == 1  # 2 (the cores) had it imported without
    assert seen["cwd"] == str(ROOT)
    assert seen["argv0"].endswith("stage_probe.py")
    # the server's own output (Beam's import-time warnings) is kept out of the console
    assert (out / "forkserver.log").exists()


@pytest.mark.slow  # the fixture: a fork server and six commands, 25 s
def test_forking_saves_the_imports(both_modes):
    _, results = both_modes
    # the spawned probe imports torch itself (seconds); the forked one has it already
    assert results["fork-ok"][1] < results["spawn-ok"][1], results


def test_a_wrong_start_mode_is_one_clear_error(tmp_path: Path):
    p = subprocess.run(
        [sys.executable, "-m", "pipelines.run", "--output", str(tmp_path / "run")],
        env=_env(LABSE_STAGE_START="vfork"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "LABSE_STAGE_START='vfork'" in p.stderr and "Traceback" not in p.stderr


KILLED = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from labse_common import forked_main

    def main():
        out = Path(sys.argv[1])
        forked_main.PRELOAD = ("labse_common.forked_main",)  # the death chain, not the speed
        env = dict(os.environ)
        ctx = forked_main.forkserver(env, out / "forkserver.log")
        assert ctx is not None
        argv = ["--sleep", "120", "--pid-file", str(out / "child.pid")]
        forked_main.run_forked(ctx, "tests.support.stage_probe", argv, env, os.getcwd(), out / "child.log")

    if __name__ == "__main__":
        main()
    """
)


def _start_runner(source: str, tmp_path: Path, why, **popen) -> tuple[subprocess.Popen, int]:
    """Run ``source`` as a runner script in ``tmp_path``; wait until its forked child wrote
    ``child.pid`` (``why(runner)`` explains a runner that ended first). The runner and that pid."""
    script = tmp_path / "runner.py"
    script.write_text(source, encoding="utf-8")
    runner = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path)], env=_env(), cwd=ROOT, **popen
    )
    pid_file = tmp_path / "child.pid"
    deadline = time.monotonic() + 120
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        assert runner.poll() is None, why(runner)
        time.sleep(0.1)
    return runner, int(pid_file.read_text())


def test_a_forked_child_dies_with_a_runner_killed_outright(tmp_path: Path):
    runner, child = _start_runner(
        KILLED,
        tmp_path,
        lambda _: (tmp_path / "child.log").read_text(errors="replace"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # the child stays in the runner's process group (a group kill reaches it); no setsid
    assert os.getpgid(child) == os.getpgid(runner.pid)
    assert _ppid(child) != runner.pid  # forked from the server, not by the runner
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait()
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child), "the forked child outlived the runner"


def _ppid(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has ended; its parent (the server) may be gone already


TERMINATED = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from labse_common import forked_main

    def stop(signum, frame):
        raise KeyboardInterrupt  # as python -m pipelines.run does with SIGTERM

    def main():
        out = Path(sys.argv[1])
        signal.signal(signal.SIGTERM, stop)
        forked_main.PRELOAD = ("labse_common.forked_main",)
        env = dict(os.environ)
        ctx = forked_main.forkserver(env, out / "forkserver.log")
        argv = ["--sleep", "120", "--pid-file", str(out / "child.pid")]
        try:
            forked_main.run_forked(ctx, "tests.support.stage_probe", argv, env, ".", out / "c.log")
        except KeyboardInterrupt:
            # the runner is still alive here: run_forked itself stopped and reaped the child
            pid = int((out / "child.pid").read_text())
            print("child gone" if not os.path.exists(f"/proc/{pid}") else "child alive")
            return 130
        return 0

    if __name__ == "__main__":
        sys.exit(main())
    """
)


def test_a_terminated_runner_stops_its_forked_child_first(tmp_path: Path):
    runner, _ = _start_runner(
        TERMINATED,
        tmp_path,
        lambda r: r.communicate(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    runner.send_signal(signal.SIGTERM)  # the runner alone, not its process group
    out, err = runner.communicate(timeout=60)
    assert runner.returncode == 130, (out, err)
    assert out.strip() == "child gone", (out, err)
