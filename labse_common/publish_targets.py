"""The destinations :mod:`labse_common.publish` copies a folder to: S3 through boto3 directly
(:class:`S3Target`: multipart uploads with parallel parts, one listing for the check), GCS and
other Beam filesystems through Beam's ``FileSystems`` (:class:`BeamTarget`), a local folder
through plain file copies (:class:`LocalTarget`). Each offers the operations a publication
needs (:class:`Target`: read, delete, put, list sizes, write), each raising one
:class:`~labse_common.errors.RemoteError` naming the URL and the step
(:func:`one_line` shortens what the store said).
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labse_common import remote
from labse_common.errors import RemoteError, UsageError
from labse_common.filesystems import is_remote

#: Written last: the publication at the destination is complete.
MANIFEST = "_PUBLISHED.json"

#: Files from this size are sent as multipart uploads of this part size.
PART_BYTES = 8 << 20

#: Parts of one file in flight at once.
MAX_CONCURRENCY = 4


@dataclass(frozen=True)
class SourceFile:
    rel: str  # relative path with "/" separators
    path: Path
    size: int
    sha256: str


#: The query of a URL in an error message (``?uploadId=...&partNumber=2``): long, no help.
_QUERY = re.compile(r"(https?://[^\s\"'?]*)\?[^\s\"']*")


def one_line(e: BaseException, limit: int = 300) -> str:
    """An exception as a short single line: S3's error code and message where there is one."""
    response = getattr(e, "response", None)
    if isinstance(response, dict) and response.get("Error"):
        err = response["Error"]
        text = f"{err.get('Code', '')} {err.get('Message', '')}".strip() or type(e).__name__
    else:
        text = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    text = _QUERY.sub(r"\1", " ".join(text.split()))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def named_url(flag: str | None, url: str) -> str:
    return f"{flag} {url}" if flag else url


def is_local_url(url: str) -> bool:
    return not is_remote(url)


def local_path(url: str) -> Path:
    path = url[len("file://") :] if url.startswith("file://") else url
    return Path(path).expanduser().absolute()


def split_s3(url: str, flag: str | None) -> tuple[str, str]:
    """``s3://bucket/a/b/`` -> ("bucket", "a/b")."""
    rest = url[len("s3://") :]
    bucket, _, prefix = rest.partition("/")
    prefix = prefix.strip("/")
    if not bucket:
        raise UsageError(f"{named_url(flag, url)}: no bucket in the URL")
    if "//" in prefix or any(p in (".", "..") for p in prefix.split("/") if prefix):
        raise UsageError(f"{named_url(flag, url)}: the prefix has empty or '.'/'..' parts")
    return bucket, prefix


class Target:
    """One destination: the operations :func:`publish` needs, each raising RemoteError."""

    url: str
    where: str

    def read(self, name: str) -> bytes | None: ...
    def delete(self, rels: list[str]) -> None: ...
    def put(self, f: SourceFile) -> None: ...
    def sizes(self, what: str) -> dict[str, int]: ...
    def write(self, name: str, data: bytes) -> None: ...

    def empty(self, present: dict[str, int]) -> bool:
        """Nothing at the destination (``present``: its listing)."""
        return not present

    def fail(self, what: str, e: BaseException) -> RemoteError:
        return RemoteError(f"{self.where}: {what} failed ({one_line(e)})")


class S3Target(Target):
    def __init__(self, url: str, flag: str | None, options: Any) -> None:
        from boto3.exceptions import S3UploadFailedError
        from boto3.s3.transfer import TransferConfig
        from botocore.exceptions import BotoCoreError, ClientError

        self.errors = (BotoCoreError, ClientError, S3UploadFailedError, OSError)
        self.ClientError = ClientError
        self.bucket, self.prefix = split_s3(url, flag)
        self.url = f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"
        self.where = named_url(flag, url)
        # The same options, credentials and limits as remote.check_s3 (LABSE_S3_* timeouts and
        # attempts; an answer that is not S3's refused), so the preflight checked this.
        self.s3 = remote.s3_client(options, max_pool_connections=2 * MAX_CONCURRENCY)
        self.transfer = TransferConfig(
            multipart_threshold=PART_BYTES,
            multipart_chunksize=PART_BYTES,
            max_concurrency=MAX_CONCURRENCY,
        )

    def key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def fail(self, what: str, e: BaseException) -> RemoteError:
        from labse_common.remote_errors import describe

        # s3transfer wraps a part's error; the server's own words are in the original.
        cause = (e.__cause__ or e.__context__) if type(e).__name__ == "S3UploadFailedError" else e
        return RemoteError(
            f"{self.where}: {what} failed: S3 endpoint "
            f"{self.s3.meta.endpoint_url} {describe(cause or e)}"
        )

    def read(self, name: str) -> bytes | None:
        try:
            return self.s3.get_object(Bucket=self.bucket, Key=self.key(name))["Body"].read()
        except self.ClientError as e:
            if str(e.response.get("Error", {}).get("Code")) in ("NoSuchKey", "404", "NotFound"):
                return None
            raise self.fail(f"reading the previous {name}", e) from None
        except self.errors as e:
            raise self.fail(f"reading the previous {name}", e) from None

    def delete(self, rels: list[str]) -> None:
        # One DeleteObject per key: DeleteObjects needs a checksum header that some
        # S3-compatible servers refuse, and a publication replaces few files.
        for rel in rels:
            try:
                self.s3.delete_object(Bucket=self.bucket, Key=self.key(rel))
            except self.errors as e:
                raise self.fail(f"deleting {rel}", e) from None

    def put(self, f: SourceFile) -> None:
        try:
            self.s3.upload_file(str(f.path), self.bucket, self.key(f.rel), Config=self.transfer)
        except self.errors as e:
            raise self.fail(f"uploading {f.rel} ({f.size} bytes)", e) from None

    def sizes(self, what: str) -> dict[str, int]:
        out: dict[str, int] = {}
        start = f"{self.prefix}/" if self.prefix else ""
        try:
            for page in self.s3.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=start
            ):
                for obj in page.get("Contents", []):
                    if obj["Key"] != start:  # the "folder" object a console creates
                        out[obj["Key"][len(start) :]] = int(obj["Size"])
        except self.errors as e:
            raise self.fail(what, e) from None
        return out

    def write(self, name: str, data: bytes) -> None:
        key = self.key(name)
        try:
            self.s3.put_object(
                Bucket=self.bucket, Key=key, Body=data, ContentType="application/json"
            )
            if name != MANIFEST:  # the manifest says "complete": only it is read back
                return
            size = self.s3.head_object(Bucket=self.bucket, Key=key)["ContentLength"]
        except self.errors as e:
            raise self.fail(f"writing {name}", e) from None
        if size != len(data):
            raise RemoteError(f"{self.where}: {name} came back with {size} bytes, not {len(data)}")


class BeamTarget(Target):
    """gs:// (or any scheme Beam's FileSystems serves) through labse_common.filesystems."""

    def __init__(self, url: str, flag: str | None) -> None:
        from labse_common import filesystems as fs

        self.fs = fs
        self.url = url.rstrip("/")
        self.where = named_url(flag, url)
        errors: list[type[BaseException]] = [OSError]  # Beam's BeamIOError is an OSError
        try:
            from google.api_core.exceptions import GoogleAPIError

            errors.append(GoogleAPIError)
        except ImportError:
            pass
        try:
            from google.auth.exceptions import GoogleAuthError

            errors.append(GoogleAuthError)
        except ImportError:
            pass
        self.errors = tuple(errors)

    def path(self, rel: str) -> str:
        return f"{self.url}/{rel}"

    def read(self, name: str) -> bytes | None:
        path = self.path(name)
        try:
            if not self.fs.exists(path):
                return None
            with self.fs.open_read(path) as f:
                return f.read()
        except self.errors as e:
            raise self.fail(f"reading the previous {name}", e) from None

    def delete(self, rels: list[str]) -> None:
        paths = [self.path(r) for r in rels]
        try:
            present = [p for p in paths if self.fs.exists(p)]
            self.fs.delete(present)
        except self.errors as e:
            raise self.fail(f"deleting {len(paths)} old files", e) from None

    def put(self, f: SourceFile) -> None:
        try:
            with open(f.path, "rb") as src, self.fs.create(self.path(f.rel)) as dst:
                shutil.copyfileobj(src, dst, PART_BYTES)
        except self.errors as e:
            raise self.fail(f"uploading {f.rel} ({f.size} bytes)", e) from None

    def sizes(self, what: str) -> dict[str, int]:
        start = self.url + "/"
        try:
            found = self.fs.filesystem(self.url).match([start + "**"])[0].metadata_list
        except self.errors as e:
            raise self.fail(what, e) from None
        return {
            m.path[len(start) :]: int(m.size_in_bytes) for m in found if m.path.startswith(start)
        }

    def write(self, name: str, data: bytes) -> None:
        try:
            with self.fs.create(self.path(name)) as dst:
                dst.write(data)
        except self.errors as e:
            raise self.fail(f"writing {name}", e) from None


class LocalTarget(Target):
    """A local folder: each file copied under a temporary name and renamed into place."""

    def __init__(self, url: str, flag: str | None) -> None:
        self.dest = local_path(url)
        self.url = str(self.dest)
        self.where = named_url(flag, url)

    def fail(self, what: str, e: BaseException) -> UsageError:
        return UsageError(f"{self.where}: {what} failed ({one_line(e)})")

    def read(self, name: str) -> bytes | None:
        try:
            return (self.dest / name).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise self.fail(f"reading the previous {name}", e) from None

    def empty(self, present: dict[str, int]) -> bool:
        # A folder holding only (empty) folders is not empty either: they are not ours.
        try:
            return not self.dest.exists() or not any(self.dest.iterdir())
        except OSError as e:
            raise self.fail("listing the destination", e) from None

    def delete(self, rels: list[str]) -> None:
        for rel in rels:
            path = self.dest / rel
            try:
                path.unlink(missing_ok=True)
                for parent in path.parents:  # folders the old publication left empty
                    if parent == self.dest or self.dest not in parent.parents:
                        break
                    if any(parent.iterdir()):
                        break
                    parent.rmdir()
            except OSError as e:
                raise self.fail(f"deleting {rel}", e) from None

    def put(self, f: SourceFile) -> None:
        target = self.dest / f.rel
        tmp = target.with_name(f".{target.name}.publishing")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f.path, tmp)
            os.replace(tmp, target)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise self.fail(f"copying {f.rel}", e) from None

    def sizes(self, what: str) -> dict[str, int]:
        try:
            return {
                p.relative_to(self.dest).as_posix(): p.stat().st_size
                for p in self.dest.rglob("*")
                if p.is_file()
            }
        except OSError as e:
            raise self.fail(what, e) from None

    def write(self, name: str, data: bytes) -> None:
        tmp = self.dest / f".{name}.publishing"
        try:
            self.dest.mkdir(parents=True, exist_ok=True)  # a folder with no files
            tmp.write_bytes(data)
            os.replace(tmp, self.dest / name)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise self.fail(f"writing {name}", e) from None


def open_target(url: str, flag: str | None, options: Any) -> Target:
    if url.startswith("s3://"):
        return S3Target(url, flag, options)
    if is_local_url(url):
        return LocalTarget(url, flag)
    return BeamTarget(url, flag)
