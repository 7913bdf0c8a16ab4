"""Shards a killed job finished, kept and verified, so its rerun does only the rest.

A job claimed with ``claim_output(..., resume=FINGERPRINT)`` writes into ``OUTPUT/_partial/``
instead of a per-job temporary folder. That folder outlives a job that is killed or fails, and
the next job with the same fingerprint (the same inputs and settings: whatever makes its output
what it is) continues in it; a different fingerprint empties it first. Inside it, a job writes
each shard (a unit of its output: a language's store, a pair's file) through :class:`Shards`:

* ``shards.finished(name)``: the shard was finished by an earlier attempt and every file it
  recorded is there with its size and SHA-256; a shard that fails the check (half-written when
  the job was killed, or damaged since) is deleted and done again;
* ``shards.begin(name)``: an empty folder for the shard (whatever an earlier attempt left there
  is deleted first);
* ``shards.end(name)``: records the shard's files, sizes and hashes in ``_done/<name>.json``
  (written aside, then renamed; on object storage an object is whole or absent: a record is
  whole or absent either way). Only then does it count as finished.

The commit moves the shards into place as any output's commit does, ``_partial/`` with them.
``resumed`` counts the shards taken over; commands write it into their ``stats.json`` as
``resumed_shards``.

**Local or remote**: ``partial`` may be a local folder or an ``s3://``/``gs://`` prefix; the same
records are read and written through :mod:`labse_common.filesystems` for the latter (a Beam job's
output on object storage keeps its ``_partial/`` beside its temporary folder, which is new for
every job: :func:`partial_of`).

**Fault injection** (tests and checks only): ``LABSE_KILL_AFTER=<stage>:<n>`` makes the process
whose stage is ``<stage>`` kill itself with SIGKILL right after its n-th shard is recorded.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import signal

from labse_common import filesystems
from labse_common.claim_lock import PARTIAL
from labse_common.filesystems import is_remote

log = logging.getLogger(__name__)

__all__ = [
    "PARTIAL",
    "Shards",
    "fingerprint",
    "kill_point",
    "partial_of",
    "prepare",
    "sha256",
]
_FINGERPRINT = "_RESUME.json"
_DONE = "_done"
KILL_ENV = "LABSE_KILL_AFTER"
#: Bookkeeping inside ``_partial/`` that is not part of the output.
BOOKKEEPING = (_FINGERPRINT, _DONE)


def sha256(path: str) -> str:
    return _digest(path)[1]


def _digest(path: str) -> tuple[int, str]:
    """``(size, SHA-256)`` of a local or remote file."""
    h, size = hashlib.sha256(), 0
    opener = filesystems.open_read if is_remote(path) else lambda p: open(p, "rb")
    with opener(path) as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
            size += len(block)
    return size, h.hexdigest()


# -- the filesystem layer: one call per operation, local paths through the OS ----------------
def _read(path: str) -> bytes:
    if is_remote(path):
        with filesystems.open_read(path) as f:
            return f.read()
    with open(path, "rb") as f:
        return f.read()


def _write_atomic(path: str, doc: dict) -> None:
    data = json.dumps(doc).encode("utf-8")
    if is_remote(path):  # an object is whole or absent
        with filesystems.create(path) as f:
            f.write(data)
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    part = f"{path}.part"
    with open(part, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(part, path)


def _files(top: str) -> list[str]:
    """Every file at or under ``top`` (a file itself, or a folder / prefix), sorted."""
    if is_remote(top):
        top = top.rstrip("/")
        found = filesystems.match(top + "/**")
        return sorted(set(found) | ({top} if filesystems.exists(top) else set()))
    if os.path.isfile(top):
        return [top]
    return sorted(os.path.join(d, n) for d, _, names in os.walk(top) for n in names)


def _remove(top: str) -> None:
    """``top`` and everything under it gone (absent is fine)."""
    if is_remote(top):
        filesystems.delete(_files(top))
    elif os.path.isdir(top) and not os.path.islink(top):
        shutil.rmtree(top)
    elif os.path.lexists(top):
        os.unlink(top)


# Set by the stage runner for its stages: the run folder, spelled ``$OUT`` in fingerprints (as in
# its manifests), so a run folder's scratch copy on another machine resumes the same shards.
RUN_FOLDER_ENV = "LABSE_RUN_FOLDER"


def fingerprint(paths: list, settings: dict) -> str:
    """What makes a job's output what it is: every file under ``paths`` (its name, size and
    modification time: a changed input makes new shards) and the ``settings``."""
    seen = []
    for top in map(os.fspath, paths):
        if os.path.isfile(top):
            walk = [(os.path.dirname(top), [], [os.path.basename(top)])]
        else:
            walk = os.walk(top)
        for d, dirs, names in walk:
            dirs.sort()
            for n in sorted(names):
                st = os.stat(os.path.join(d, n))
                seen.append([os.path.join(d, n), st.st_size, st.st_mtime_ns])
    doc = json.dumps({"files": seen, "settings": settings}, sort_keys=True, default=str)
    run = os.environ.get(RUN_FOLDER_ENV, "").rstrip("/")
    if run:
        doc = doc.replace(run + "/", "$OUT/")
    return hashlib.sha256(doc.encode("utf-8")).hexdigest()


def partial_of(output: str) -> str:
    """``OUTPUT/_partial``: where a resumable job's shards are kept across attempts."""
    return filesystems.join(output, PARTIAL)


def prepare(partial: str, fingerprint: str) -> int:
    """Make ``partial`` the place of a job with ``fingerprint`` (:meth:`Shards.prepare`)."""
    return Shards(partial, "").prepare(fingerprint)


class Shards:
    """The shards of one resumable job, written under ``partial`` (a local folder or an
    object-store prefix); see the module docstring."""

    def __init__(self, partial: str, stage: str) -> None:
        self.partial = os.fspath(partial).rstrip("/") or "/"
        self.stage = stage
        self.resumed = 0
        self.written = 0

    def __str__(self) -> str:
        return self.partial

    def prepare(self, fingerprint: str) -> int:
        """Keep the folder when an earlier attempt had the same ``fingerprint``, else empty it.
        Returns how many shards it holds records of."""
        marker = filesystems.join(self.partial, _FINGERPRINT)
        try:
            same = json.loads(_read(marker)).get("fingerprint") == fingerprint
        except Exception:  # noqa: BLE001 - absent (OSError, Beam's BeamIOError), not JSON
            same = False
        if not same:
            if _files(self.partial):
                log.info("%s: an earlier attempt with other inputs or settings; afresh", self)
            _remove(self.partial)
            _write_atomic(marker, {"fingerprint": fingerprint})
        if not is_remote(self.partial):
            os.makedirs(os.path.join(self.partial, _DONE), exist_ok=True)
        return len(self._records())

    def _records(self) -> list[str]:
        return [p for p in _files(filesystems.join(self.partial, _DONE)) if p.endswith(".json")]

    def _record(self, name: str) -> str:
        return filesystems.join(self.partial, _DONE, f"{name}.json")

    def any_finished(self) -> bool:
        """Whether any shard is recorded as finished (else the partial folder holds nothing
        worth keeping)."""
        return bool(self._records())

    def path(self, name: str) -> str:
        return filesystems.join(self.partial, name)

    def _rel(self, path: str) -> str:
        return path[len(self.partial) + 1 :].replace(os.sep, "/")

    def finished(self, name: str) -> bool:
        """Whether an earlier attempt finished shard ``name`` and its files are intact (then it
        counts as resumed); a shard that fails the check is removed."""
        files = None
        try:
            files = json.loads(_read(self._record(name)))["files"]
        except Exception:  # noqa: BLE001 - absent (OSError, BeamIOError), not a record
            pass
        if not isinstance(files, list):  # forgotten outside the handler: no chained error
            self._forget(name)
            return False
        present = {self._rel(p) for p in _files(self.path(name))}
        for rel, size, digest in files:
            if rel not in present or _digest(filesystems.join(self.partial, rel)) != (size, digest):
                log.warning("shard %s of %s is damaged (%s): doing it again", name, self.stage, rel)
                self._forget(name)
                return False
        self.resumed += 1
        log.info("shard %s of %s: finished by an earlier attempt, kept", name, self.stage)
        return True

    def _forget(self, name: str) -> None:
        _remove(self._record(name))
        _remove(self.path(name))

    def begin(self, name: str) -> str:
        """An empty place for shard ``name`` (a folder); what an earlier attempt left is gone."""
        self._forget(name)
        return self.path(name)

    def end(self, name: str) -> None:
        """Record shard ``name`` as finished: its files, sizes and hashes (the record last)."""
        files = [[self._rel(p), *_digest(p)] for p in _files(self.path(name))]
        _write_atomic(self._record(name), {"files": files})
        self.written += 1
        kill_point(self.stage, self.written)

    def remove(self) -> None:
        """Delete the whole partial folder (once the output is committed)."""
        _remove(self.partial)


def kill_point(stage: str, n: int) -> None:
    """SIGKILL this process when ``LABSE_KILL_AFTER`` is ``<stage>:<n>`` (module docstring)."""
    spec = os.environ.get(KILL_ENV, "")
    want, _, count = spec.partition(":")
    if want == stage and count.isdigit() and int(count) == n:
        log.warning("%s=%s: killing this process after shard %d", KILL_ENV, spec, n)
        for h in logging.getLogger().handlers:
            h.flush()
        os.kill(os.getpid(), signal.SIGKILL)
