"""The run folder on object storage (``--output s3://…`` or ``gs://…``).

The remote folder is the run: its manifests, ``_run.json``, the config, logs, stats, the labels
file, every stage's outputs. The runner works in a local **scratch copy** (``--scratch``, by
default a folder of the user's cache named after the URL) that is only a cache: a runner on
another machine, with an empty scratch, goes on from what the remote folder holds.

* At start the runner takes the remote claim (``_CLAIM.json``; one runner per run folder) and
  pulls the run's state (``_state/``, ``_run.json``, ``labels.tsv``): the remote copy wins.
* A stage that runs on the runner's machine reads local copies of the stages it depends on
  (fetched when the scratch lacks them or they differ from the remote listing); when it has
  finished, its folder is uploaded, then its manifest (the manifest is what says "done", so a
  runner killed mid-upload reruns the stage).
* A stage on the Beam engine reads and writes the remote folder itself (its workers see no disk
  of the runner's: :meth:`pipelines.run.declare.Stage.command_lines`); its manifest lists the
  remote files.
* A stage that stops early (killed, failed, waiting for labels) has what it finished uploaded
  too, so a rerun anywhere resumes from the finished shards.

Object stores have no rename: an upload is per file, and what a folder "is" is its manifest's
listing (names and sizes), checked before a stage is skipped.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from labse_common import claim_lock, filesystems
from labse_common.errors import UsageError
from labse_common.filesystems import is_remote
from labse_common.output_dir import CLAIM, OutputBusy, new_job_id

log = logging.getLogger("pipelines.run")

STATE_FILES = ("_run.json", "_config.yaml")
LABELS = "labels.tsv"
# Never uploaded: a job's claim (its host and pid mean nothing elsewhere), its temporary folders.
_PRIVATE = (CLAIM, "_tmp-", "forkserver.log")
_CHUNK = 8 << 20


def default_scratch(url: str) -> Path:
    """``$XDG_CACHE_HOME/labse/runs/<bucket-path>-<hash>``: one scratch copy per run folder URL."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    tail = url.split("://", 1)[1].strip("/").replace("/", "_")[-60:]
    return cache / "labse" / "runs" / f"{tail}-{hashlib.sha256(url.encode()).hexdigest()[:10]}"


def _private(rel: str) -> bool:
    return any(part.startswith(_PRIVATE) for part in rel.split("/"))


def _local_files(d: Path) -> dict[str, int]:
    if not d.is_dir():
        return {}
    return {
        p.relative_to(d).as_posix(): p.stat().st_size
        for p in sorted(d.rglob("*"))
        if p.is_file() and not _private(p.relative_to(d).as_posix())
    }


class RunFolder:
    """A run folder on object storage and its local scratch copy."""

    def __init__(self, url: str, scratch: Path) -> None:
        if not is_remote(url):
            raise UsageError(f"--output {url}: not an object-store URL")
        self.url = url.rstrip("/")
        self.scratch = scratch
        self.job_id = new_job_id()
        self._claimed = False
        self._labels_sha: str | None = None

    # -- paths -----------------------------------------------------------------------------------
    def remote(self, rel: str) -> str:
        return f"{self.url}/{rel}" if rel else self.url

    def files(self, rel: str) -> dict[str, int]:
        """Every object under ``rel/`` of the remote folder: path below it -> size."""
        return {k: size for k, (size, _) in self._objects(rel).items()}

    def _objects(self, rel: str) -> dict[str, tuple[int, float]]:
        """path below ``rel/`` -> (size, last modified, in seconds)."""
        prefix = self.remote(rel).rstrip("/") + "/"
        fs = filesystems.filesystem(prefix)
        try:
            found = fs.match([prefix + "**"])[0].metadata_list
        except OSError:  # Beam raises when nothing matches
            return {}
        out = {m.path[len(prefix) :]: (m.size_in_bytes, m.last_updated_in_seconds) for m in found}
        return {k: v for k, v in sorted(out.items()) if k and not _private(k)}

    def _stamp(self, stage: str, objects: dict[str, tuple[int, float]]) -> None:
        """Give the scratch copy's files the remote objects' times: a job that fingerprints its
        inputs by name, size and time (labse_common.resume_shards) then sees the same inputs on
        every machine, and resumes there from the shards a killed attempt uploaded."""
        for rel, (size, when) in objects.items():
            p = self.scratch / stage / rel
            if when and p.is_file() and p.stat().st_size == size:
                os.utime(p, (when, when))

    # -- the claim ----------------------------------------------------------------------------
    def claim(self) -> None:
        """One runner per remote run folder. A claim left by a runner of this host that is gone
        is taken over (the same rule as a local run folder's); one of a live runner, or of
        another host, stops this one with the path to delete if that runner is dead."""
        path = self.remote(CLAIM)
        if filesystems.exists(path):
            text = self._read(path).decode("utf-8", "replace").strip()
            if claim_lock.held_elsewhere(text):
                raise OutputBusy(
                    f"--output {self.url} is being written by another runner ({text}); wait for "
                    f"it, or if no runner is running delete {path}"
                )
            log.warning("%s: taking over the claim of a runner that is gone (%s)", self.url, text)
        info = claim_lock.claim_info(self.job_id, "run folder")
        self._write(path, json.dumps(info).encode("utf-8"))
        back = self._read(path).decode("utf-8", "replace")
        if claim_lock.claim_field(back, "job_id") != self.job_id:
            raise OutputBusy(f"--output {self.url} was claimed by another runner at once ({back})")
        self._claimed = True

    def release(self) -> None:
        if self._claimed:
            self._claimed = False
            try:
                filesystems.delete([self.remote(CLAIM)])
            except OSError as e:
                log.warning("%s: could not remove the run folder's claim: %s", self.url, e)

    # -- transfers ----------------------------------------------------------------------------
    def _read(self, path: str) -> bytes:
        with filesystems.open_read(path) as f:
            return f.read()

    def _write(self, path: str, data: bytes) -> None:
        with filesystems.create(path) as f:
            f.write(data)

    def upload(self, local: Path, rel: str) -> None:
        with open(local, "rb") as src, filesystems.create(self.remote(rel)) as dst:
            for block in iter(lambda: src.read(_CHUNK), b""):
                dst.write(block)

    def download(self, rel: str, local: Path) -> None:
        local.parent.mkdir(parents=True, exist_ok=True)
        part = local.with_name(local.name + ".part")
        with filesystems.open_read(self.remote(rel)) as src, open(part, "wb") as dst:
            for block in iter(lambda: src.read(_CHUNK), b""):
                dst.write(block)
        os.replace(part, local)

    # -- the run's state ----------------------------------------------------------------------
    def pull_state(self) -> None:
        """The run's state from the remote folder into the scratch copy: the remote one wins
        (a scratch left by an earlier runner may be behind it, or ahead of what was uploaded)."""
        self.scratch.mkdir(parents=True, exist_ok=True)
        state = self.scratch / "_state"
        shutil.rmtree(state, ignore_errors=True)
        for rel in self.files("_state"):
            self.download(f"_state/{rel}", state / rel)
        self._labels_sha = None  # a local labels file the remote lacks is uploaded
        for name in (*STATE_FILES, LABELS):
            if filesystems.exists(self.remote(name)):
                self.download(name, self.scratch / name)
                if name == LABELS:
                    self._labels_sha = _sha(self.scratch / LABELS)
            elif name != LABELS:  # a person's labels are never deleted
                (self.scratch / name).unlink(missing_ok=True)

    def push_state(self) -> None:
        """``_state/``, ``_run.json``, the config, the logs and (when it changed here) the
        labels file, to the remote folder."""
        for sub in ("_state", "_logs"):
            for rel in _local_files(self.scratch / sub):
                self.upload(self.scratch / sub / rel, f"{sub}/{rel}")
        for name in STATE_FILES:
            if (self.scratch / name).is_file():
                self.upload(self.scratch / name, name)
        labels = self.scratch / LABELS
        if labels.is_file() and _sha(labels) != self._labels_sha:
            self.upload(labels, LABELS)
            self._labels_sha = _sha(labels)

    def push_file(self, local: Path) -> None:
        """One file of the scratch copy (a manifest, a record of finished commands)."""
        self.upload(local, local.relative_to(self.scratch).as_posix())

    def delete_file(self, local: Path) -> None:
        """Remove the remote copy of one file of the scratch copy (a manifest that is no longer
        true)."""
        path = self.remote(local.relative_to(self.scratch).as_posix())
        if filesystems.exists(path):
            filesystems.delete([path])

    # -- stage folders ------------------------------------------------------------------------
    def fetch(self, stage: str) -> int:
        """Make the scratch copy of ``stage``'s folder hold exactly the remote files (missing or
        differing ones downloaded, others removed); the number of files downloaded."""
        objects = self._objects(stage)
        remote = {k: size for k, (size, _) in objects.items()}
        d = self.scratch / stage
        have = _local_files(d)
        for rel in set(have) - set(remote):
            (d / rel).unlink()
        todo = [r for r, size in remote.items() if have.get(r) != size]
        for rel in todo:
            self.download(f"{stage}/{rel}", d / rel)
        self._stamp(stage, objects)
        if todo:
            log.info("%s: %d file(s) of %s fetched from %s", stage, len(todo), stage, self.url)
        return len(todo)

    def push(self, stage: str) -> int:
        """Upload ``stage``'s scratch folder and remove remote files it no longer has; the
        number of files uploaded."""
        d = self.scratch / stage
        local = _local_files(d)
        stale = [self.remote(f"{stage}/{r}") for r in self.files(stage) if r not in local]
        filesystems.delete(stale)
        for rel in local:
            self.upload(d / rel, f"{stage}/{rel}")
        self._stamp(stage, self._objects(stage))
        return len(local)

    def clear(self, stage: str) -> None:
        """Remove every remote file of ``stage``'s folder (a stage that reruns from scratch)."""
        filesystems.delete([self.remote(f"{stage}/{r}") for r in self.files(stage)])


def _sha(path: Path) -> str | None:
    if not path.is_file():
        return None
    return hashlib.sha256(path.read_bytes()).hexdigest()


def stage_files(out: Path, folder: RunFolder | None, stage: str) -> dict[str, int]:
    """What ``stage``'s folder holds, path -> size: the remote listing when the run folder is on
    object storage, else the local folder's."""
    if folder is not None:
        return folder.files(stage)
    return _local_files(out / stage)


def has_output(files: dict[str, int], rel: str) -> bool:
    """Whether a declared output (a file or a folder) is among ``files``."""
    rel = rel.rstrip("/")
    return rel in files or any(f.startswith(rel + "/") for f in files)


def closure(names: Iterable[str], deps: dict[str, list[str]]) -> list[str]:
    """``names`` and every stage they read, directly or not, in ``deps`` order."""
    seen: list[str] = []
    todo = list(names)
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.append(n)
            todo += deps.get(n, [])
    return [n for n in deps if n in seen]
