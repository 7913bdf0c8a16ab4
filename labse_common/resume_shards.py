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
  (written aside, then renamed: a record is whole or absent). Only then does it count as
  finished.

The commit moves the shards into place as any output's commit does, ``_partial/`` with them.
``resumed`` counts the shards taken over; commands write it into their ``stats.json`` as
``resumed_shards``.

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

from labse_common.claim_lock import PARTIAL

log = logging.getLogger(__name__)

__all__ = ["PARTIAL", "Shards", "fingerprint", "kill_point", "prepare", "sha256"]
_FINGERPRINT = "_RESUME.json"
_DONE = "_done"
KILL_ENV = "LABSE_KILL_AFTER"
#: Bookkeeping inside ``_partial/`` that is not part of the output.
BOOKKEEPING = (_FINGERPRINT, _DONE)


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _write_atomic(path: str, doc: dict) -> None:
    part = f"{path}.part"
    with open(part, "w", encoding="utf-8") as f:
        json.dump(doc, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(part, path)


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


def prepare(partial: str, fingerprint: str) -> int:
    """Make ``partial`` the place of a job with ``fingerprint``: kept when an earlier attempt
    had the same one, emptied otherwise. Returns how many shards it holds records of."""
    marker = os.path.join(partial, _FINGERPRINT)
    try:
        with open(marker, encoding="utf-8") as f:
            same = json.load(f).get("fingerprint") == fingerprint
    except (OSError, ValueError, AttributeError):
        same = False
    if not same and os.path.isdir(partial):
        log.info("%s: an earlier attempt with other inputs or settings; starting afresh", partial)
        shutil.rmtree(partial)
    os.makedirs(os.path.join(partial, _DONE), exist_ok=True)
    if not same:
        _write_atomic(marker, {"fingerprint": fingerprint})
    return len([n for n in os.listdir(os.path.join(partial, _DONE)) if n.endswith(".json")])


class Shards:
    """The shards of one resumable job, written under ``partial``; see the module docstring."""

    def __init__(self, partial: str, stage: str) -> None:
        self.partial = partial
        self.stage = stage
        self.resumed = 0
        self.written = 0

    def _record(self, name: str) -> str:
        return os.path.join(self.partial, _DONE, f"{name}.json")

    def any_finished(self) -> bool:
        """Whether any shard is recorded as finished (else the partial folder holds nothing
        worth keeping)."""
        done = os.path.join(self.partial, _DONE)
        return os.path.isdir(done) and any(n.endswith(".json") for n in os.listdir(done))

    def path(self, name: str) -> str:
        return os.path.join(self.partial, name)

    def finished(self, name: str) -> bool:
        """Whether an earlier attempt finished shard ``name`` and its files are intact (then it
        counts as resumed); a shard that fails the check is removed."""
        try:
            with open(self._record(name), encoding="utf-8") as f:
                files = json.load(f)["files"]
        except (OSError, ValueError, KeyError, TypeError):
            self._forget(name)
            return False
        for rel, size, digest in files:
            p = os.path.join(self.partial, rel)
            if not os.path.isfile(p) or os.path.getsize(p) != size or sha256(p) != digest:
                log.warning("shard %s of %s is damaged (%s): doing it again", name, self.stage, rel)
                self._forget(name)
                return False
        self.resumed += 1
        log.info("shard %s of %s: finished by an earlier attempt, kept", name, self.stage)
        return True

    def _forget(self, name: str) -> None:
        for p in (self._record(name), self.path(name)):
            if os.path.isdir(p):
                shutil.rmtree(p)
            elif os.path.lexists(p):
                os.unlink(p)

    def begin(self, name: str) -> str:
        """An empty place for shard ``name`` (a folder); what an earlier attempt left is gone."""
        self._forget(name)
        return self.path(name)

    def end(self, name: str) -> None:
        """Record shard ``name`` as finished: its files, sizes and hashes."""
        root = self.path(name)
        paths = [root] if os.path.isfile(root) else []
        for d, _, names in os.walk(root):
            paths += [os.path.join(d, n) for n in sorted(names)]
        files = [[os.path.relpath(p, self.partial), os.path.getsize(p), sha256(p)] for p in paths]
        _write_atomic(self._record(name), {"files": files})
        self.written += 1
        kill_point(self.stage, self.written)


def kill_point(stage: str, n: int) -> None:
    """SIGKILL this process when ``LABSE_KILL_AFTER`` is ``<stage>:<n>`` (module docstring)."""
    spec = os.environ.get(KILL_ENV, "")
    want, _, count = spec.partition(":")
    if want == stage and count.isdigit() and int(count) == n:
        log.warning("%s=%s: killing this process after shard %d", KILL_ENV, spec, n)
        for h in logging.getLogger().handlers:
            h.flush()
        os.kill(os.getpid(), signal.SIGKILL)
