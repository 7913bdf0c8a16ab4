"""Exclusive output folders, written in a temporary place and committed at the end.

Every stage writes its output folder the same way::

    with OutputDir(output, overwrite).open() as out:
        write everything under out.tmp (OUTPUT/_tmp-<job id>/)
    # on success the files move into OUTPUT; on an exception they are removed

1. **Claim.** ``OUTPUT/_CLAIM.json`` (job id, host, pid, start time) is created atomically: on a
   local filesystem with ``O_CREAT | O_EXCL``, so of two jobs started at once exactly one gets it
   and the other stops with :class:`OutputBusy` (the CLIs exit with status 2). The job holds an
   ``flock`` on the claim while it runs; a claim left by a killed job of this host (nobody holds
   its lock, its process is gone) is taken over by the next job, with a warning.
2. **Refuse a non-empty output** (anything but the claim) unless ``overwrite``
   (:class:`OutputNotEmpty`).
3. **Write** under ``OUTPUT/_tmp-<job id>/``. Beam jobs pass that path to their writers, which go
   through ``FileSystems``, so the same code writes a local folder, ``s3://`` or ``gs://``.
4. **Commit** (a rename-swap: the old output is replaced only once the new one is complete).
   Locally, with ``overwrite`` everything the previous run left (old shards, empty language
   folders, stale ``_tmp-*`` folders of killed jobs) is first moved aside into
   ``OUTPUT/_old-<job id>/``, then the new entries move into place (``os.replace``), then the
   aside folder is deleted; a failure at any step moves everything back, so the old output is
   intact. On object stores (no atomic rename) the new objects are copied into place first (old
   objects of the same names copied aside before, and back on a failure), and the old objects
   the new output does not contain are deleted only after every copy succeeded. Then the claim is
   released.
5. **Nested writers**: a job refuses an output inside a folder another live job has claimed
   (that job's ``--overwrite`` would delete it at its commit), and with ``overwrite`` an output
   that holds another live job's claim below it. The stage runner's :func:`resumable_claim`
   deletes nothing, so its stages write inside it. Local folders only (an object store's claim
   cannot be judged live or stale; run one writer per prefix there, as below).
6. **A full disk or a file-size limit** (``ENOSPC``, ``EDQUOT``, ``EFBIG``) while the job writes
   is an :class:`OutputError` naming the output (one line, exit 2); the old output is untouched.

Object stores have no directories and Beam's S3/GCS filesystems expose no conditional create, so
there the claim is best effort: the job writes its claim, reads it back and stops if another
job's id is there. Two jobs started within the same second can both pass that check; run one
writer per output prefix on object stores (an orchestrator such as the stage runner does).

Beam is imported only for a remote output (:mod:`labse_common.filesystems`): local folders
work without Beam on the path.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import secrets
import shutil
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

from labse_common import filesystems
from labse_common.errors import UsageError
from labse_common.filesystems import is_remote, join

log = logging.getLogger(__name__)

CLAIM = "_CLAIM.json"
TMP_PREFIX = "_tmp-"
#: Where a commit moves the previous output while the new one moves in (deleted at the end).
OLD_PREFIX = "_old-"
#: ``kind`` of a claim that deletes nothing (the stage runner's): writers may work inside it.
RESUMABLE = "resumable"


class OutputError(UsageError, ValueError):
    """The output folder cannot be used; CLIs report it in one line and exit with status 2."""


class OutputBusy(OutputError):
    """Another job holds the output folder's claim."""


class OutputNotEmpty(OutputError):
    """The output folder holds files and ``--overwrite`` was not given."""


def _remote_files(prefix: str) -> list[str]:
    return filesystems.match(join(prefix.rstrip("/"), "**"))


def _top_entry(output: str, path: str) -> str:
    rel = path[len(output.rstrip("/")) + 1 :]
    return rel.split("/", 1)[0]


_FULL_WHY = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EFBIG: "file too large (the file-size limit, ulimit -f)",
}


def full_error(output: str, exc: BaseException) -> OutputError | None:
    """The one-line error of a write that hit the machine's limits (a full disk, a quota, the
    file-size limit), naming the output; None for any other error (it stays what it is). The
    causes are searched too: a Beam runner re-raises a worker's OSError inside a RuntimeError."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        why = _FULL_WHY.get(e.errno) if isinstance(e, OSError) else None
        if why:
            return OutputError(
                f"output {output!r}: {why} while writing it; nothing was "
                "committed and the previous output is unchanged"
            )
        e = e.__cause__ or e.__context__
    return None


def _rename_all(moves: list[tuple[str, str]]) -> None:
    """``os.replace`` each ``(src, dst)`` in order; on any failure (Ctrl-C too) the moves done so
    far are undone in reverse order before the error propagates, so nothing is left half moved."""
    done: list[tuple[str, str]] = []
    try:
        for src, dst in moves:
            os.replace(src, dst)
            done.append((src, dst))
    except BaseException:
        for src, dst in reversed(done):
            try:
                os.replace(dst, src)
            except OSError as e:  # keep undoing the rest; this one needs a person
                log.error("could not move %s back to %s (%s): move it by hand", dst, src, e)
        raise


def _remove(path: str) -> None:
    """Delete a file or folder a commit no longer needs; a failure only costs disk space."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.unlink(path)
    except OSError as e:
        log.warning("could not delete %s (%s): delete it by hand", path, e)


def _copy_objects(pairs: list[tuple[str, str]]) -> None:
    """Copy object-store objects one by one. Beam's S3 ``copy`` returns its failures instead of
    raising them: they are raised here, so a failed copy can never pass for a done one."""
    from labse_common.errors import RemoteError

    for src, dst in pairs:
        results = filesystems.filesystem(src).copy([src], [dst])
        bad = [err for *_, err in (results or []) if err is not None]
        if bad:
            raise RemoteError(f"could not copy {src} to {dst}: {bad[0]}")


# --- claims of other jobs around an output ---------------------------------------------------


def _claim_field(text: str, key: str) -> object:
    try:
        info = json.loads(text)
    except ValueError:
        return None
    return info.get(key) if isinstance(info, dict) else None


def _live_claim(path: str) -> str | None:
    """The text of the local claim file ``path`` while a live job holds it; None when there is
    none or its job is gone. A holder keeps an ``flock`` on it (taking a shared lock fails); a
    claim without a lock (``claimed_file``'s, an older version's) is judged by its process."""
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
        return text if locked or _held_elsewhere(text) else None
    finally:
        os.close(fd)


def refuse_claimed_parents(output: str | os.PathLike) -> None:
    """:class:`OutputBusy` when a folder above the local ``output`` is claimed by another live
    job: that job's ``--overwrite`` would delete this output at its commit. The stage runner's
    claim (:data:`RESUMABLE`) deletes nothing, and a job may write inside its own temporary
    folder. A few ``stat`` calls: one per folder above."""
    output = os.fspath(output)
    real = os.path.realpath(output)
    parent = os.path.dirname(real)
    while True:
        claim = os.path.join(parent, CLAIM)
        text = _live_claim(claim) if os.path.lexists(claim) else None
        if text is not None and _claim_field(text, "kind") != RESUMABLE:
            first = os.path.relpath(real, parent).split(os.sep, 1)[0]
            if first != f"{TMP_PREFIX}{_claim_field(text, 'job_id')}":
                raise OutputBusy(
                    f"output {output!r} is inside {parent!r}, which another job is writing "
                    f"({text}); its --overwrite would delete this output: wait for it or write "
                    f"elsewhere (if no job is running delete {claim})"
                )
        up = os.path.dirname(parent)
        if up == parent:
            return
        parent = up


#: How deep below an output a commit with ``overwrite`` looks for other jobs' claims.
_CLAIM_SCAN_DEPTH = 3


def _live_claim_below(output: str, skip: set[str]) -> tuple[str, str] | None:
    """``(claim path, its text)`` of a live claim of another job inside the local ``output``
    (folders named in ``skip`` at its top are not searched; its own top claim is this job's)."""
    top = os.path.normpath(output)
    for root, dirs, files in os.walk(top):
        depth = 0 if root == top else os.path.relpath(root, top).count(os.sep) + 1
        if root == top:
            dirs[:] = [d for d in dirs if d not in skip]
        if depth >= _CLAIM_SCAN_DEPTH:
            dirs[:] = []
        for f in files:
            # A folder's claim below the top, or a claimed file's ``FILE._CLAIM.json``.
            if (f == CLAIM and root != top) or f.endswith("." + CLAIM):
                path = os.path.join(root, f)
                text = _live_claim(path)
                if text is not None:
                    return path, text
    return None


def new_job_id() -> str:
    return f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{os.getpid()}-{secrets.token_hex(3)}"


class OutputDir:
    """One job's exclusive use of an output folder; see the module docstring."""

    def __init__(
        self, output: str | os.PathLike, overwrite: bool = False, job_id: str | None = None
    ) -> None:
        self.output = str(output).rstrip("/") if is_remote(str(output)) else os.fspath(output)
        self.overwrite = overwrite
        self.job_id = job_id or new_job_id()
        self.tmp = join(self.output, TMP_PREFIX + self.job_id)
        self.claim_path = join(self.output, CLAIM)
        self._claimed = False
        self._created_dir = False
        self._fd: int | None = None  # the local claim's descriptor (holds its flock)
        self.kind = "output"  # RESUMABLE for the stage runner's claim (it deletes nothing)

    # -- claim -------------------------------------------------------------------------------
    def _claim_info(self) -> dict:
        return {
            "job_id": self.job_id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "kind": self.kind,
        }

    def _refuse_claims_below(self) -> None:
        found = _live_claim_below(self.output, {TMP_PREFIX + self.job_id})
        if found:
            path, text = found
            raise OutputBusy(
                f"output {self.output!r} holds the output of another job being written ({path}: "
                f"{text}); --overwrite would delete it: wait for it (if no job is running delete "
                f"{path})"
            )

    def _busy(self, info: str) -> OutputBusy:
        return OutputBusy(
            f"output {self.output!r} is being written by another job ({info}); wait for it, or "
            f"if no job is running delete {self.claim_path}"
        )

    def _read_claim(self) -> str:
        try:
            if is_remote(self.output):
                with filesystems.open_read(self.claim_path) as f:
                    return f.read().decode("utf-8", "replace").strip()
            with open(self.claim_path, encoding="utf-8", errors="replace") as f:
                return f.read().strip()
        except OSError:
            return "claim unreadable"

    def claim(self) -> OutputDir:
        """Take the claim and check the folder; raises :class:`OutputError`."""
        if is_remote(self.output):
            data = json.dumps(self._claim_info()).encode("utf-8")
            if filesystems.exists(self.claim_path):
                raise self._busy(self._read_claim())
            with filesystems.create(self.claim_path) as f:
                f.write(data)
            # Read back: of two writers racing, the one whose claim was overwritten stops.
            back = self._read_claim()
            try:
                holder = json.loads(back).get("job_id")
            except ValueError:
                holder = None
            if holder != self.job_id:
                raise self._busy(back)
        else:
            if os.path.exists(self.output) and not os.path.isdir(self.output):
                raise OutputError(f"output {self.output!r} exists and is not a folder")
            refuse_claimed_parents(self.output)
            if self.overwrite and os.path.isdir(self.output):
                self._refuse_claims_below()
            if not os.path.isdir(self.output):
                os.makedirs(self.output, exist_ok=True)
                self._created_dir = True
            # Locked while this job runs: a claim left by a killed job is taken over.
            self._fd = _take_local_claim(self)
        self._claimed = True
        leftovers = self.existing()
        if leftovers and not self.overwrite:
            self.release()
            raise OutputNotEmpty(
                f"output {self.output!r} is not empty ({len(leftovers)} entries, e.g. "
                f"{sorted(leftovers)[0]!r}); pass --overwrite to replace it"
            )
        if not is_remote(self.output):
            os.makedirs(self.tmp)
        log.debug("claimed %s as job %s", self.output, self.job_id)
        return self

    def existing(self) -> list[str]:
        """Top-level entries of the output other than this job's claim and temporary folder,
        and other writers' claims being made (``_CLAIM.json.<job>``, see
        :func:`_take_local_claim`): a writer that loses the race for the claim has one for a
        moment, and counting it made both writers stop."""
        mine = {CLAIM, TMP_PREFIX + self.job_id}
        if is_remote(self.output):
            names = {_top_entry(self.output, p) for p in _remote_files(self.output)}
        else:
            names = set(os.listdir(self.output)) if os.path.isdir(self.output) else set()
        return sorted(n for n in names - mine if not n.startswith(CLAIM + "."))

    def release(self) -> None:
        if not self._claimed:
            return
        self._claimed = False
        try:
            if is_remote(self.output):
                filesystems.delete([self.claim_path])
            else:
                # Unlink before unlocking: a writer that opened this file meanwhile sees it is gone.
                os.unlink(self.claim_path)
        except Exception as e:  # noqa: BLE001 - OSError locally, BeamIOError remotely
            log.warning("could not release %s: %s", self.claim_path, e)
        finally:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    # -- commit / abort ----------------------------------------------------------------------
    def _commit_local(self) -> None:
        names = sorted(os.listdir(self.tmp))
        old = self.existing() if self.overwrite else []
        if self.overwrite:
            self._refuse_claims_below()  # a job that started inside meanwhile
        else:
            clash = [n for n in names if os.path.lexists(os.path.join(self.output, n))]
            if clash:
                raise OutputError(f"output {self.output!r}: {clash} appeared while the job ran")
        aside = os.path.join(self.output, OLD_PREFIX + self.job_id)
        if old:
            log.info(
                "--overwrite: replacing %d entries the previous run left in %s",
                len(old),
                self.output,
            )
            os.mkdir(aside)
        # The swap: old entries aside, new ones in; any failure puts everything back.
        moves = [(os.path.join(self.output, n), os.path.join(aside, n)) for n in old]
        moves += [(os.path.join(self.tmp, n), os.path.join(self.output, n)) for n in names]
        try:
            _rename_all(moves)
        except BaseException:
            if old:
                try:
                    os.rmdir(aside)
                except OSError as e:
                    log.error("%s keeps what could not be moved back (%s)", aside, e)
            raise
        os.rmdir(self.tmp)
        if old:
            _remove(aside)

    def _commit_remote(self) -> None:
        prefix = self.tmp.rstrip("/") + "/"
        srcs = _remote_files(self.tmp)
        dsts = [join(self.output, s[len(prefix) :]) for s in srcs]
        old: list[str] = []
        if self.overwrite:
            keep = {CLAIM, TMP_PREFIX + self.job_id}
            old = [p for p in _remote_files(self.output) if _top_entry(self.output, p) not in keep]
        old_set, new_set = set(old), set(dsts)
        # No atomic rename: copy the new objects into place, keeping the old bytes of the names
        # they replace aside until every copy succeeded; only then delete what is gone.
        aside = join(self.output, OLD_PREFIX + self.job_id)
        saved = [
            (d, join(aside, d[len(self.output.rstrip("/")) + 1 :])) for d in dsts if d in old_set
        ]
        copied: list[str] = []
        try:
            _copy_objects(saved)
            for src, dst in zip(srcs, dsts):
                _copy_objects([(src, dst)])
                copied.append(dst)
        except BaseException:
            self._undo_remote(saved, copied, old_set)
            raise
        gone = [p for p in old if p not in new_set]
        if gone:
            log.info(
                "--overwrite: removing %d objects the previous run left in %s",
                len(gone),
                self.output,
            )
        filesystems.delete(gone + [a for _, a in saved] + srcs)

    def _undo_remote(self, saved: list[tuple[str, str]], copied: list[str], old: set[str]) -> None:
        """Put back the old objects a failed remote commit replaced and remove the new ones it
        added; what cannot be undone is logged (the saved copies stay under ``_old-<job>``)."""
        back = dict(saved)
        try:
            _copy_objects([(back[d], d) for d in copied if d in back])
            filesystems.delete([d for d in copied if d not in old] + list(back.values()))
        except Exception as e:  # noqa: BLE001 - BeamIOError/RemoteError: the store is failing
            log.error(
                "could not undo the failed commit of %s (%s): the old objects are kept under %s",
                self.output,
                e,
                join(self.output, OLD_PREFIX + self.job_id),
            )

    def commit(self) -> None:
        """Put the new output in place of the old one (module docstring, point 4), then release
        the claim. On an exception the old output is as it was and the claim is still held."""
        if is_remote(self.output):
            self._commit_remote()
        else:
            self._commit_local()
        self.release()
        log.debug("committed %s", self.output)

    def abort(self) -> None:
        """Remove this job's temporary files and release the claim (the old output stays)."""
        try:
            if is_remote(self.output):
                paths = _remote_files(self.tmp)
                if paths:
                    filesystems.delete(paths)
            else:
                shutil.rmtree(self.tmp, ignore_errors=True)
        except Exception as e:  # noqa: BLE001 - the error that made us abort is the one to report
            # A dead server fails the clean-up too; raising here would hide the first failure,
            # and repeating its message would make one failure read as two.
            log.warning(
                "could not remove the temporary files under %s (%s); remove them by hand",
                self.tmp,
                type(e).__name__,
            )
        finally:
            self.release()
            if self._created_dir and not is_remote(self.output):
                try:
                    os.rmdir(self.output)  # only if empty: we made it, leave no clutter
                except OSError:
                    pass

    @contextmanager
    def open(self) -> Iterator[OutputDir]:
        """Claim; yield; commit on success, abort on an exception (which propagates; a full
        disk or a file-size limit becomes one :class:`OutputError` naming the output). A failed
        commit aborts too: the old output is intact, the new files and the claim are gone."""
        self.claim()
        try:
            yield self
            self.commit()
        except BaseException as e:
            self.abort()
            full = full_error(self.output, e)
            if full is not None:
                raise full from e
            raise


@contextmanager
def exclusive_output(output: str | os.PathLike, overwrite: bool = False) -> Iterator[OutputDir]:
    """``with exclusive_output(path, overwrite) as out:`` write under ``out.tmp``."""
    with OutputDir(output, overwrite).open() as out:
        yield out


@contextmanager
def staged_output(output: str | os.PathLike, overwrite: bool = False) -> Iterator[str]:
    """:func:`exclusive_output` for commands whose libraries write with local file APIs (FAISS,
    pyarrow on paths, matplotlib): yields a local folder to write into. A local output is the
    usual claimed temporary folder. A remote one (``s3://``, ``gs://``) is claimed first (a
    second writer stops before any work), the job writes into a local staging folder, and at the
    end every file is uploaded under the output's temporary prefix and committed: an object
    store never holds half an output."""
    if not is_remote(str(output)):
        with exclusive_output(output, overwrite) as out:
            yield out.tmp
        return
    import tempfile

    with exclusive_output(output, overwrite) as out:
        with tempfile.TemporaryDirectory(prefix="labse-staging-") as local:
            yield local
            upload_tree(local, out.tmp)


def upload_tree(local: str, remote: str, chunk: int = 8 << 20) -> int:
    """Copy every file under ``local`` to the same relative paths under ``remote`` (through
    Beam's FileSystems); returns the bytes copied."""
    total = 0
    for root, _, files in os.walk(local):
        for name in sorted(files):
            path = os.path.join(root, name)
            rel = os.path.relpath(path, local).replace(os.sep, "/")
            with open(path, "rb") as src, filesystems.create(join(remote, rel)) as dst:
                shutil.copyfileobj(src, dst, chunk)
            total += os.path.getsize(path)
    log.info("uploaded %d bytes from %s to %s", total, local, remote)
    return total


@contextmanager
def claimed_file(
    path: str | os.PathLike,
    overwrite: bool = False,
    suffixes: tuple[str, ...] = ("",),
    shown: str | None = None,
) -> Iterator[str]:
    """One output file (or a family of files sharing a stem: ``suffixes``, e.g. a model and its
    report) written the way :class:`OutputDir` writes a folder: claimed by ``FILE._CLAIM.json``
    beside it (``O_EXCL``: of two writers exactly one gets it, the other gets
    :class:`OutputBusy`), written under the yielded temporary stem ``_tmp-<job>-FILE`` and swapped
    into place at the end: the old files (every suffix) are renamed aside to ``_old-<job>-FILE``,
    the new ones renamed in, the old ones deleted; a failure puts the old ones back. On an
    exception the temporary files are removed (a full disk or a file-size limit is one
    :class:`OutputError` naming the file). An existing file needs ``overwrite``. The folder
    around it is not claimed: other writers may fill the rest of it, but not while a job has
    claimed a folder above it (:func:`refuse_claimed_parents`). Local only. ``shown``: the
    output as messages name it (default ``path``; e.g. ``X.npy`` for the stem ``X``)."""
    path = os.fspath(path)
    shown = shown or path
    if any(os.path.isdir(path + s) for s in suffixes):
        raise OutputError(f"--output {shown} is a folder; give the file to write")
    head, name = os.path.split(os.path.abspath(path))
    refuse_claimed_parents(shown)
    os.makedirs(head, exist_ok=True)
    job = new_job_id()
    claim = f"{path}.{CLAIM}"
    try:
        fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        raise OutputBusy(
            f"--output {shown} is being written by another job ({claim} exists); "
            f"wait for it, or if no job is running delete {claim}"
        ) from None
    tmp = os.path.join(head, f"{TMP_PREFIX}{job}-{name}")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "job_id": job,
                    "host": socket.gethostname(),
                    "pid": os.getpid(),
                    "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                },
                f,
            )
        if not overwrite and any(os.path.exists(path + s) for s in suffixes):
            raise OutputNotEmpty(f"--output {shown} exists; pass --overwrite to replace it")
        try:
            yield tmp
        except Exception as e:  # noqa: BLE001 - re-raised as it is unless the disk is full
            full = full_error(shown, e)
            if full is not None:
                raise full from e
            raise
        aside = os.path.join(head, f"{OLD_PREFIX}{job}-{name}")
        old = [(path + s, aside + s) for s in suffixes if os.path.lexists(path + s)]
        _rename_all(old + [(tmp + s, path + s) for s in suffixes if os.path.exists(tmp + s)])
        for _, a in old:
            _remove(a)
    finally:
        for s in suffixes:
            if os.path.exists(tmp + s):
                os.unlink(tmp + s)
        try:
            os.unlink(claim)
        except FileNotFoundError:  # deleted by hand meanwhile: nothing to release
            pass


def _held_elsewhere(claim: str) -> bool:
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


def _take_local_claim(od: OutputDir) -> int:
    """Create ``od``'s local claim file, or take over a stale one; return its descriptor, which
    holds an ``flock`` until it is closed (the kernel drops it when the process ends, however
    it ends). Raises :class:`OutputBusy` when a live job holds it.

    A claim nobody holds the lock of, written by a process of this host that is gone, is stale:
    it is taken over (logged). A claim of a live process, or of another host, stays busy."""
    import fcntl  # POSIX only: imported here so the rest of the module imports anywhere

    data = json.dumps(od._claim_info()).encode("utf-8")
    while True:
        # A new claim appears already written and locked: made aside, then linked into place
        # (link fails if the name exists, like O_EXCL), so nobody sees it unlocked or empty.
        aside = f"{od.claim_path}.{od.job_id}"
        fd = os.open(aside, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644)
        try:
            os.write(fd, data)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.link(aside, od.claim_path)
            return fd
        except FileExistsError:
            os.close(fd)
        finally:
            os.unlink(aside)
        try:
            fd = os.open(od.claim_path, os.O_RDWR)
        except FileNotFoundError:
            continue  # released meanwhile: claim it anew
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise od._busy(od._read_claim()) from None
        try:
            same = os.stat(od.claim_path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if not same:  # released (unlinked) between our open and our lock: start again
            os.close(fd)
            continue
        old = od._read_claim()
        if _held_elsewhere(old):
            os.close(fd)
            raise od._busy(old)
        log.warning(
            "taking over the claim of %s: the job that held it is gone (%s)", od.output, old
        )
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        return fd


@contextmanager
def resumable_claim(output: str | os.PathLike) -> Iterator[OutputDir]:
    """Hold ``OUTPUT/_CLAIM.json`` while a resumable writer updates the folder in place (the
    stage runner reruns into its own earlier output and keeps what is up to date): no temporary
    place and no refusal of existing files, but the same exclusive claim, so a second writer
    gets :class:`OutputBusy`. Released at the end, on an exception and on Ctrl-C. Local only.

    The holder keeps an ``flock`` on the claim file, which the kernel drops when the process
    ends however it ends (SIGKILL too). A claim nobody holds the lock of, written by a process
    of this host that is gone, is stale: it is taken over (logged) so a killed run resumes
    without the user deleting the file. A claim of a live process, or of another host, stays
    busy."""
    od = OutputDir(output)
    od.kind = RESUMABLE  # writers may work inside it: it never deletes what it did not write
    if os.path.exists(od.output) and not os.path.isdir(od.output):
        raise OutputError(f"output {od.output!r} exists and is not a folder")
    refuse_claimed_parents(od.output)
    os.makedirs(od.output, exist_ok=True)
    fd = _take_local_claim(od)
    try:
        yield od
    finally:
        # Unlink before unlocking: a writer that opened this file meanwhile sees it is gone.
        try:
            os.unlink(od.claim_path)
        except OSError as e:
            log.warning("could not release %s: %s", od.claim_path, e)
        os.close(fd)
