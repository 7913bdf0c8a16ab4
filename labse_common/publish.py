"""Publish a finished local output folder to ``s3://``, ``gs://`` or another local folder.

The stage runner calls :func:`check_destination` before any work runs (a dead endpoint, missing
credentials or a missing bucket is one line naming the flag and the URL, within seconds) and
:func:`publish` once the final folder is complete::

    check_destination(url, "--publish", protected={"the run folder": out})
    ... run the stages ...
    publish(final_folder, url, "--publish")   # {"files": ..., "bytes": ..., "url": ...}

**A publication never replaces what it did not write.** The destination must be empty, or hold
an earlier publication of this project (its ``_PUBLISHED.json``, or the ``_PUBLISHING.json`` of
one that was interrupted); that one is replaced only with ``overwrite=True``
(``--publish-overwrite``), and then exactly the files those manifests list are deleted or
replaced: a file there that they do not list is kept, and a new file that would land on it is
refused before anything changes. Anything else there (a folder with other files, a manifest this
project did not write) is refused. A local destination must also keep out of the folders given
as ``protected`` (the run folder, ``--data``) and of the folder being published: being one of
them, inside one or containing one is refused, on real paths (links resolved).

A publication is complete when ``URL/_PUBLISHED.json`` exists. :func:`publish`

1. writes ``_PUBLISHING.json`` first (the files of the previous publication and the new ones),
   so an interrupted publication is still recognised as this project's next time;
2. deletes the previous ``_PUBLISHED.json``, so a publication being replaced is never marked
   complete half-way;
3. deletes the files the previous manifest listed that the new folder no longer has (only
   those: objects this module did not publish are left alone);
4. copies every file under the folder to ``URL/<relative path>``;
5. lists the destination and checks that every file is there with its size;
6. writes the manifest (every file's path, size and sha256, the time, the source folder), then
   removes ``_PUBLISHING.json``.

A failure at any step (endpoint gone, HTTP error, an answer that is not S3's XML) is one
:class:`~labse_common.errors.RemoteError` naming the URL and the step; there is no manifest at
the destination then. Publishing again with ``overwrite=True`` is the way to finish.

**S3 goes through boto3 directly**, not Beam's ``FileSystems``: Beam's S3 filesystem hides
the object sizes of a listing behind its own error types. The client is
:func:`labse_common.remote.s3_client`'s (connect/read timeouts and attempts from
``LABSE_S3_CONNECT_TIMEOUT``, ``LABSE_S3_READ_TIMEOUT``, ``LABSE_S3_MAX_ATTEMPTS``; an answer
that is not S3's refused; a failure names the endpoint), with multipart uploads for large files
with parallel parts (s3transfer, which aborts a failed multipart upload), and one listing for
the check. Its options are the ones :func:`labse_common.remote.check_s3` uses: Beam's S3 flags
from ``$LABSE_BEAM_OPTIONS`` (``--s3_endpoint_url``, ``--s3_access_key_id``,
``--s3_secret_access_key``, ``--s3_region_name``, ``--s3_verify``; or a job's own options
passed as ``options``), otherwise boto3's environment (``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``). **GCS goes through Beam's FileSystems** (configured by
:mod:`labse_common.filesystems`); **a local destination** through plain file copies. The three
destinations are :mod:`labse_common.publish_targets`.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from labse_common import remote
from labse_common.errors import InputError, RemoteError, UsageError
from labse_common.publish_targets import (
    MANIFEST,
    LocalTarget,
    S3Target,
    SourceFile,
    Target,
    is_local_url,
    local_path,
    named_url,
    one_line,
    open_target,
    split_s3,
)

log = logging.getLogger(__name__)

#: Present while a publication is under way (or was interrupted): the files it may have written.
MARKER = "_PUBLISHING.json"

#: The runner's flag that lets a publication replace an earlier one.
OVERWRITE_FLAG = "--publish-overwrite"

FORMAT_VERSION = 1


def check_destination(
    url: str,
    flag: str = "--publish",
    *,
    options: Any = None,
    overwrite: bool = False,
    overwrite_flag: str = OVERWRITE_FLAG,
    protected: Mapping[str, str | os.PathLike] | None = None,
) -> None:
    """Preflight a publication destination before any work runs; raises UsageError/RemoteError.

    ``s3://``: client library, credentials, endpoint and bucket
    (:func:`labse_common.remote.check_s3`, a few seconds at most). ``gs://``: the client
    library (:func:`labse_common.remote.check_gcs`). A local folder: it is a folder or can be
    created (its nearest existing parent is a writable folder), and it neither is, nor is inside,
    nor contains a folder of ``protected`` (description -> folder, e.g. ``{"the run folder":
    out}``). Then what is there: nothing, or an earlier publication and ``overwrite`` (see the
    module docstring). ``options``: Beam pipeline options for S3 (default:
    ``$LABSE_BEAM_OPTIONS``, else boto3's environment).
    """
    _preflight(os.fspath(url), flag, options, overwrite, overwrite_flag, protected or {})


@dataclass(frozen=True)
class _Destination:
    target: Target
    listed: set[str]  # the files an earlier publication there wrote (may replace)
    present: dict[str, int]  # every file there now (relative path -> size)


def _preflight(
    url: str,
    flag: str,
    options: Any,
    overwrite: bool,
    overwrite_flag: str,
    protected: Mapping[str, str | os.PathLike],
) -> _Destination:
    where = named_url(flag, url)
    if not url.strip():
        raise UsageError(f"{flag}: empty destination")
    if url.startswith("s3://"):
        split_s3(url, flag)
        remote.check_s3(url, options, flag)
    elif url.startswith("gs://"):
        if not url[len("gs://") :].split("/", 1)[0]:
            raise UsageError(f"{where}: no bucket in the URL")
        remote.check_gcs(url, flag)
    elif not is_local_url(url):
        raise UsageError(f"{where}: publishes only to s3://, gs:// or a local folder")
    else:
        _check_local(local_path(url), where)
        _refuse_overlap(local_path(url), protected, where)
    target = open_target(url, flag, options)
    present = target.sizes("listing the destination")
    return _Destination(target, _earlier(target, present, overwrite, overwrite_flag), present)


def _refuse_overlap(dest: Path, protected: Mapping[str, str | os.PathLike], where: str) -> None:
    """A local destination that is, is inside or contains a protected folder: refused."""
    real = dest.resolve()
    for what, folder in protected.items():
        other = Path(folder).expanduser().resolve()
        if real == other:
            how = "is"
        elif other in real.parents:
            how = "is inside"
        elif real in other.parents:
            how = "contains"
        else:
            continue
        raise UsageError(f"{where}: {how} {what} {other}; publish to a folder outside it")


def _earlier(
    target: Target, present: dict[str, int], overwrite: bool, overwrite_flag: str
) -> set[str]:
    """The files an earlier publication at the destination lists, when it may be replaced;
    refuses a destination holding anything else, or an earlier publication without overwrite."""
    if target.empty(present):
        return set()
    manifest, marker = target.read(MANIFEST), target.read(MARKER)
    if manifest is None and marker is None:
        raise UsageError(
            f"{target.where}: is not empty and holds no earlier publication ({MANIFEST}); "
            "publishing never replaces files it did not write: choose an empty or new destination"
        )
    listed = _listed(manifest, MANIFEST, target.where) | _listed(marker, MARKER, target.where)
    if not overwrite:
        what = "an earlier publication" if manifest is not None else "an interrupted publication"
        raise UsageError(
            f"{target.where}: holds {what} ({MANIFEST if manifest is not None else MARKER}); "
            f"add {overwrite_flag} to replace the files it lists, or choose another destination"
        )
    return listed


def _check_local(dest: Path, where: str) -> None:
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"{where}: exists and is not a folder")
    parent = dest
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise UsageError(f"{where}: cannot create it: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{where}: cannot write into {parent} (permission denied)")


def _inventory(folder: Path) -> list[SourceFile]:
    """Every file under ``folder`` (symlinks to files followed), with size and sha256."""
    files: list[SourceFile] = []
    for root, dirs, names in os.walk(folder):
        dirs.sort()
        for name in sorted(names):
            path = Path(root) / name
            rel = path.relative_to(folder).as_posix()
            if rel in (MANIFEST, MARKER):
                log.warning("%s: not published (the destination's own file replaces it)", path)
                continue
            digest = hashlib.sha256()
            try:
                with open(path, "rb") as f:
                    for chunk in iter(lambda f=f: f.read(1 << 20), b""):
                        digest.update(chunk)
                size = path.stat().st_size
            except OSError as e:
                raise InputError(path, f"cannot read a file to publish ({one_line(e)})") from None
            files.append(SourceFile(rel, path, size, digest.hexdigest()))
    return files


def _safe_rel(rel: Any) -> bool:
    """A relative path from a manifest that stays inside the destination."""
    if not isinstance(rel, str) or not rel or rel.startswith("/") or "\\" in rel:
        return False
    parts = PurePosixPath(rel).parts
    return all(p not in ("", ".", "..") for p in parts) and rel not in (MANIFEST, MARKER)


def _listed(raw: bytes | None, name: str, where: str) -> set[str]:
    """The relative paths a manifest of this project lists; refuses one it did not write."""
    if raw is None:
        return set()
    try:
        doc = json.loads(raw)
        ours = type(doc["format_version"]) is int and isinstance(doc["files"], list)
        paths = [e["path"] for e in doc["files"]] if ours else []
    except (ValueError, KeyError, TypeError, AttributeError):
        ours, paths = False, []
    if not ours or not all(_safe_rel(p) for p in paths):
        raise UsageError(
            f"{where}: its {name} is not a publication manifest of this project, so nothing there "
            "is replaced: choose an empty or new destination"
        )
    return set(paths)


def _check_sizes(target: Target, files: Iterable[SourceFile]) -> None:
    files = list(files)
    found = target.sizes("listing the uploaded files")
    bad = [
        f"{f.rel} (missing)"
        if f.rel not in found
        else f"{f.rel} ({found[f.rel]} bytes, expected {f.size})"
        for f in files
        if found.get(f.rel) != f.size
    ]
    if bad:
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        s3_none = isinstance(target, S3Target) and len(bad) == len(files)
        hint = " (does the endpoint speak S3?)" if s3_none else ""
        error = UsageError if isinstance(target, LocalTarget) else RemoteError
        raise error(
            f"{target.where}: after the upload {len(bad)} of {len(files)} files are "
            f"missing or of the wrong size{hint}: {', '.join(bad[:3])}{more}"
        )


def _refuse_clashes(dest: _Destination, files: list[SourceFile]) -> None:
    """A new file (or a folder it needs) landing on a file the earlier publication did not
    write: refused before anything changes."""
    mine = dest.listed | {MANIFEST, MARKER}
    clashes: list[str] = []
    for f in files:
        needed = [f.rel, *(p.as_posix() for p in PurePosixPath(f.rel).parents if str(p) != ".")]
        clashes += [p for p in needed if p in dest.present and p not in mine]
    if clashes:
        clashes = sorted(set(clashes))
        more = f" and {len(clashes) - 3} more" if len(clashes) > 3 else ""
        raise UsageError(
            f"{dest.target.where}: would replace {', '.join(clashes[:3])}{more}, which the "
            f"earlier publication there did not write; move it away or choose another destination"
        )


def _json(doc: dict) -> bytes:
    return (json.dumps(doc, indent=1) + "\n").encode()


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def publish(
    folder: str | os.PathLike,
    url: str,
    flag: str = "--publish",
    *,
    options: Any = None,
    overwrite: bool = False,
    overwrite_flag: str = OVERWRITE_FLAG,
    protected: Mapping[str, str | os.PathLike] | None = None,
) -> dict:
    """Copy every file under ``folder`` to ``url/<relative path>`` and write ``_PUBLISHED.json``
    last; returns ``{"files": n, "bytes": total, "url": url}``. See the module docstring for
    ``overwrite`` and ``protected`` (the folder itself is always protected).

    Raises UsageError (a folder published into itself or a protected folder, a destination
    holding what this module did not write, an earlier publication without ``overwrite``),
    InputError (a file of the folder cannot be read) or RemoteError (the object store failed at
    some step)."""
    url = os.fspath(url)
    src = Path(folder).expanduser().absolute()
    if not src.is_dir():
        raise UsageError(
            f"{named_url(flag, url)}: the folder to publish, {folder}, is not a folder"
        )
    guard = {**(protected or {}), "the folder being published": src}
    dest = _preflight(url, flag, options, overwrite, overwrite_flag, guard)
    target = dest.target
    t0 = time.monotonic()
    files = _inventory(src)
    _refuse_clashes(dest, files)
    new = {f.rel for f in files}
    # 1-3: marked as under way (with every file it may write), the old publication stops being
    # complete, then loses the files it no longer has.
    marker = {"format_version": FORMAT_VERSION, "started_at": _now(), "source": str(src)}
    target.write(
        MARKER, _json({**marker, "files": [{"path": r} for r in sorted(dest.listed | new)]})
    )
    target.delete([MANIFEST])
    stale = sorted(dest.listed - new)
    target.delete(stale)
    # 4-6: the files, the check, the manifest; then the publication is no longer under way.
    for f in files:
        target.put(f)
    _check_sizes(target, files)
    total = sum(f.size for f in files)
    manifest = {
        "format_version": FORMAT_VERSION,
        "published_at": _now(),
        "source": str(src),
        "url": target.url,
        "file_count": len(files),
        "total_bytes": total,
        "files": [{"path": f.rel, "bytes": f.size, "sha256": f.sha256} for f in files],
    }
    target.write(MANIFEST, _json(manifest))
    target.delete([MARKER])
    log.info(
        "published %d files (%d bytes) from %s to %s in %.1fs (%d old files removed)",
        len(files),
        total,
        src,
        target.url,
        time.monotonic() - t0,
        len(stale),
    )
    return {"files": len(files), "bytes": total, "url": target.url}
