"""One stage run: its commands as child processes (dying with the runner), its resource use,
and its manifest written when every declared output is there."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from labse_common.datafiles import read_json
from labse_common.errors import InputError
from pipelines.run.declare import ROOT, STATE, Context, manifest_path, progress_path
from pipelines.run.plan import Plan, out_relative, stage_reads


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


def _die_with_runner() -> None:
    """In a stage's child before it starts: the kernel sends it SIGTERM when the runner dies,
    however it dies (``kill -9`` included), so no stage goes on writing into a run folder whose
    next runner takes the claim. Linux only; elsewhere the child outlives a killed runner."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        pass


PR_SET_PDEATHSIG = 1


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
    s = plan.stage
    d = ctx.d(s)
    logs = ctx.out / "_logs"
    logs.mkdir(parents=True, exist_ok=True)
    (ctx.out / STATE).mkdir(exist_ok=True)
    if d.exists() and not (s.resumable and _progress_key(ctx.out, s.name) == plan.key):
        shutil.rmtree(d)
    d.mkdir(parents=True, exist_ok=True)
    manifest_path(ctx.out, s.name).unlink(missing_ok=True)
    write_json(progress_path(ctx.out, s.name), {"key": plan.key, "started": time.time()})
    t0 = time.time()
    peak_kb, cpu = 0, 0.0
    logfile = logs / f"{s.name}.log"
    with open(logfile, "a", encoding="utf-8") as logf:
        for cmd in s.commands(ctx):
            logf.write(f"$ {' '.join(map(str, cmd))}\n")
            logf.flush()
            child = subprocess.Popen(
                list(map(str, cmd)),
                stdout=logf,
                stderr=subprocess.STDOUT,
                env=_child_env(),
                cwd=str(ROOT),
                preexec_fn=_die_with_runner,
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
            peak_kb = max(peak_kb, usage.ru_maxrss)
            cpu += usage.ru_utime + usage.ru_stime
            if child.returncode != 0:
                tail = logfile.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
                raise StageFailed(s.name, child.returncode, logfile, tail)
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
        "finished": time.time(),
    }
    write_json(manifest_path(ctx.out, s.name), manifest)
    progress_path(ctx.out, s.name).unlink(missing_ok=True)
    return manifest


def write_json(path: Path, doc: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    os.replace(tmp, path)
