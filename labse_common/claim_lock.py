"""The claim file of an output: who is writing it, held with an ``flock`` while the job runs.

:class:`labse_common.output_dir.OutputDir` is the one way to claim an output; this module holds
the part that only deals with claim files: taking one atomically (of two jobs started at once
exactly one gets it), judging whether a claim found on disk is live (its holder keeps an
``flock``; a claim without one is judged by its process) and refusing writers nested inside
another live job's output. Local folders only: an object store's claim cannot be judged live.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

CLAIM = "_CLAIM.json"
TMP_PREFIX = "_tmp-"
#: A resumable job's writing place (:mod:`labse_common.resume_shards`), kept across attempts.
PARTIAL = "_partial"
#: ``kind`` of a claim that deletes nothing (the stage runner's): writers may work inside it.
RESUMABLE = "resumable"
#: How deep below an output a commit with ``overwrite`` looks for other jobs' claims.
CLAIM_SCAN_DEPTH = 3


def new_job_id() -> str:
    return f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{os.getpid()}-{secrets.token_hex(3)}"


def claim_info(job_id: str, kind: str) -> dict:
    """What a claim file records: enough for a person (and :func:`held_elsewhere`) to tell
    whether its job still runs."""
    return {
        "job_id": job_id,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "kind": kind,
    }


def claim_field(text: str, key: str) -> object:
    try:
        info = json.loads(text)
    except ValueError:
        return None
    return info.get(key) if isinstance(info, dict) else None


def held_elsewhere(claim: str) -> bool:
    """Whether the process that wrote ``claim`` may still run: True unless the claim names a
    process of this host that is gone (or cannot be read, so nothing can be said)."""
    try:
        info = json.loads(claim)
        host, pid = info["host"], int(info["pid"])
    except (ValueError, KeyError, TypeError):
        return True
    if host != socket.gethostname():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def live_claim(path: str) -> str | None:
    """The text of the local claim file ``path`` while a live job holds it; None when there is
    none or its job is gone. A holder keeps an ``flock`` on it (taking a shared lock fails); a
    claim without a lock (an older version's) is judged by its process."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # released by the close below
            locked = False
        except BlockingIOError:
            locked = True
        text = os.read(fd, 1 << 16).decode("utf-8", "replace").strip() or "claim unreadable"
        return text if locked or held_elsewhere(text) else None
    finally:
        os.close(fd)


def read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return "claim unreadable"


def claimed_parent(output: str) -> tuple[str, str] | None:
    """``(folder, claim text)`` of a folder above the local ``output`` that another live job
    has claimed, whose commit could delete this output; None when there is none. The stage
    runner's claim (:data:`RESUMABLE`) deletes nothing, and a job may write inside its own
    temporary folder. A few ``stat`` calls: one per folder above."""
    real = os.path.realpath(output)
    parent = os.path.dirname(real)
    while True:
        claim = os.path.join(parent, CLAIM)
        text = live_claim(claim) if os.path.lexists(claim) else None
        if text is not None and claim_field(text, "kind") != RESUMABLE:
            first = os.path.relpath(real, parent).split(os.sep, 1)[0]
            # The holder's own writing places: its temporary folder, or its resumable shards.
            if first not in (f"{TMP_PREFIX}{claim_field(text, 'job_id')}", PARTIAL):
                return parent, text
        up = os.path.dirname(parent)
        if up == parent:
            return None
        parent = up


def live_claim_below(output: str, skip: set[str]) -> tuple[str, str] | None:
    """``(claim path, its text)`` of a live claim of another job inside the local ``output``
    (folders named in ``skip`` at its top are not searched; its own top claim is this job's)."""
    top = os.path.normpath(output)
    for root, dirs, files in os.walk(top):
        depth = 0 if root == top else os.path.relpath(root, top).count(os.sep) + 1
        if root == top:
            dirs[:] = [d for d in dirs if d not in skip]
        if depth >= CLAIM_SCAN_DEPTH:
            dirs[:] = []
        for f in files:
            # A folder's claim below the top, or a claimed file's ``FILE._CLAIM.json``.
            if (f == CLAIM and root != top) or f.endswith("." + CLAIM):
                path = os.path.join(root, f)
                text = live_claim(path)
                if text is not None:
                    return path, text
    return None


def take_local_claim(path: str, info: dict, busy: Callable[[str], Exception], what: str) -> int:
    """Create the local claim file ``path`` with ``info``, or take over a stale one; return its
    descriptor, which holds an ``flock`` until it is closed (the kernel drops it when the
    process ends, however it ends). Raises ``busy(claim text)`` when a live job holds it.

    A claim nobody holds the lock of, written by a process of this host that is gone, is stale:
    it is taken over (logged, naming ``what``). A claim of a live process, or of another host,
    stays busy."""
    import fcntl  # POSIX only: imported here so the rest of the module imports anywhere

    data = json.dumps(info).encode("utf-8")
    while True:
        # A new claim appears already written and locked: made aside, then linked into place
        # (link fails if the name exists, like O_EXCL), so nobody sees it unlocked or empty.
        aside = f"{path}.{info['job_id']}"
        fd = os.open(aside, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644)
        try:
            os.write(fd, data)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.link(aside, path)
            return fd
        except FileExistsError:
            os.close(fd)
        finally:
            os.unlink(aside)
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            continue  # released meanwhile: claim it anew
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise busy(read_text(path)) from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if not same:  # released (unlinked) between our open and our lock: start again
            os.close(fd)
            continue
        old = read_text(path)
        if held_elsewhere(old):
            os.close(fd)
            raise busy(old)
        log.warning("taking over the claim of %s: the job that held it is gone (%s)", what, old)
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        return fd
