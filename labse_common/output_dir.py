"""The one way to claim an output and commit it: written in a temporary place, swapped in at the end.

Every command and stage writes its output through :func:`claim_output`::

    with claim_output(output, overwrite) as out:
        write everything under out.path (OUTPUT/_tmp-<job id>/)
    # on success the files move into OUTPUT; on an exception they are removed

Four shapes of output, one mechanism (:class:`OutputDir`):

* **a folder** (the default): ``out.path`` is ``OUTPUT/_tmp-<job>/``, local or ``s3://``/``gs://``
  (Beam jobs pass it to their writers, which go through ``FileSystems``);
* **staged** (``staged=True``) for libraries that write with local file APIs (FAISS, pyarrow on
  paths): ``out.path`` is a local folder; for a remote output it is uploaded under the temporary
  prefix at the end, so an object store never holds half an output;
* **files** (``files=(".npy", ".stats.json")``): a family of files sharing the stem ``OUTPUT``
  inside a folder that is not claimed; ``out.path`` is a temporary stem (write ``out.path +
  suffix``), the claim is ``OUTPUT._CLAIM.json``. Local only;
* **resumable** (``resumable=True``): the stage runner's claim of its run folder, which it updates
  in place: no temporary place, nothing deleted, and writers may claim folders inside it.

The protocol:

1. **Claim.** ``_CLAIM.json`` (job id, host, pid, start time) is created atomically (locally it
   appears already written and ``flock``-ed: :mod:`labse_common.claim_lock`), so of two jobs
   started at once exactly one gets it and the other stops with :class:`OutputBusy` (exit 2). A
   claim left by a killed job of this host (nobody holds its lock, its process is gone) is taken
   over by the next job, with a warning.
2. **Recover.** A commit the previous holder did not finish (its journal is still there) is
   rolled back or forward first (:mod:`labse_common.commit_journal`); temporary folders of
   killed jobs are removed.
3. **Refuse a non-empty output** unless ``overwrite`` (:class:`OutputNotEmpty`).
4. **Write** under ``out.path``.
5. **Commit**, journaled: the old entries move aside into ``_old-<job>``, the new ones into
   place, and ``_old-<job>`` is deleted only once the journal says the new output is whole. Any
   interruption (an exception, Ctrl-C, SIGTERM, ``kill -9``, power loss) leaves either the old
   or the new output, whole, after the next claim. On object stores (no atomic rename) the same
   is done with copies. Then the claim is released.
6. **Nested writers**: a job refuses an output inside a folder another live job has claimed
   (that job's ``--overwrite`` would delete it at its commit), and with ``overwrite`` an output
   that holds another live job's claim below it. A resumable claim deletes nothing, so stages
   write inside it. Local folders only.
7. **A full disk or a file-size limit** (``ENOSPC``, ``EDQUOT``, ``EFBIG``) while the job writes
   is an :class:`OutputError` naming the output (one line, exit 2); the old output is untouched.

Object stores have no directories and Beam's S3/GCS filesystems expose no conditional create, so
there the claim is best effort: the job writes its claim, reads it back and stops if another
job's id is there; a claim left by a killed job must be deleted by hand (the message says so).
Run one writer per output prefix on object stores (an orchestrator such as the stage runner
does). Beam is imported only for a remote output: local folders work without Beam on the path.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from labse_common import claim_lock, commit_journal, filesystems, resume_shards
from labse_common.claim_lock import CLAIM, RESUMABLE, TMP_PREFIX, new_job_id
from labse_common.commit_journal import JOURNAL, OLD_PREFIX
from labse_common.errors import UsageError
from labse_common.filesystems import is_remote, join

log = logging.getLogger(__name__)

__all__ = [
    "CLAIM",
    "JOURNAL",
    "OLD_PREFIX",
    "RESUMABLE",
    "TMP_PREFIX",
    "OutputBusy",
    "OutputDir",
    "OutputError",
    "OutputNotEmpty",
    "claim_output",
    "full_error",
    "new_job_id",
    "refuse_claimed_parents",
    "upload_tree",
]

_JOB = r"\d{8}T\d{6}-\d+-[0-9a-f]+"


class OutputError(UsageError, ValueError):
    """The output folder cannot be used; CLIs report it in one line and exit with status 2."""


class OutputBusy(OutputError):
    """Another job holds the output folder's claim."""


class OutputNotEmpty(OutputError):
    """The output folder holds files and ``--overwrite`` was not given."""


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


def refuse_claimed_parents(output: str | os.PathLike) -> None:
    """:class:`OutputBusy` when a folder above the local ``output`` is claimed by another live
    job: that job's ``--overwrite`` would delete this output at its commit."""
    found = claim_lock.claimed_parent(os.fspath(output))
    if found:
        parent, text = found
        raise OutputBusy(
            f"output {os.fspath(output)!r} is inside {parent!r}, which another job is writing "
            f"({text}); its --overwrite would delete this output: wait for it or write "
            f"elsewhere (if no job is running delete {os.path.join(parent, CLAIM)})"
        )


def _remote_files(prefix: str) -> list[str]:
    return filesystems.match(join(prefix.rstrip("/"), "**"))


def _top_entry(output: str, path: str) -> str:
    rel = path[len(output.rstrip("/")) + 1 :]
    return rel.split("/", 1)[0]


class OutputDir:
    """One job's exclusive use of an output; see the module docstring. Use it through
    :func:`claim_output`, or ``claim()`` then ``commit()``/``abort()`` where the write cannot
    sit in one ``with`` block."""

    def __init__(
        self,
        output: str | os.PathLike,
        overwrite: bool = False,
        job_id: str | None = None,
        *,
        files: tuple[str, ...] | None = None,
        resumable: bool = False,
        shown: str | None = None,
        resume: str | None = None,
        stage: str = "",
    ) -> None:
        self.output = str(output).rstrip("/") if is_remote(str(output)) else os.fspath(output)
        self.overwrite = overwrite
        self.job_id = job_id or new_job_id()
        self.files = files
        self.kind = RESUMABLE if resumable else "output"
        self.shown = shown or self.output
        self._claimed = False
        self._created_dir = False
        self._fd: int | None = None  # the local claim's descriptor (holds its flock)
        # This job's commit once it started (its state says whether a journal is left).
        self._swap: commit_journal.Swap | commit_journal.Copy | None = None
        if files is not None:
            if is_remote(self.output):
                raise OutputError(f"--output {self.shown}: a file output must be local")
            self.folder, self.name = os.path.split(os.path.abspath(self.output))
            self._tmp_dir = os.path.join(self.folder, f"{TMP_PREFIX}{self.job_id}-{self.name}")
            self.tmp = os.path.join(self._tmp_dir, self.name)  # a stem: write tmp + suffix
            self.claim_path = f"{self.output}.{CLAIM}"
            self.journal = f"{self.output}.{JOURNAL}"
            self._aside = f"{OLD_PREFIX}{self.job_id}-{self.name}"
        else:
            self.folder, self.name = self.output, ""
            self._tmp_dir = self.tmp = (
                self.output if resumable else join(self.output, TMP_PREFIX + self.job_id)
            )
            self.claim_path = join(self.output, CLAIM)
            self.journal = join(self.output, JOURNAL)
            self._aside = OLD_PREFIX + self.job_id
        self.resume = resume
        #: The finished shards of a resumable job (``resume``: its fingerprint), else None.
        self.shards: resume_shards.Shards | None = None
        if resume is not None:
            if files is not None or resumable or is_remote(self.output):
                raise OutputError(f"output {self.shown!r}: shard resume needs a local folder")
            self._tmp_dir = self.tmp = os.path.join(self.output, resume_shards.PARTIAL)
            self.shards = resume_shards.Shards(self.tmp, stage)
        #: Where the job writes: ``tmp``, or a local staging folder (:func:`claim_output`).
        self.path = self.tmp

    @property
    def resumable(self) -> bool:
        return self.kind == RESUMABLE

    # -- claim -------------------------------------------------------------------------------
    def _busy(self, info: str) -> OutputBusy:
        what = "--output " + self.shown if self.files is not None else f"output {self.output!r}"
        return OutputBusy(
            f"{what} is being written by another job ({info}); wait for it, or "
            f"if no job is running delete {self.claim_path}"
        )

    def _read_remote_claim(self) -> str:
        try:
            with filesystems.open_read(self.claim_path) as f:
                return f.read().decode("utf-8", "replace").strip()
        except OSError:
            return "claim unreadable"

    def _claim_remote(self) -> None:
        data = json.dumps(claim_lock.claim_info(self.job_id, self.kind)).encode("utf-8")
        if filesystems.exists(self.claim_path):
            raise self._busy(self._read_remote_claim())
        with filesystems.create(self.claim_path) as f:
            f.write(data)
        # Read back: of two writers racing, the one whose claim was overwritten stops.
        back = self._read_remote_claim()
        if claim_lock.claim_field(back, "job_id") != self.job_id:
            raise self._busy(back)

    def _claim_local(self) -> None:
        if self.files is not None:
            if any(os.path.isdir(self.output + s) for s in self.files):
                raise OutputError(f"--output {self.shown} is a folder; give the file to write")
        elif os.path.exists(self.output) and not os.path.isdir(self.output):
            raise OutputError(f"output {self.output!r} exists and is not a folder")
        refuse_claimed_parents(self.shown if self.files is not None else self.output)
        if self.overwrite and self.files is None and os.path.isdir(self.output):
            self._refuse_claims_below()
        if not os.path.isdir(self.folder):
            os.makedirs(self.folder, exist_ok=True)
            self._created_dir = True
        # Locked while this job runs: a claim left by a killed job is taken over.
        info = claim_lock.claim_info(self.job_id, self.kind)
        self._fd = claim_lock.take_local_claim(self.claim_path, info, self._busy, self.shown)

    def claim(self) -> OutputDir:
        """Take the claim, finish what a killed holder left, check the folder; raises
        :class:`OutputError`."""
        if is_remote(self.output):
            self._claim_remote()
        else:
            self._claim_local()
        self._claimed = True
        try:
            self._recover()
            leftovers = [] if self.resumable else self.existing()
            if leftovers and not self.overwrite:
                raise OutputNotEmpty(
                    f"--output {self.shown} exists; pass --overwrite to replace it"
                    if self.files is not None
                    else f"output {self.output!r} is not empty ({len(leftovers)} entries, e.g. "
                    f"{sorted(leftovers)[0]!r}); pass --overwrite to replace it"
                )
        except BaseException:
            self.release()
            raise
        if self.resume is not None:
            resume_shards.prepare(self._tmp_dir, self.resume)
        elif not is_remote(self.output) and not self.resumable:
            os.makedirs(self._tmp_dir)
        log.debug("claimed %s as job %s", self.output, self.job_id)
        return self

    def _recover(self) -> None:
        """Roll back or forward the commit a killed job left (its journal), then remove the
        temporary folders of killed jobs; refuse an ``_old-*`` no journal explains."""
        if is_remote(self.output):
            done = commit_journal.recover_remote(self.output)
        else:
            done = commit_journal.recover_local(self.folder, self.journal)
        if done:
            log.warning("%s: the commit of a job that was stopped was %s", self.shown, done)
        if is_remote(self.output) or self.resumable or not os.path.isdir(self.folder):
            return
        _remove(self.journal + ".part")  # a journal the killed job never finished writing
        # A folder's own temporary folders are `_tmp-<job>`; a file's `_tmp-<job>-FILE` (and,
        # from older versions, `_tmp-<job>-FILE<suffix>` files).
        tail = "-" + re.escape(self.name) + ".*" if self.name else ""
        for entry in sorted(os.listdir(self.folder)):
            if re.fullmatch(f"{TMP_PREFIX}{_JOB}{tail}", entry):
                if entry != os.path.basename(self._tmp_dir):
                    log.info("removing %s, left by a job that was stopped", entry)
                    _remove(os.path.join(self.folder, entry))
            elif re.fullmatch(f"{OLD_PREFIX}{_JOB}{tail}", entry):
                raise commit_journal.CommitError(
                    f"output {self.shown!r}: {os.path.join(self.folder, entry)} holds entries of "
                    "an earlier output set aside by a commit that was interrupted with no "
                    "journal (an older version of this tool): move what the output lacks back "
                    "from it, delete it, then rerun"
                )

    def _refuse_claims_below(self) -> None:
        found = claim_lock.live_claim_below(
            self.output, {TMP_PREFIX + self.job_id, resume_shards.PARTIAL}
        )
        if found:
            path, text = found
            raise OutputBusy(
                f"output {self.output!r} holds the output of another job being written ({path}: "
                f"{text}); --overwrite would delete it: wait for it (if no job is running delete "
                f"{path})"
            )

    def existing(self) -> list[str]:
        """Entries of the output other than this job's claim and temporary folder, and other
        writers' claims being made (``_CLAIM.json.<job>``: a writer that loses the race for the
        claim has one for a moment). For a file output: its files that exist."""
        if self.files is not None:
            return [self.name + s for s in self.files if os.path.lexists(self.output + s)]
        mine = {CLAIM, TMP_PREFIX + self.job_id, resume_shards.PARTIAL}
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
        names = sorted(set(os.listdir(self._tmp_dir)) - set(resume_shards.BOOKKEEPING))
        old = self.existing() if self.overwrite else []
        if self.overwrite and self.files is None:
            self._refuse_claims_below()  # a job that started inside meanwhile
        elif not self.overwrite:
            clash = [n for n in names if os.path.lexists(os.path.join(self.folder, n))]
            if clash:
                raise OutputError(f"output {self.shown!r}: {clash} appeared while the job ran")
        if old:
            log.info("--overwrite: replacing %d entries in %s", len(old), self.shown)
        tmp = os.path.basename(self._tmp_dir)
        self._swap = commit_journal.Swap(self.folder, tmp, self._aside, self.journal, old, names)
        commit_journal.swap_local(self._swap)

    def _commit_remote(self) -> None:
        prefix = self.tmp.rstrip("/") + "/"
        srcs = _remote_files(self.tmp)
        dsts = [join(self.output, s[len(prefix) :]) for s in srcs]
        old: list[str] = []
        if self.overwrite:
            keep = {CLAIM, TMP_PREFIX + self.job_id}
            old = [p for p in _remote_files(self.output) if _top_entry(self.output, p) not in keep]
        old_set, new_set = set(old), set(dsts)
        aside = join(self.output, self._aside)
        saved = [[d, join(aside, d[len(self.output) + 1 :])] for d in dsts if d in old_set]
        gone = [p for p in old if p not in new_set]
        if gone:
            log.info("--overwrite: removing %d objects left in %s", len(gone), self.output)
        self._swap = commit_journal.Copy(
            self.journal, self.tmp, aside, srcs, dsts, saved, gone, old
        )
        commit_journal.swap_remote(self._swap)

    def commit(self) -> None:
        """Put the new output in place of the old one (module docstring, point 5), then release
        the claim. On an exception the old output is as it was and the claim is still held."""
        if self.resumable:
            pass
        elif is_remote(self.output):
            self._commit_remote()
        else:
            self._commit_local()
        self.release()
        log.debug("committed %s", self.output)

    def abort(self) -> None:
        """Remove this job's temporary files and release the claim (the old output stays)."""
        try:
            if self.resumable:
                pass
            elif self.shards is not None and self.shards.any_finished():
                log.info("the finished shards stay in %s for a rerun", self._tmp_dir)
            elif self._journal_left():
                log.error(
                    "the commit of %s was interrupted; its journal %s and %s stay for the next "
                    "job (or this command rerun), which finishes it",
                    self.shown,
                    self.journal,
                    self._tmp_dir,
                )
            elif is_remote(self.output):
                paths = _remote_files(self.tmp)
                if paths:
                    filesystems.delete(paths)
            else:
                shutil.rmtree(self._tmp_dir, ignore_errors=True)
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
                    os.rmdir(self.folder)  # only if empty: we made it, leave no clutter
                except OSError:
                    pass

    def _journal_left(self) -> bool:
        """Whether a commit of this job left its journal (its undo was interrupted too): then
        the temporary files are what the next job needs to roll it back."""
        # The swap's state in memory, not a request: after a failed commit the store may be
        # failing, and asking it would only replace the error to report.
        return self._swap is not None and self._swap.state != commit_journal.ENDED

    @contextmanager
    def open(self, staged: bool = False) -> Iterator[OutputDir]:
        """Claim; yield; commit on success, abort on an exception (which propagates; a full
        disk or a file-size limit becomes one :class:`OutputError` naming the output). A failed
        commit aborts too: the old output is intact, the new files and the claim are gone."""
        self.claim()
        try:
            if staged and is_remote(self.output):
                with tempfile.TemporaryDirectory(prefix="labse-staging-") as local:
                    self.path = local
                    yield self
                    upload_tree(local, self.tmp)
            else:
                yield self
            self.commit()
        except BaseException as e:
            self.abort()
            full = full_error(self.shown, e)
            if full is not None:
                raise full from e
            raise


def claim_output(
    output: str | os.PathLike,
    overwrite: bool = False,
    *,
    staged: bool = False,
    files: tuple[str, ...] | None = None,
    resumable: bool = False,
    shown: str | None = None,
    resume: str | None = None,
    stage: str = "",
):
    """``with claim_output(path, overwrite) as out:`` write under ``out.path``; the output is
    committed when the block ends, or left as it was on an exception. ``staged``: ``out.path``
    is a local folder even for a remote output. ``files``: the output is the file family
    ``path + suffix`` (``shown``: its name in messages). ``resumable``: claim only (the stage
    runner's run folder). ``resume``: a fingerprint of the job's inputs and settings; the job
    writes its shards through ``out.shards`` and a rerun keeps those an earlier attempt with the
    same fingerprint finished (:mod:`labse_common.resume_shards`; ``stage`` names the job for
    ``LABSE_KILL_AFTER``). See the module docstring."""
    od = OutputDir(
        output, overwrite, files=files, resumable=resumable, shown=shown, resume=resume, stage=stage
    )
    return od.open(staged=staged)


def _remove(path: str) -> None:
    """Delete a file or folder a job no longer needs; a failure only costs disk space."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.unlink(path)
    except OSError as e:
        log.warning("could not delete %s (%s): delete it by hand", path, e)


def upload_tree(local: str, remote: str, chunk: int = 8 << 20) -> int:
    """Copy every file under ``local`` to the same relative paths under ``remote`` (through
    Beam's FileSystems); returns the bytes copied."""
    total = 0
    for root, _, names in os.walk(local):
        for name in sorted(names):
            path = os.path.join(root, name)
            rel = os.path.relpath(path, local).replace(os.sep, "/")
            with open(path, "rb") as src, filesystems.create(join(remote, rel)) as dst:
                shutil.copyfileobj(src, dst, chunk)
            total += os.path.getsize(path)
    log.info("uploaded %d bytes from %s to %s", total, local, remote)
    return total
