"""One stage run: its commands as child processes (dying with the runner; ``python -m`` ones
forked from a server that imported the heavy libraries once, see labse_common.forked_main), its
resource use, and its manifest written when every declared output is there."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TextIO

from labse_common import filesystems
from labse_common.datafiles import read_json
from labse_common.errors import InputError
from labse_common.forked_main import (
    ChildResult,
    die_with_parent,
    forkserver,
    run_forked,
    start_mode,
)
from pipelines.run.declare import (
    ROOT,
    STAGES,
    STATE,
    Context,
    Stage,
    manifest_path,
    progress_path,
)
from pipelines.run.plan import Plan, out_relative, stage_reads
from pipelines.run.run_folder import closure, has_output, stage_files
from pipelines.run.units import Units, units_path

log = logging.getLogger("pipelines.run")


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
    folder = ctx.folder
    remote_stage = folder is not None and s.on_engine(ctx)  # it reads and writes the remote folder
    logs = ctx.out / "_logs"
    logs.mkdir(parents=True, exist_ok=True)
    (ctx.out / STATE).mkdir(exist_ok=True)
    keep = s.resumable and _progress_key(ctx.out, s.name) == plan.key
    if d.exists() and not keep:
        shutil.rmtree(d)
    d.mkdir(parents=True, exist_ok=True)
    manifest_path(ctx.out, s.name).unlink(missing_ok=True)
    write_json(progress_path(ctx.out, s.name), {"key": plan.key, "started": time.time()})
    if folder is not None:
        _begin_remote(ctx, s, keep, remote_stage)
    t0 = time.time()
    logfile, attempt = _attempt_log(logs, s.name)
    commands = s.command_lines(ctx)
    # Several commands of a resumable stage: the finished ones are kept across a kill.
    units = None
    if s.resumable and len(commands) > 1:
        where = folder.remote(s.name) if remote_stage else d
        units = Units(ctx.out, s.name, where, keep, on_record=_recorder(ctx, s.name, remote_stage))
    try:
        peak_kb, cpu = _run_commands(ctx, s.name, commands, units, logfile, attempt, fork)
    except BaseException:
        if folder is not None:  # what it finished, for a rerun anywhere (best effort)
            _push_quietly(ctx, s.name, remote_stage)
        raise
    resumed = _resumed(ctx, s.name, units, remote_stage)  # before the listing: it may add a key
    files = stage_files(ctx.out, folder if remote_stage else None, s.name)
    missing = [o for o in s.outputs(ctx) if not has_output(files, o)]
    if missing:
        raise StageFailed(s.name, 1, logfile, [f"declared outputs missing: {missing}"])
    manifest = {
        "stage": s.name,
        "key": plan.key,
        "parts": plan.parts,
        "reads": stage_reads(s, ctx),
        "commands": out_relative(commands, ctx.out, ctx.remote),
        "outputs": [[rel, size] for rel, size in files.items()],
        "seconds": round(time.time() - t0, 2),
        "cpu_seconds": round(cpu, 2),
        "peak_rss_mb": round(peak_kb / 1024, 1),
        "resumed_shards": resumed,
        "engine": _engine_of(commands),
        "finished": time.time(),
    }
    if folder is not None and not remote_stage:
        folder.push(s.name)  # the folder first: the manifest is what says the stage is done
    write_json(manifest_path(ctx.out, s.name), manifest)
    progress_path(ctx.out, s.name).unlink(missing_ok=True)
    if folder is not None:
        folder.push_file(manifest_path(ctx.out, s.name))
        folder.delete_file(progress_path(ctx.out, s.name))
    return manifest


def _run_commands(
    ctx: Context,
    stage: str,
    commands: list[list[str]],
    units: Units | None,
    logfile: Path,
    attempt: int,
    fork: bool,
) -> tuple[int, float]:
    """The stage's commands one after the other (those an earlier attempt finished skipped);
    the peak RSS (KB) and CPU seconds they used."""
    peak_kb, cpu = 0, 0.0
    with open(logfile, "a", encoding="utf-8") as logf:
        logf.write(f"# {stage}: attempt {attempt}, started {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        for cmd in commands:
            shown = out_relative(cmd, ctx.out, ctx.remote)
            if units and units.finished(cmd, shown):
                logf.write(f"$ (finished by an earlier attempt, kept) {' '.join(cmd)}\n")
                continue
            logf.write(f"$ {' '.join(cmd)}\n")
            logf.flush()
            r = _run_command(cmd, logf, logfile, fork)
            peak_kb = max(peak_kb, r.peak_rss_kb)
            cpu += r.cpu_seconds
            if r.rc != 0:
                tail = logfile.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
                raise StageFailed(stage, r.rc, logfile, tail)
            if units:
                units.done(cmd, shown)
    return peak_kb, cpu


def _begin_remote(ctx: Context, s: Stage, keep: bool, remote_stage: bool) -> None:
    """A stage of a remote run folder starts: its old manifest goes (a runner killed now must
    not find the stage done), its remote folder too unless it resumes, and a stage on this
    machine gets local copies of what it reads (and of its own finished shards)."""
    folder = ctx.folder
    folder.delete_file(manifest_path(ctx.out, s.name))
    folder.push_file(progress_path(ctx.out, s.name))
    if not keep:
        folder.clear(s.name)
    if remote_stage:
        return
    for name in closure(s.deps(ctx), {t.name: t.deps(ctx) for t in STAGES if ctx.on.get(t.name)}):
        folder.fetch(name)
    if keep:
        folder.fetch(s.name)


def _recorder(ctx: Context, stage: str, remote_stage: bool):
    """What a resumable stage of a remote run does when a command finished: the command's output
    (already remote on the engine) and the record, uploaded before anything can kill the run."""
    if ctx.folder is None:
        return None

    def record(target: Path | str) -> None:
        if not remote_stage and isinstance(target, Path) and target.exists():
            rel = target.relative_to(ctx.out).as_posix()
            files = [target] if target.is_file() else [p for p in target.rglob("*") if p.is_file()]
            for p in files:
                ctx.folder.upload(p, p.relative_to(ctx.out).as_posix())
            log.debug("uploaded %s", rel)
        ctx.folder.push_file(units_path(ctx.out, stage))

    return record


def _push_quietly(ctx: Context, stage: str, remote_stage: bool) -> None:
    try:
        if not remote_stage:
            ctx.folder.push(stage)
        ctx.folder.push_state()
    except Exception as e:  # noqa: BLE001 - the stage's own failure is the one to report
        log.warning("%s: could not upload what the stage left to %s: %s", stage, ctx.remote, e)


def _resumed(ctx: Context, stage: str, units: Units | None, remote_stage: bool) -> int:
    """Shards an earlier attempt finished that this one kept: commands (``units``) or, for a
    stage whose command resumes by itself, what its stats.json counts. A stage resumed by
    command has the count written into its top-level stats.json too (its last command, which
    sums the others, cannot know which of them an earlier attempt ran)."""
    path = ctx.folder.remote(f"{stage}/stats.json") if remote_stage else ctx.d(stage) / "stats.json"
    try:
        if remote_stage:
            with filesystems.open_read(str(path)) as f:
                doc = json.loads(f.read())
        else:
            doc = read_json(path)
    except (InputError, OSError, ValueError):
        doc = None
    if not isinstance(doc, dict):
        return units.resumed if units is not None else 0
    if units is None:
        try:
            return int(doc.get("resumed_shards", 0))
        except (TypeError, ValueError):
            return 0
    if doc.get("resumed_shards") != units.resumed:
        doc["resumed_shards"] = units.resumed
        data = json.dumps(doc, indent=1).encode("utf-8")
        if remote_stage:
            with filesystems.create(str(path)) as f:
                f.write(data)
        else:
            part = path.with_name(path.name + ".part")
            part.write_bytes(data)
            os.replace(part, path)
    return units.resumed


def _engine_of(commands: list[list[str]]) -> str:
    """Where a stage ran: the Beam runner its commands name (``--runner``), else ``local`` (the
    runner's own machine, Beam's local runner included)."""
    for cmd in commands:
        for i, arg in enumerate(cmd):
            if arg.startswith("--runner="):
                return arg.split("=", 1)[1]
            if arg == "--runner" and i + 1 < len(cmd):
                return cmd[i + 1]
    return "local"


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
