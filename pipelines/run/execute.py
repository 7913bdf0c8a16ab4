"""One stage run: its commands as child processes (dying with the runner; ``python -m`` ones
forked from a server that imported the heavy libraries once, see labse_common.forked_main), its
resource use, and its manifest written when every declared output is there."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TextIO

from labse_common.datafiles import read_json
from labse_common.errors import InputError
from labse_common.forked_main import (
    ChildResult,
    die_with_parent,
    forkserver,
    run_forked,
    start_mode,
)
from pipelines.run.declare import ROOT, STATE, Context, manifest_path, progress_path
from pipelines.run.plan import Plan, out_relative, stage_reads
from pipelines.run.units import Units


def _listing(d: Path) -> list[list]:
    files = []
    for p in sorted(d.rglob("*")):
        if p.is_file():
            files.append([str(p.relative_to(d)), p.stat().st_size])
    return files


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("OMP_NUM_THREADS", "2")
    return env


class StageFailed(Exception):
    def __init__(self, stage: str, rc: int, logfile: Path, tail: list[str]) -> None:
        super().__init__(f"stage {stage} failed (exit status {rc}); log: {logfile}")
        self.rc = rc
        self.tail = tail


def _progress_key(out: Path, stage: str) -> str | None:
    p = progress_path(out, stage)
    if not p.exists():
        return None
    try:
        return read_json(p).get("key")
    except InputError:
        return None


def run_stage(plan: Plan, ctx: Context) -> dict:
    """Run a stage's commands as children; returns its manifest (raises StageFailed)."""
    fork = start_mode() == "fork"  # a wrong LABSE_STAGE_START stops before the stage starts
    s = plan.stage
    d = ctx.d(s)
    logs = ctx.out / "_logs"
    logs.mkdir(parents=True, exist_ok=True)
    (ctx.out / STATE).mkdir(exist_ok=True)
    keep = s.resumable and _progress_key(ctx.out, s.name) == plan.key
    if d.exists() and not keep:
        shutil.rmtree(d)
    d.mkdir(parents=True, exist_ok=True)
    manifest_path(ctx.out, s.name).unlink(missing_ok=True)
    write_json(progress_path(ctx.out, s.name), {"key": plan.key, "started": time.time()})
    t0 = time.time()
    peak_kb, cpu = 0, 0.0
    logfile, attempt = _attempt_log(logs, s.name)
    commands = s.commands(ctx)
    # Several commands of a resumable stage: the finished ones are kept across a kill.
    units = Units(ctx.out, s.name, d, keep) if s.resumable and len(commands) > 1 else None
    with open(logfile, "a", encoding="utf-8") as logf:
        logf.write(f"# {s.name}: attempt {attempt}, started {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        for cmd in commands:
            shown = out_relative(list(map(str, cmd)), ctx.out)
            if units and units.finished(cmd, shown):
                logf.write(f"$ (finished by an earlier attempt, kept) {' '.join(map(str, cmd))}\n")
                continue
            logf.write(f"$ {' '.join(map(str, cmd))}\n")
            logf.flush()
            r = _run_command(list(map(str, cmd)), logf, logfile, fork)
            peak_kb = max(peak_kb, r.peak_rss_kb)
            cpu += r.cpu_seconds
            if r.rc != 0:
                tail = logfile.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
                raise StageFailed(s.name, r.rc, logfile, tail)
            if units:
                units.done(cmd, shown)
    missing = [o for o in s.outputs(ctx) if not (d / o).exists()]
    if missing:
        raise StageFailed(s.name, 1, logfile, [f"declared outputs missing: {missing}"])
    manifest = {
        "stage": s.name,
        "key": plan.key,
        "parts": plan.parts,
        "reads": stage_reads(s, ctx),
        "commands": out_relative(s.commands(ctx), ctx.out),
        "outputs": _listing(d),
        "seconds": round(time.time() - t0, 2),
        "cpu_seconds": round(cpu, 2),
        "peak_rss_mb": round(peak_kb / 1024, 1),
        "resumed_shards": _resumed(d, units),
        "finished": time.time(),
    }
    write_json(manifest_path(ctx.out, s.name), manifest)
    progress_path(ctx.out, s.name).unlink(missing_ok=True)
    return manifest


def _resumed(d: Path, units: Units | None) -> int:
    """Shards an earlier attempt finished that this one kept: commands (``units``) or, for a
    stage whose command resumes by itself, what its stats.json counts."""
    if units is not None:
        return units.resumed
    try:
        return int(read_json(d / "stats.json").get("resumed_shards", 0))
    except (InputError, AttributeError, TypeError, ValueError):
        return 0


def _attempt_log(logs: Path, stage: str) -> tuple[Path, int]:
    """This attempt's log, ``_logs/<stage>.log`` (absent: its commands append to it), and the
    attempt's number. An earlier attempt's log is kept as ``_logs/<stage>.<n>.log`` (n = 1 for
    the first), so a failure shows this attempt's lines only, never a stale one's."""
    logfile = logs / f"{stage}.log"
    earlier = [
        int(n) for p in logs.glob(f"{stage}.*.log") if (n := p.name[len(stage) + 1 : -4]).isdigit()
    ]
    attempt = max(earlier, default=0) + 1
    if logfile.exists():
        os.replace(logfile, logs / f"{stage}.{attempt}.log")
        attempt += 1
    return logfile, attempt


def _run_command(cmd: list[str], logf: TextIO, logfile: Path, fork: bool) -> ChildResult:
    """One command of a stage, its output appended to the stage's log. ``python -m`` commands
    are forked from the fork server (LABSE_STAGE_START=fork, the default on Linux), which has
    the heavy libraries imported already; anything else, or with LABSE_STAGE_START=spawn, is a
    new process."""
    env = _child_env()
    if fork and len(cmd) > 2 and cmd[0] == sys.executable and cmd[1] == "-m":
        ctx = forkserver(env, logfile.with_name("forkserver.log"))
        if ctx is not None:
            return run_forked(ctx, cmd[2], cmd[3:], env, ROOT, logfile)
    child = subprocess.Popen(
        cmd,
        stdout=logf,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=str(ROOT),
        preexec_fn=die_with_parent,  # no stage goes on writing into a run it lost
    )
    try:
        # wait4 gives this child's own resource use: peak RSS of the child (and of the
        # grandchildren it waited for), not a high-water mark of the whole run.
        _, status, usage = os.wait4(child.pid, 0)
    except BaseException:  # Ctrl-C or SIGTERM of the runner alone: stop the child too
        child.terminate()
        child.wait()
        raise
    child.returncode = os.waitstatus_to_exitcode(status)
    return ChildResult(child.returncode, usage.ru_utime + usage.ru_stime, usage.ru_maxrss)


def write_json(path: Path, doc: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    os.replace(tmp, path)
