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
from collections.abc import Callable
from pathlib import Path

from labse_common import filesystems
from labse_common.filesystems import is_remote
from labse_common.resume_shards import kill_point, sha256
from pipelines.run.declare import STATE, Command


def units_path(out: Path, stage: str) -> Path:
    return out / STATE / f"{stage}.units.json"


def output_of(cmd: Command, stage_dir: Path | str) -> Path | str | None:
    """The ``--output`` a command writes, when it lies inside the stage's folder (on object
    storage for a stage on the engine of a remote run folder: a URL)."""
    args = list(map(str, cmd))
    if "--output" not in args[:-1]:
        return None
    out = args[args.index("--output") + 1]
    if is_remote(str(stage_dir)):
        return out if out.startswith(str(stage_dir).rstrip("/") + "/") else None
    path = Path(out)
    return path if path.resolve().is_relative_to(Path(stage_dir).resolve()) else None


def _remote_files(target: str) -> list[tuple[str, int]]:
    prefix = target.rstrip("/") + "/"
    try:
        found = filesystems.filesystem(prefix).match([prefix + "**"])[0].metadata_list
    except OSError:  # nothing there
        return []
    return sorted((m.path, m.size_in_bytes) for m in found)


def _listing(path: Path | str) -> list[list]:
    """Each file of a command's output: name, size and SHA-256 (on object storage, where a
    committed output is whole by construction, name and size)."""
    if isinstance(path, str):
        parent = path.rstrip("/").rsplit("/", 1)[0] + "/"
        return [[p[len(parent) :], size, None] for p, size in _remote_files(path)]
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return [[str(p.relative_to(path.parent)), p.stat().st_size, sha256(str(p))] for p in files]


def _remove(target: Path | str) -> None:
    if isinstance(target, str):
        filesystems.delete([p for p, _ in _remote_files(target)])
    elif target.is_dir():
        shutil.rmtree(target)
    elif target.exists():
        target.unlink()


class Units:
    """The finished commands of one stage run."""

    def __init__(
        self,
        out: Path,
        stage: str,
        stage_dir: Path | str,
        keep: bool,
        on_record: Callable[[Path | str], None] | None = None,
    ) -> None:
        self.file = units_path(out, stage)
        self.stage = stage
        self.dir = stage_dir
        # Called once a finished command is recorded, before the kill point: the remote run
        # folder gets the record and the command's output (pipelines.run.run_folder).
        self.on_record = on_record
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
        listing = _listing(target) if rec is not None else []
        if rec is not None and listing and listing == rec["files"]:
            self.resumed += 1
            return True
        self.records = [r for r in self.records if r["cmd"] != shown]
        _remove(target)
        return False

    def done(self, cmd: Command, shown: list[str]) -> None:
        target = output_of(cmd, self.dir)
        if target is None:
            return
        self.records.append({"cmd": shown, "files": _listing(target)})
        self._write()
        if self.on_record is not None:
            self.on_record(target)
        kill_point(self.stage, len(self.records))
