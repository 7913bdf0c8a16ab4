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
4. **Commit**: with ``overwrite`` everything the previous run left is deleted first (old shards,
   empty language folders, stale ``_tmp-*`` folders of killed jobs), then the temporary files move
   into place (``os.replace`` locally, ``FileSystems.rename`` = copy + delete on object stores),
   then the claim is released. The previous output stays readable until the new one is complete.

Object stores have no directories and Beam's S3/GCS filesystems expose no conditional create, so
there the claim is best effort: the job writes its claim, reads it back and stops if another
job's id is there. Two jobs started within the same second can both pass that check; run one
writer per output prefix on object stores (an orchestrator such as the stage runner does).

``FileSystems`` is imported lazily: local folders work without Beam on the path.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

from labse_common.errors import UsageError

log = logging.getLogger(__name__)

CLAIM = "_CLAIM.json"
TMP_PREFIX = "_tmp-"


class OutputError(UsageError, ValueError):
    """The output folder cannot be used; CLIs report it in one line and exit with status 2."""


class OutputBusy(OutputError):
    """Another job holds the output folder's claim."""


class OutputNotEmpty(OutputError):
    """The output folder holds files and ``--overwrite`` was not given."""


def is_remote(path: str) -> bool:
    return "://" in str(path) and not str(path).startswith("file://")


def _fs():
    from labse_common import filesystems  # lazy: local paths work without Beam

    return filesystems


def join(base: str, *parts: str) -> str:
    base = str(base)
    if is_remote(base):
        return _fs().join(base, *parts)
    return os.path.join(base, *parts)


def _remote_files(prefix: str) -> list[str]:
    fs = _fs()
    return fs.match(fs.join(prefix.rstrip("/"), "**"))


def _top_entry(output: str, path: str) -> str:
    rel = path[len(output.rstrip("/")) + 1 :]
    return rel.split("/", 1)[0]


def new_job_id() -> str:
    return f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{os.getpid()}-{secrets.token_hex(3)}"


class OutputDir:
    """One job's exclusive use of an output folder; see the module docstring."""

    def __init__(self, output: str | os.PathLike, overwrite: bool = False,
                 job_id: str | None = None) -> None:  # fmt: skip
        self.output = str(output).rstrip("/") if is_remote(str(output)) else os.fspath(output)
        self.overwrite = overwrite
        self.job_id = job_id or new_job_id()
        self.tmp = join(self.output, TMP_PREFIX + self.job_id)
        self.claim_path = join(self.output, CLAIM)
        self._claimed = False
        self._created_dir = False
        self._fd: int | None = None  # the local claim's descriptor (holds its flock)

    # -- claim -------------------------------------------------------------------------------
    def _claim_info(self) -> dict:
        return {"job_id": self.job_id, "host": socket.gethostname(), "pid": os.getpid(),
                "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}  # fmt: skip

    def _busy(self, info: str) -> OutputBusy:
        return OutputBusy(
            f"output {self.output!r} is being written by another job ({info}); wait for it, or "
            f"if no job is running delete {self.claim_path}")

    def _read_claim(self) -> str:
        try:
            if is_remote(self.output):
                with _fs().open_read(self.claim_path) as f:
                    return f.read().decode("utf-8", "replace").strip()
            with open(self.claim_path, encoding="utf-8", errors="replace") as f:
                return f.read().strip()
        except OSError:
            return "claim unreadable"

    def claim(self) -> OutputDir:
        """Take the claim and check the folder; raises :class:`OutputError`."""
        if is_remote(self.output):
            data = json.dumps(self._claim_info()).encode("utf-8")
            fs = _fs()
            if fs.exists(self.claim_path):
                raise self._busy(self._read_claim())
            with fs.create(self.claim_path) as f:
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
                f"{sorted(leftovers)[0]!r}); pass --overwrite to replace it")
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
                _fs().delete([self.claim_path])
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
    def _delete_previous(self) -> None:
        old = self.existing()
        if not old:
            return
        log.info("--overwrite: removing %d entries the previous run left in %s",
                 len(old), self.output)  # fmt: skip
        if is_remote(self.output):
            keep = {CLAIM, TMP_PREFIX + self.job_id}
            paths = [p for p in _remote_files(self.output)
                     if _top_entry(self.output, p) not in keep]  # fmt: skip
            if paths:
                _fs().delete(paths)
            return
        for name in old:
            p = os.path.join(self.output, name)
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p)
            else:
                os.unlink(p)

    def commit(self) -> None:
        """Move the temporary files into place (after removing the old ones with overwrite)."""
        if self.overwrite:
            self._delete_previous()
        if is_remote(self.output):
            fs = _fs()
            srcs = _remote_files(self.tmp)
            dsts = [join(self.output, s[len(self.tmp.rstrip("/")) + 1 :]) for s in srcs]
            if srcs:
                fs.rename(srcs, dsts)
        else:
            clash = [n for n in os.listdir(self.tmp)
                     if os.path.lexists(os.path.join(self.output, n))]  # fmt: skip
            if clash:
                raise OutputError(f"output {self.output!r}: {clash} appeared while the job ran")
            for name in os.listdir(self.tmp):
                os.replace(os.path.join(self.tmp, name), os.path.join(self.output, name))
            os.rmdir(self.tmp)
        self.release()
        log.debug("committed %s", self.output)

    def abort(self) -> None:
        """Remove this job's temporary files and release the claim (the old output stays)."""
        try:
            if is_remote(self.output):
                paths = _remote_files(self.tmp)
                if paths:
                    _fs().delete(paths)
            else:
                shutil.rmtree(self.tmp, ignore_errors=True)
        finally:
            self.release()
            if self._created_dir and not is_remote(self.output):
                try:
                    os.rmdir(self.output)  # only if empty: we made it, leave no clutter
                except OSError:
                    pass

    @contextmanager
    def open(self) -> Iterator[OutputDir]:
        """Claim; yield; commit on success, abort on an exception (which propagates)."""
        self.claim()
        try:
            yield self
        except BaseException:
            self.abort()
            raise
        self.commit()


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
    fs = _fs()
    total = 0
    for root, _, files in os.walk(local):
        for name in sorted(files):
            path = os.path.join(root, name)
            rel = os.path.relpath(path, local).replace(os.sep, "/")
            with open(path, "rb") as src, fs.create(join(remote, rel)) as dst:
                shutil.copyfileobj(src, dst, chunk)
            total += os.path.getsize(path)
    log.info("uploaded %d bytes from %s to %s", total, local, remote)
    return total


@contextmanager
def claimed_file(
    path: str | os.PathLike, overwrite: bool = False, suffixes: tuple[str, ...] = ("",)
) -> Iterator[str]:
    """One output file (or a family of files sharing a stem: ``suffixes``, e.g. a model and its
    report) written the way :class:`OutputDir` writes a folder: claimed by ``FILE._CLAIM.json``
    beside it (``O_EXCL``: of two writers exactly one gets it, the other gets
    :class:`OutputBusy`), written under the yielded temporary stem ``_tmp-<job>-FILE`` and renamed
    into place at the end in the order of ``suffixes``; on an exception the temporary files are
    removed. An existing file needs ``overwrite``. The folder around it is not claimed: other
    writers may fill the rest of it. Local only."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise OutputError(f"--output {path} is a folder; give the file to write")
    head, name = os.path.split(os.path.abspath(path))
    os.makedirs(head, exist_ok=True)
    job = new_job_id()
    claim = f"{path}.{CLAIM}"
    try:
        fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        raise OutputBusy(f"--output {path} is being written by another job ({claim} exists); "
                         f"wait for it, or if no job is running delete {claim}") from None  # fmt: skip
    tmp = os.path.join(head, f"{TMP_PREFIX}{job}-{name}")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"job_id": job, "host": socket.gethostname(), "pid": os.getpid(),
                       "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, f)  # fmt: skip
        if not overwrite and any(os.path.exists(path + s) for s in suffixes):
            raise OutputNotEmpty(f"--output {path} exists; pass --overwrite to replace it")
        yield tmp
        for s in suffixes:
            if os.path.exists(tmp + s):
                os.replace(tmp + s, path + s)
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
        log.warning("taking over the claim of %s: the job that held it is gone (%s)",
                    od.output, old)  # fmt: skip
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
    if os.path.exists(od.output) and not os.path.isdir(od.output):
        raise OutputError(f"output {od.output!r} exists and is not a folder")
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
