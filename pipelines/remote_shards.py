"""Shard resume (:mod:`labse_common.resume_shards`) for an output on object storage.

The same records as the local :class:`~labse_common.resume_shards.Shards`, through Beam's
filesystems: ``OUTPUT/_partial/_RESUME.json`` (the job's fingerprint; another one empties the
folder), ``OUTPUT/_partial/<shard>/`` (the shard's files, written by the Beam workers) and
``OUTPUT/_partial/_done/<shard>.json`` (its files, sizes and SHA-256, written last: an object
is whole or absent, so a shard is finished or not). A shard that fails the check is deleted and
done again. ``_partial`` sits beside the job's temporary folder, not in it (that one is new for
every job), and goes once the output is committed.
"""

from __future__ import annotations

import hashlib
import json
import logging

from labse_common import claim_lock, filesystems
from labse_common.claim_lock import CLAIM, TMP_PREFIX
from labse_common.filesystems import join
from labse_common.resume_shards import PARTIAL, kill_point

log = logging.getLogger(__name__)

_FINGERPRINT = "_RESUME.json"
_DONE = "_done"


def _files(prefix: str) -> list[str]:
    return sorted(filesystems.match(prefix.rstrip("/") + "/**"))


def _read(path: str) -> bytes:
    with filesystems.open_read(path) as f:
        return f.read()


def _write(path: str, data: bytes) -> None:
    with filesystems.create(path) as f:
        f.write(data)


def _digest(path: str) -> tuple[int, str]:
    h, size = hashlib.sha256(), 0
    with filesystems.open_read(path) as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
            size += len(block)
    return size, h.hexdigest()


def partial_of(output: str) -> str:
    return join(output, PARTIAL)


def remove_partial(output: str) -> None:
    """Delete what is left of ``OUTPUT/_partial`` (once the output is committed)."""
    left = _files(partial_of(output))
    if left:
        filesystems.delete(left)


def remove_stale_tmp(output: str, mine: str) -> None:
    """Delete the temporary folders killed jobs left in ``output`` (this job holds its claim,
    and an interrupted commit was finished when it took it), as a local claim does."""
    prefix = output.rstrip("/") + "/"
    mine = mine.rstrip("/") + "/"
    stale = [
        p
        for p in _files(output)
        if p[len(prefix) :].startswith(TMP_PREFIX) and not p.startswith(mine)
    ]
    if stale:
        log.info("%s: removing %d object(s) left by jobs that were stopped", output, len(stale))
        filesystems.delete(stale)


def take_stale_claim(output: str) -> None:
    """A claim a killed job of this host left on ``output`` is removed (the rule the runner
    applies to a remote run folder's claim); a live job's, or another host's, stays."""
    path = join(output, CLAIM)
    if not filesystems.exists(path):
        return
    text = _read(path).decode("utf-8", "replace").strip()
    if not claim_lock.held_elsewhere(text):
        log.warning("%s: taking over the claim of a job that is gone (%s)", output, text)
        filesystems.delete([path])


class RemoteShards:
    """The shards of one resumable job under the remote ``partial`` folder; the interface of
    :class:`labse_common.resume_shards.Shards`."""

    def __init__(self, partial: str, stage: str) -> None:
        self.partial = partial.rstrip("/")
        self.stage = stage
        self.resumed = 0
        self.written = 0

    def prepare(self, fingerprint: str) -> None:
        """Keep the folder when an earlier attempt had the same ``fingerprint``, else empty it."""
        marker = join(self.partial, _FINGERPRINT)
        try:
            same = json.loads(_read(marker)).get("fingerprint") == fingerprint
        except Exception:  # noqa: BLE001 - absent (Beam's BeamIOError), unreadable, not JSON
            same = False
        if same:
            return
        old = _files(self.partial)
        if old:
            log.info("%s: an earlier attempt with other inputs or settings; starting afresh", self)
            filesystems.delete(old)
        _write(marker, json.dumps({"fingerprint": fingerprint}).encode("utf-8"))

    def __str__(self) -> str:
        return self.partial

    def _record(self, name: str) -> str:
        return join(self.partial, _DONE, f"{name}.json")

    def path(self, name: str) -> str:
        return join(self.partial, name)

    def finished(self, name: str) -> bool:
        """Whether an earlier attempt finished shard ``name`` and its files are intact."""
        files = None
        try:
            files = json.loads(_read(self._record(name)))["files"]
        except Exception:  # noqa: BLE001 - absent (FileNotFoundError), unreadable, not a record
            pass
        if files is None:  # forgotten outside the handler: a later error is not chained to it
            self._forget(name)
            return False
        present = set(_files(self.path(name)))
        for rel, size, digest in files:
            p = join(self.partial, rel)
            if p not in present or _digest(p) != (size, digest):
                log.warning("shard %s of %s is damaged (%s): doing it again", name, self.stage, rel)
                self._forget(name)
                return False
        self.resumed += 1
        log.info("shard %s of %s: finished by an earlier attempt, kept", name, self.stage)
        return True

    def _forget(self, name: str) -> None:
        gone = [p for p in (self._record(name),) if filesystems.exists(p)]
        gone += _files(self.path(name))
        if gone:
            filesystems.delete(gone)

    def begin(self, name: str) -> str:
        self._forget(name)
        return self.path(name)

    def end(self, name: str) -> None:
        """Record shard ``name`` as finished: its files, sizes and hashes (the record last)."""
        prefix = self.partial + "/"
        files = [[p[len(prefix) :], *_digest(p)] for p in _files(self.path(name))]
        _write(self._record(name), json.dumps({"files": files}).encode("utf-8"))
        self.written += 1
        kill_point(self.stage, self.written)
