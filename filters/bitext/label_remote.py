"""``python -m filters label s3://…/labels.tsv`` (or ``gs://…``): the labelling page on a file
in object storage, saved back there after every label.

The person labelling is often not on the machine that runs the pipeline (a cluster's head node
runs it; the run folder is on object storage), so the page edits the remote file itself, which
stays the truth the runner reads when it is started again:

* before the page starts, the URL is checked (credentials, endpoint, bucket: one line and exit
  2, as every command's remote paths) and the object must exist; it is downloaded to a private
  temporary folder and the page serves that working copy as it serves a local file (every flag
  works as for a local file; ``_config.yaml`` and ``sample/source.json`` beside the URL are
  found as beside a local file, and the mined pairs source.json names are looked up in the run
  folder when the path it names is not on this machine);
* after every save the page makes (a label, an undo, round two's rows) the whole file is
  uploaded to the URL in one request: an object put is atomic, so a reader (the runner) sees the
  old file or the new one, never a part;
* a change made by someone else is never overwritten: each upload is conditional on the object
  being the version this page last read or wrote (S3: ``PutObject`` with ``If-Match`` on its
  ETag, after a ``HeadObject`` for servers that ignore the condition; other schemes, through
  Beam's filesystems: its size and checksum compared just before the write, which leaves a
  window of one request). When it changed, nothing more is saved: the page shows one line
  saying so, and the command ends with that line and exit status 2.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import logging
import os
import posixpath
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filters.bitext.label_store import LabelSheet, SheetChanged
from labse_common import filesystems
from labse_common.errors import InputError, RemoteError

log = logging.getLogger("filters.bitext.label")

#: Files beside the labels file that the page reads when they are there (the runner's layout).
SOURCES = ("source.json", "sample/source.json")
CONFIG = "_config.yaml"


class RemoteChanged(SheetChanged, OSError):
    """The remote object was changed by something else: not overwritten, nothing more saved.
    An OSError too, so every save path of the page (round two's included) says it as an error."""


class StoreFailure(RemoteError, OSError):
    """The store failed a request: one line and exit 2 before the page starts; an OSError, so a
    save that fails is the page's "could not save" error, as a full disk is for a local file."""


@dataclass(frozen=True)
class Version:
    """One version of the remote object: its size and the store's tag (S3's ETag, a checksum)."""

    size: int
    tag: str


class _S3Object:
    """An ``s3://`` object through the project's boto3 client (``$LABSE_BEAM_OPTIONS``)."""

    def __init__(self, url: str) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        from labse_common.remote import s3_client

        self.url = url
        self.bucket, _, self.key = url[len("s3://") :].partition("/")
        self.s3 = s3_client()
        self.errors = (BotoCoreError, ClientError)
        self.ClientError = ClientError

    def _fail(self, what: str, e: BaseException) -> StoreFailure:
        from labse_common.remote_errors import describe

        endpoint = self.s3.meta.endpoint_url
        return StoreFailure(f"{what} {self.url} failed: S3 endpoint {endpoint} {describe(e)}")

    def _code(self, e: Any) -> str:
        return str(e.response.get("Error", {}).get("Code", ""))

    def stat(self) -> Version | None:
        try:
            head = self.s3.head_object(Bucket=self.bucket, Key=self.key)
        except self.ClientError as e:
            if self._code(e) in ("404", "NoSuchKey", "NotFound"):
                return None
            raise self._fail("HeadObject", e) from None
        except self.errors as e:
            raise self._fail("HeadObject", e) from None
        return Version(int(head["ContentLength"]), head["ETag"])

    def read(self) -> tuple[bytes, Version]:
        try:
            got = self.s3.get_object(Bucket=self.bucket, Key=self.key)
            data = got["Body"].read()
        except self.errors as e:
            raise self._fail("GetObject", e) from None
        return data, Version(len(data), got["ETag"])

    def write(self, data: bytes, expected: Version) -> Version | None:
        """Put ``data`` if the object is still ``expected``; None (nothing written) if not."""
        if self.stat() != expected:  # a server that ignores If-Match still gets this check
            return None
        kw: dict[str, Any] = {"IfMatch": expected.tag}
        try:
            try:
                put = self.s3.put_object(Bucket=self.bucket, Key=self.key, Body=data, **kw)
            except self.ClientError as e:
                if self._code(e) in ("412", "PreconditionFailed"):
                    return None
                if self._code(e) not in ("501", "NotImplemented"):
                    raise
                # A server without conditional writes: the HeadObject above was the check.
                put = self.s3.put_object(Bucket=self.bucket, Key=self.key, Body=data)
        except self.errors as e:
            raise self._fail("PutObject", e) from None
        return Version(len(data), put["ETag"])


class _BeamObject:
    """Any other scheme (``gs://``) through Beam's filesystems (:mod:`labse_common.filesystems`)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.fs = filesystems.filesystem(url)

    def stat(self) -> Version | None:
        if not filesystems.exists(self.url):
            return None
        meta = self.fs.metadata(self.url)
        try:
            tag = str(self.fs.checksum(self.url))
        except NotImplementedError:
            tag = repr(meta.last_updated_in_seconds)
        return Version(int(meta.size_in_bytes), tag)

    def read(self) -> tuple[bytes, Version]:
        for _ in range(3):  # the version read before and after the bytes must agree
            before = self.stat()
            with filesystems.open_read(self.url) as f:
                data = f.read()
            if before is not None and self.stat() == before and before.size == len(data):
                return data, before
        raise StoreFailure(f"{self.url} changes while it is read: is something writing it?")

    def write(self, data: bytes, expected: Version) -> Version | None:
        if self.stat() != expected:
            return None
        with filesystems.create(self.url) as f:
            f.write(data)
        return self.stat()


def remote_object(url: str) -> _S3Object | _BeamObject:
    """The object at ``url``, its store checked first (credentials, endpoint, bucket): a
    RemoteError (one line, exit 2) when it cannot be used."""
    from labse_common.remote import check_paths

    if not url.split("://", 1)[1].partition("/")[2]:
        raise RemoteError(f"FILE {url}: no object named (give s3://BUCKET/PATH/labels.tsv)")
    check_paths([url])
    return _S3Object(url) if url.startswith("s3://") else _BeamObject(url)


class RemoteCopy:
    """The local working copy of the remote labels file, and the one place that uploads it."""

    def __init__(self, obj: _S3Object | _BeamObject, folder: Path) -> None:
        self.obj = obj
        self.url = obj.url
        self.path = folder / (posixpath.basename(obj.url) or "labels.tsv")
        self.version: Version | None = None
        self.stopped = ""  # the line that said why saving stopped ("": saving goes on)
        self._tried = ""  # sha256 of the last upload that failed: its object may be ours

    def download(self) -> None:
        if self.obj.stat() is None:
            raise InputError(self.url, "no such object", "FILE")
        data, self.version = self.obj.read()
        self.path.write_bytes(data)
        log.info("labelling %s through a working copy %s", self.url, self.path)

    def upload(self, data: bytes) -> None:
        """``data`` to the URL if nobody else changed it since; else :class:`RemoteChanged`."""
        if self.stopped:
            raise RemoteChanged(self.stopped)
        assert self.version is not None
        try:
            new = self.obj.write(data, self.version)
            if new is None and self._tried and self._ours():
                new = self.obj.write(data, self.version)
        except OSError:
            self._tried = hashlib.sha256(data).hexdigest()  # it may have landed all the same
            raise
        if new is None:
            self.stopped = (
                f"{self.url} was changed by something else since this page read it; the label "
                "was not saved and no more labels will be: stop python -m filters label and "
                "start it again to label the file as it is now"
            )
            log.error("%s", self.stopped)
            raise RemoteChanged(self.stopped)
        self.version, self._tried = new, ""

    def _ours(self) -> bool:
        """Whether the remote object is the upload whose answer was lost (then it is the
        version to write over, not someone else's change)."""
        data, version = self.obj.read()
        if hashlib.sha256(data).hexdigest() != self._tried:
            return False
        self.version = version
        return True


class RemoteSheet(LabelSheet):
    """A :class:`LabelSheet` on the working copy whose every save is uploaded to the URL."""

    def __init__(self, path: str | os.PathLike, *args: Any, copy: RemoteCopy, **kw: Any) -> None:
        self.copy = copy
        super().__init__(path, *args, **kw)

    def _save(self) -> None:
        if self.copy.stopped:  # nothing more is saved, the working copy included
            raise RemoteChanged(self.copy.stopped)
        super()._save()
        self.copy.upload(self.path.read_bytes())

    def state(self) -> dict[str, Any]:
        return {**super().state(), "file": self.copy.url}


def _beside(url: str, name: str) -> str:
    return posixpath.join(posixpath.dirname(url), name)


def _fetch_config(url: str, folder: Path) -> None:
    """The run's ``_config.yaml`` beside the URL, copied beside the working copy (where the page
    looks for it when --config is not given)."""
    remote = _beside(url, CONFIG)
    if filesystems.exists(remote):
        with filesystems.open_read(remote) as f:
            (folder / CONFIG).write_bytes(f.read())


def _remote_pairs(url: str) -> str | None:
    """The mined pairs the sample beside ``url`` was drawn from: the path its source.json names
    when it is there, else the same file in the run folder (a runner on another machine wrote a
    path of its own scratch copy): found by its last folders, and only when its size is the one
    source.json recorded."""
    for name in SOURCES:
        source = _beside(url, name)
        if not filesystems.exists(source):
            continue
        try:
            with filesystems.open_read(source) as f:
                doc = json.loads(f.read())
            pairs, size = str(doc["pairs"]), doc.get("bytes")
        except (ValueError, KeyError, TypeError):
            log.warning("%s: not a sample's source.json; no live estimate", source)
            return None
        if filesystems.is_remote(pairs) or os.path.isfile(pairs):
            return pairs
        parts = Path(pairs).parts
        for n in (2, 3):
            candidate = _beside(url, "/".join(parts[-n:]))
            if filesystems.exists(candidate) and size in (
                None,
                filesystems.filesystem(candidate).metadata(candidate).size_in_bytes,
            ):
                return candidate
        log.warning("%s names %s, which is not in the run folder; no live estimate", source, pairs)
        return None
    return None


def run_remote(args: argparse.Namespace, run: Callable[..., int]) -> int:
    """``filters label URL``: ``run`` (the local command) on a working copy uploaded after every
    save; exit 2 at the end when saving stopped because someone else changed the object."""
    url = args.file
    obj = remote_object(url)
    with tempfile.TemporaryDirectory(prefix="labse-label-") as tmp:  # mode 0700: private
        copy = RemoteCopy(obj, Path(tmp))
        local = argparse.Namespace(**{**vars(args), "file": str(copy.path)})
        try:
            copy.download()
            if local.config is None:
                _fetch_config(url, Path(tmp))
            if local.pairs is None:
                local.pairs = _remote_pairs(url)
        except StoreFailure:
            raise
        except OSError as e:  # Beam's filesystems: one line, not a traceback
            raise StoreFailure(f"FILE {url}: reading it failed ({e})") from None
        try:
            rc = run(local, functools.partial(RemoteSheet, copy=copy))
        except InputError as e:
            if e.path != str(copy.path):
                raise
            raise InputError(url, e.problem, e.flag or "FILE") from None  # the person's name
        except KeyboardInterrupt:
            if copy.stopped:
                raise RemoteError(copy.stopped) from None
            raise
    if copy.stopped:
        raise RemoteError(copy.stopped)
    return rc
