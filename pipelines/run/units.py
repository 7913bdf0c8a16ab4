"""A stage of several commands resumes by command: the finished ones are kept across a kill.

A resumable stage (``resumable=True`` in its declaration) keeps its folder when it is rerun with
the same key (:mod:`pipelines.run.execute`). When it has several commands (one per language pair,
say), each command that succeeds is recorded in ``_state/<stage>.units.json``: its command line
and every file under its ``--output``, with size and SHA-256. A rerun skips a command whose
record matches its command line and whose files are intact (counted as ``resumed_shards`` in the
stage's manifest and in ``_run.json``); any other command's output is deleted and the command
runs again, so a half-written output is never taken over. ``LABSE_KILL_AFTER=<stage>:<n>``
(tests and checks only) kills the runner with SIGKILL right after the n-th command is recorded.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from labse_common.resume_shards import kill_point, sha256
from pipelines.run.declare import STATE, Command


def units_path(out: Path, stage: str) -> Path:
    return out / STATE / f"{stage}.units.json"


def output_of(cmd: Command, stage_dir: Path) -> Path | None:
    """The ``--output`` a command writes, when it lies inside the stage's folder."""
    args = list(map(str, cmd))
    if "--output" not in args[:-1]:
        return None
    path = Path(args[args.index("--output") + 1])
    return path if path.resolve().is_relative_to(stage_dir.resolve()) else None


def _listing(path: Path) -> list[list]:
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return [[str(p.relative_to(path.parent)), p.stat().st_size, sha256(str(p))] for p in files]


class Units:
    """The finished commands of one stage run."""

    def __init__(self, out: Path, stage: str, stage_dir: Path, keep: bool) -> None:
        self.file = units_path(out, stage)
        self.stage = stage
        self.dir = stage_dir
        self.resumed = 0
        self.records: list[dict] = []
        if keep and self.file.exists():
            try:
                self.records = json.loads(self.file.read_text(encoding="utf-8"))
            except ValueError:
                self.records = []
        self._write()

    def _write(self) -> None:
        part = self.file.with_name(self.file.name + ".tmp")
        part.write_text(json.dumps(self.records), encoding="utf-8")
        part.replace(self.file)

    def finished(self, cmd: Command, shown: list[str]) -> bool:
        """Whether an earlier attempt finished ``cmd`` (``shown``: as its record spells it) and
        its output is intact; otherwise its output is removed, ready to run again."""
        target = output_of(cmd, self.dir)
        if target is None:
            return False
        rec = next((r for r in self.records if r["cmd"] == shown), None)
        if rec is not None and target.exists() and _listing(target) == rec["files"]:
            self.resumed += 1
            return True
        self.records = [r for r in self.records if r["cmd"] != shown]
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
        return False

    def done(self, cmd: Command, shown: list[str]) -> None:
        target = output_of(cmd, self.dir)
        if target is None:
            return
        self.records.append({"cmd": shown, "files": _listing(target)})
        self._write()
        kill_point(self.stage, len(self.records))
