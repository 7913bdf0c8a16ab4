"""The commit of an output, journaled: any interruption is rolled back or forward later.

A commit replaces the previous output by the new one, written under ``_tmp-<job>``. Before the
first move it writes a small journal (``_COMMIT.json`` in the output folder; ``FILE._COMMIT.json``
beside a claimed file) saying what moves where, atomically (written aside, renamed in place,
``fsync``-ed), with a state:

* ``swap``: the old entries move into ``_old-<job>``, the new ones from ``_tmp-<job>`` into
  place (``os.replace``; on an object store, copies: the old objects of the replaced names are
  copied aside first, then the new objects over them);
* ``done``, written once every new entry is in place: the new output is whole. Only then are
  ``_old-<job>`` and ``_tmp-<job>`` deleted, and the journal last;
* ``undo``, written by a job whose commit failed in-process (an exception, Ctrl-C) before it
  puts the old entries back.

:func:`recover` reads a journal that is still there (its job was killed: ``kill -9``, SIGTERM,
power loss, or a second Ctrl-C during the undo) and finishes what it says: ``swap`` and ``undo``
are rolled back (the old output comes back whole, the new one is discarded), ``done`` is rolled
forward. Every step looks at what is on disk, not at what the dead job remembered, so a move the
job made but never recorded is undone too, and recovering twice is the same as once. The next
job that claims the folder runs it (:class:`labse_common.output_dir.OutputDir`), before anything
else, so the same command rerun repairs what its killed run left.

**Fault injection** (tests and checks only): with ``LABSE_COMMIT_FAULT=<step>:<n>:<signal>``
(``step`` one of ``journal``, ``move``, ``done``, ``clean``; ``signal`` ``INT``, ``TERM`` or
``KILL``), the process sends itself that signal right after the n-th time it passes that step.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
from collections import Counter
from dataclasses import asdict, dataclass, field

from labse_common import filesystems
from labse_common.errors import UsageError
from labse_common.filesystems import join

log = logging.getLogger(__name__)

JOURNAL = "_COMMIT.json"
OLD_PREFIX = "_old-"
FAULT_ENV = "LABSE_COMMIT_FAULT"
#: The state of a swap in memory once its journal is gone (rolled back or forward).
ENDED = "ended"
_passed: Counter[str] = Counter()


def fault_point(step: str) -> None:
    """Where ``LABSE_COMMIT_FAULT`` may stop the process (see the module docstring)."""
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    want, n, sig = spec.split(":")
    if want != step:
        return
    _passed[step] += 1
    if _passed[step] == int(n):
        os.kill(os.getpid(), getattr(signal, f"SIG{sig}"))


class CommitError(UsageError, ValueError):
    """A journal that cannot be followed; a person must look (one line, exit 2)."""


# --- local folders ---------------------------------------------------------------------------


@dataclass
class Swap:
    """One local commit: ``old`` entries of ``folder`` go to ``aside``, ``new`` ones come from
    ``tmp`` (both folders inside ``folder``, given by name)."""

    folder: str
    tmp: str
    aside: str
    journal: str
    old: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)
    state: str = "swap"

    def path(self, *parts: str) -> str:
        return os.path.join(self.folder, *parts)


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems refuse a folder fsync; the rename is still atomic
        pass
    finally:
        os.close(fd)


def _write_journal(swap: Swap, state: str) -> None:
    swap.state = state
    data = {k: v for k, v in asdict(swap).items() if k not in ("folder", "journal")}
    part = f"{swap.journal}.part"
    with open(part, "w", encoding="utf-8") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(part, swap.journal)
    _fsync_dir(os.path.dirname(swap.journal) or ".")


def swap_local(swap: Swap) -> None:
    """Put ``swap.new`` in place of ``swap.old``, journaled. On any failure in this process
    (Ctrl-C too) the old output is put back before the error propagates; a kill leaves the
    journal for :func:`recover`."""
    try:
        _write_journal(swap, "swap")
        fault_point("journal")
        if swap.old:
            os.mkdir(swap.path(swap.aside))
        for name in swap.old:
            os.replace(swap.path(name), swap.path(swap.aside, name))
            fault_point("move")
        for name in swap.new:
            os.replace(swap.path(swap.tmp, name), swap.path(name))
            fault_point("move")
        _write_journal(swap, "done")
        fault_point("done")
    except BaseException:
        _undo(swap)
        raise
    _roll_forward(swap)


def _undo(swap: Swap) -> None:
    """Roll back a swap that failed in this process. The journal says ``undo`` first, so a
    kill during the undo is rolled back too; where even that cannot be written, the journal
    keeps its state and the disk is brought to it (a whole new output stays)."""
    was = swap.state
    if not os.path.exists(swap.journal):
        swap.state = ENDED  # the journal was never written: nothing moved
        return
    try:
        _write_journal(swap, "undo")
    except Exception as e:  # noqa: BLE001 - the error that stopped the swap is the one to raise
        log.error("could not write the commit journal %s (%s)", swap.journal, e)
        if was == "done":
            _roll_forward(swap)
            return
    _roll_back(swap)


def _roll_back(swap: Swap) -> None:
    """Undo a swap from whatever point it reached: every new entry found in place (its copy
    gone from ``tmp``) goes back there, every old entry found aside comes back."""
    for name in swap.new:
        if os.path.lexists(swap.path(name)) and not os.path.lexists(swap.path(swap.tmp, name)):
            os.replace(swap.path(name), swap.path(swap.tmp, name))
    for name in swap.old:
        src = swap.path(swap.aside, name)
        if os.path.lexists(src) and not os.path.lexists(swap.path(name)):
            os.replace(src, swap.path(name))
    aside = swap.path(swap.aside)
    if os.path.isdir(aside):
        try:
            os.rmdir(aside)
        except OSError:
            raise CommitError(
                f"output {swap.folder!r}: {aside} still holds entries of the previous output "
                f"that could not be put back; move them into {swap.folder} by hand, then delete "
                f"{swap.journal}"
            ) from None
    # The journal before the new entries: without it nobody could tell them from old ones.
    _remove(swap.journal)
    _remove(swap.path(swap.tmp))
    swap.state = ENDED


def _roll_forward(swap: Swap) -> None:
    """Finish a swap whose new output is whole: delete what it replaced, then the journal."""
    _remove(swap.path(swap.aside))
    fault_point("clean")
    _remove(swap.path(swap.tmp))
    _remove(swap.journal)
    swap.state = ENDED


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def read_swap(folder: str, journal: str) -> Swap | None:
    """The swap a journal left in ``folder``; None when there is none."""
    try:
        with open(journal, encoding="utf-8") as f:
            data = json.load(f)
        return Swap(folder=folder, journal=journal, **data)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as e:
        raise CommitError(
            f"output {folder!r}: the commit journal {journal} cannot be read ({e}); an earlier "
            "commit was interrupted: compare its _old-*/_tmp-* folders with the output by hand"
        ) from None


def recover_local(folder: str, journal: str) -> str | None:
    """Finish the commit a killed job left in ``folder`` (module docstring); returns what was
    done (``"rolled back"``, ``"rolled forward"``) or None when there was nothing to do."""
    swap = read_swap(folder, journal)
    if swap is None:
        return None
    if swap.state == "done":
        _roll_forward(swap)
        return "rolled forward"
    _roll_back(swap)
    return "rolled back"


# --- object stores ---------------------------------------------------------------------------


@dataclass
class Copy:
    """One object-store commit: ``srcs`` (under the temporary prefix) are copied to ``dsts``;
    ``saved`` pairs keep the old objects those copies replace; ``gone`` are old objects the new
    output lacks, deleted once the new one is whole. ``old`` is every old object."""

    journal: str
    tmp: str
    aside: str
    srcs: list[str] = field(default_factory=list)
    dsts: list[str] = field(default_factory=list)
    saved: list[list[str]] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    old: list[str] = field(default_factory=list)
    state: str = "swap"


def _write_remote_journal(copy: Copy, state: str) -> None:
    copy.state = state
    data = {k: v for k, v in asdict(copy).items() if k != "journal"}
    with filesystems.create(copy.journal) as f:  # an object appears whole or not at all
        f.write(json.dumps(data).encode("utf-8"))


def _copy_objects(pairs: list[tuple[str, str]] | list[list[str]]) -> None:
    """Copy object-store objects one by one. Beam's S3 ``copy`` returns its failures instead of
    raising them: they are raised here, so a failed copy can never pass for a done one."""
    from labse_common.errors import RemoteError

    for src, dst in pairs:
        results = filesystems.filesystem(src).copy([src], [dst])
        bad = [err for *_, err in (results or []) if err is not None]
        if bad:
            raise RemoteError(f"could not copy {src} to {dst}: {bad[0]}")
        fault_point("move")


def swap_remote(copy: Copy) -> None:
    """The object-store commit (module docstring), journaled like :func:`swap_local`."""
    try:
        _write_remote_journal(copy, "swap")
        fault_point("journal")
        _copy_objects(copy.saved)
        _copy_objects(list(zip(copy.srcs, copy.dsts)))
        _write_remote_journal(copy, "done")
        fault_point("done")
    except BaseException:
        try:
            _write_remote_journal(copy, "undo")
            _roll_back_remote(copy)
        except Exception as e:  # noqa: BLE001 - BeamIOError/RemoteError: the store is failing
            log.error(
                "could not undo the failed commit (%s); the journal %s stays for the next job",
                e,
                copy.journal,
            )
        raise
    _roll_forward_remote(copy)


def _existing(paths: list[str]) -> list[str]:
    return [p for p in paths if filesystems.exists(p)]


def _roll_back_remote(copy: Copy) -> None:
    saved = [(dst, aside) for dst, aside in copy.saved if filesystems.exists(aside)]
    for dst, aside in saved:  # the old bytes of a replaced name come back
        _copy_objects([(aside, dst)])
    old = set(copy.old)
    added = _existing([d for d in copy.dsts if d not in old])
    filesystems.delete(added + [a for _, a in saved])
    filesystems.delete([copy.journal])  # before the new objects, as in _roll_back
    filesystems.delete(_existing(copy.srcs))
    copy.state = ENDED


def _roll_forward_remote(copy: Copy) -> None:
    asides = [a for _, a in copy.saved]
    filesystems.delete(_existing(copy.gone + asides + copy.srcs))
    fault_point("clean")
    filesystems.delete([copy.journal])
    copy.state = ENDED


def recover_remote(output: str) -> str | None:
    """:func:`recover_local` for an object-store output."""
    journal = join(output, JOURNAL)
    if not filesystems.exists(journal):
        return None
    try:
        with filesystems.open_read(journal) as f:
            data = json.loads(f.read().decode("utf-8"))
        copy = Copy(journal=journal, **data)
    except (ValueError, TypeError) as e:
        raise CommitError(
            f"output {output!r}: the commit journal {journal} cannot be read ({e}); compare its "
            "_old-*/_tmp-* objects with the output by hand"
        ) from None
    if copy.state == "done":
        _roll_forward_remote(copy)
        return "rolled forward"
    _roll_back_remote(copy)
    return "rolled back"
