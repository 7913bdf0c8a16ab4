"""Local copies of inputs on object storage that a library can only read from a local path: an
encoder folder (``model.init``, ``--model s3://…``) and a single file (``combine.labels``).

A copy is downloaded once per machine into ``$XDG_CACHE_HOME/labse/`` (``~/.cache/labse/``
without it) and reused while the remote side is unchanged:

* **keyed by the listing**: the folder name is a hash of the URL and every object's relative
  path, size and modification time, so a replaced checkpoint is a new copy (and a new cache key
  for the runner's stages that read it), never a stale one;
* **whole or not at all**: a copy is written into a ``.part-`` folder beside it and renamed to
  its final name only when every object is there with its listed size; a download that was
  killed leaves only a ``.part-`` folder, which is never read (and is removed by the next
  download once its process is gone); a final folder whose files no longer have their listed
  sizes (someone deleted or cut one) is downloaded again;
* **one process or many**: several processes (Beam workers on one machine) may download the
  same copy at once; each writes its own ``.part-`` folder and the first rename wins.

``LABSE_KILL_AFTER=model_cache:<n>`` kills the downloading process after its n-th object (the
fault-injection point of :mod:`labse_common.resume_shards`), so the tests can show that a killed
download is not used.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path

from labse_common import filesystems
from labse_common.errors import InputError

log = logging.getLogger(__name__)

KILL_STAGE = "model_cache"
_PART = ".part-"
# One copy per URL and process: the runner asks for model.init many times while it plans.
_FETCHED: dict[tuple[str, str], Path] = {}


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/labse`` (``~/.cache/labse`` when it is not set)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "labse"


@dataclass(frozen=True, order=True)
class Entry:
    """One remote object of a copy: its path relative to the copied URL, size and mtime."""

    rel: str
    size: int
    mtime: float


def _listing(pattern: str, base: str) -> list[Entry]:
    with filesystems.remote_failures():
        found = filesystems.filesystem(pattern).match([pattern])[0].metadata_list
    return sorted(
        Entry(m.path[len(base) :], int(m.size_in_bytes), float(m.last_updated_in_seconds or 0))
        for m in found
        if m.path.startswith(base) and not m.path.endswith("/")
    )


def folder_listing(url: str) -> list[Entry]:
    """Every object under the folder ``url`` (sub-folders included), by relative path."""
    base = url.rstrip("/") + "/"
    return _listing(base + "**", base)


def _key(url: str, entries: list[Entry]) -> str:
    doc = json.dumps([url, [(e.rel, e.size, e.mtime) for e in entries]])
    return hashlib.sha256(doc.encode()).hexdigest()[:16]


def _complete(dest: Path, entries: list[Entry]) -> bool:
    return dest.is_dir() and all(
        (dest / e.rel).is_file() and (dest / e.rel).stat().st_size == e.size for e in entries
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def _drop_dead_parts(parent: Path, name: str) -> None:
    """Remove the ``.part-`` folders of ``name`` left by killed downloads on this host."""
    host = socket.gethostname()
    for part in parent.glob(f".{name}{_PART}*"):
        fields = part.name[len(f".{name}{_PART}") :].split("-")
        # .<name>.part-<host>-<pid>-<random>: only this host's processes can be asked
        if len(fields) >= 3 and "-".join(fields[:-2]) == host and fields[-2].isdigit():
            if not _alive(int(fields[-2])):
                shutil.rmtree(part, ignore_errors=True)


def _download(sources: list[str], entries: list[Entry], dest: Path, flag: str | None) -> None:
    """Every source object into its entry's place in a ``.part-`` folder, renamed to ``dest``
    when whole."""
    from labse_common.resume_shards import kill_point

    dest.parent.mkdir(parents=True, exist_ok=True)
    _drop_dead_parts(dest.parent, dest.name)
    prefix = f".{dest.name}{_PART}{socket.gethostname()}-{os.getpid()}-"
    part = Path(tempfile.mkdtemp(prefix=prefix, dir=dest.parent))
    try:
        for i, (source, e) in enumerate(zip(sources, entries), 1):
            target = part / e.rel
            target.parent.mkdir(parents=True, exist_ok=True)
            with (
                filesystems.remote_failures(),
                filesystems.open_read(source) as f,
                open(target, "wb") as out,
            ):
                shutil.copyfileobj(f, out, 1 << 20)
            if target.stat().st_size != e.size:  # the object changed while it was read
                raise InputError(source, f"read {target.stat().st_size} of {e.size} bytes", flag)
            kill_point(KILL_STAGE, i)
        _commit(part, dest, entries)
    finally:
        shutil.rmtree(part, ignore_errors=True)


def _commit(part: Path, dest: Path, entries: list[Entry]) -> None:
    """``part`` renamed to ``dest``; a whole ``dest`` another process renamed first is kept, a
    damaged one is replaced."""
    if dest.exists() and not _complete(dest, entries):
        stale = dest.with_name(f".{dest.name}.stale-{os.getpid()}")
        with contextlib.suppress(FileNotFoundError):
            dest.rename(stale)
        shutil.rmtree(stale, ignore_errors=True)
    try:
        part.rename(dest)
    except OSError:  # another process renamed its whole copy first
        if not _complete(dest, entries):
            raise


def _fetch(url: str, sources: list[str], entries: list[Entry], kind: str, flag: str | None) -> Path:
    """The whole copy of ``sources`` (as ``entries``) under ``cache_root()/kind``."""
    dest = cache_root() / kind / f"{_safe_name(url)}-{_key(url, entries)}"
    if not _complete(dest, entries):
        total = sum(e.size for e in entries)
        log.info("%s: copying %d object(s), %.1f MB, to %s", url, len(entries), total / 1e6, dest)
        _download(sources, entries, dest, flag)
    return dest


def _safe_name(url: str) -> str:
    tail = url.rstrip("/").rsplit("/", 1)[-1]
    return "".join(c if c.isalnum() or c in "._" else "_" for c in tail)[:40] or "root"


def local_folder(url: str, flag: str | None = None) -> Path:
    """The local copy of the folder ``url`` (downloaded when missing, damaged or out of date);
    the store checked first (credentials, endpoint, bucket: RemoteError), no object under the
    URL an InputError naming it and ``flag``."""
    done = _FETCHED.get(("models", url))
    if done is not None:
        return done
    from labse_common.remote import check_paths

    check_paths([url])
    entries = folder_listing(url)
    if not entries:
        raise InputError(url, "no such folder on object storage (no object under it)", flag)
    base = url.rstrip("/") + "/"
    sources = [base + e.rel for e in entries]
    _FETCHED["models", url] = path = _fetch(url, sources, entries, "models", flag)
    return path


def local_file(url: str, flag: str | None = None) -> Path:
    """The local copy of the object ``url`` (as :func:`local_folder`, for one file)."""
    done = _FETCHED.get(("files", url))
    if done is not None:
        return done
    from labse_common.remote import check_paths

    check_paths([url])
    entries = [e for e in _listing(url, url) if e.rel == ""]
    if not entries:
        raise InputError(url, "no such object on object storage", flag)
    name = _safe_name(url)  # the copy keeps the object's name (its extension says its format)
    folder = _fetch(url, [url], [Entry(name, entries[0].size, entries[0].mtime)], "files", flag)
    _FETCHED["files", url] = path = folder / name
    return path


#: Either file makes a folder an encoder: Hugging Face's or sentence-transformers'.
ENCODER_FILES = ("config.json", "modules.json")


def require_encoder_folder(url: str, flag: str | None = None) -> None:
    """An InputError (one line, exit 2) unless the folder ``url`` holds an encoder (config.json
    or modules.json at its top, or a Hugging Face cache's snapshots): what a launcher checks
    before its workers copy it."""
    names = {e.rel for e in folder_listing(url)}
    if not names:
        raise InputError(url, "no such folder on object storage (no object under it)", flag)
    # A Hugging Face cache layout (snapshots/<hash>/) is resolved once copied (model_init).
    if not names.intersection(ENCODER_FILES) and not any("snapshots/" in n for n in names):
        raise InputError(
            url,
            "no config.json or modules.json: not a Hugging Face or sentence-transformers "
            "encoder folder",
            flag,
        )


def local_copy(path: str | os.PathLike, flag: str | None = None) -> str | os.PathLike:
    """``path`` itself when local, else this machine's copy of the object (:func:`local_file`)."""
    return local_file(os.fspath(path), flag) if filesystems.is_remote(path) else path
