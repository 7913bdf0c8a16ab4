"""Downloads for Beam's S3 filesystem: one request per file read from start to end.

Beam's stock ``S3Downloader`` asks for an object's size with a ``HeadObject`` when a file is
opened and then streams the body through a ``GetObject``: two requests per file, which is most
of the cost of a 64 KB stats file or claim. Here opening a file starts one ``GetObject`` of the
whole object: its size comes with it, its first ``FIRST_BYTES`` are read and kept (a small file is
then read whole), and a reader that goes on from there reads the same stream. Only a reader that
jumps (Parquet reads its footer first) opens a ranged stream where it lands; the kept first bytes
serve it when it comes back to the start. Every request after the first carries ``IfMatch`` with
the first response's ETag, so a file replaced while it is read fails (412) instead of mixing two
versions.

Parallel ranged reads (blocks fetched ahead from a thread pool) were built and measured first:
on the loopback moto server they read large files at 0.55x of one stream, because moto copies
the whole object for every request (a 1 KB range of a 64 MB object costs 35 ms, the whole object
120 ms), so they were not kept; see bench/HISTORY.md "Object stores".

Errors surface as Beam's: ``OSError(ENOENT)`` for a missing object when it is opened,
``messages.S3ClientError`` with 412 for a replaced one, and
:class:`labse_common.remote_errors.S3Failure` (one line naming the object and the endpoint)
when the server stalls, dies, refuses or does not answer as S3. A failed read is retried once from the
same position, as Beam's stock reader does. Installed with
:func:`labse_common.filesystems.install_s3_client_cache`, which every job calls.
"""

from __future__ import annotations

import errno
from typing import Any

from apache_beam.io.filesystemio import Downloader

from labse_common.s3_upload import as_beam_error

#: Bytes read and kept when a file is opened: a small file whole; a large file's footer reader
#: (Parquet) comes back to them.
FIRST_BYTES = 1 << 20


class S3NoHeadDownloader(Downloader):
    """Drop-in for ``apache_beam.io.aws.s3io.S3Downloader``: ``(client, path, buffer_size)``,
    where ``client`` is Beam's boto3 wrapper (its ``.client`` is the boto3 client)."""

    def __init__(self, client: Any, path: str, buffer_size: int = 0) -> None:
        from apache_beam.io.aws.s3io import parse_s3_path

        self._s3 = client.client
        self._path = path
        self._bucket, self._key = parse_s3_path(path)
        self._stream: Any = None
        self._stream_pos = -1  # the byte the open stream gives next
        self._first, self._size, self._etag = self._open()

    def _open(self) -> tuple[bytes, int, str | None]:
        try:
            r = self._s3.get_object(Bucket=self._bucket, Key=self._key)
            size = int(r["ContentLength"])
            self._stream, self._stream_pos = r["Body"], 0
            first = self._stream.read(min(FIRST_BYTES, size))
        except Exception as e:
            self._stream = None
            err = as_beam_error(e, "GetObject", self._path, self._s3.meta.endpoint_url)
            if getattr(err, "code", None) == 404:
                raise OSError(errno.ENOENT, f"Not found: {self._path}") from e
            raise err from e
        self._stream_pos = len(first)
        return first, size, r.get("ETag")

    @property
    def size(self) -> int:
        return self._size

    def _read_stream(self, start: int, n: int) -> bytes:
        kw = {"IfMatch": self._etag} if self._etag else {}
        for attempt in range(2):
            try:
                if self._stream is None or self._stream_pos != start:
                    if self._stream is not None:
                        self._stream.close()
                    self._stream = self._s3.get_object(
                        Bucket=self._bucket, Key=self._key, Range=f"bytes={start}-", **kw
                    )["Body"]
                    self._stream_pos = start
                data = self._stream.read(n)
                if len(data) != n:
                    raise OSError(
                        f"short read of {self._path} at {start}: {len(data)} of {n} bytes"
                    )
                self._stream_pos += n
                return data
            except Exception as e:
                self._stream = None
                err = as_beam_error(
                    e, f"GetObject (from byte {start})", self._path, self._s3.meta.endpoint_url
                )
                if (
                    attempt or getattr(err, "code", None) == 412
                ):  # a replaced file is not read again
                    raise err from e
        raise AssertionError("unreachable")

    def get_range(self, start: int, end: int) -> bytes:
        end = min(end, self._size)
        if start >= end:
            return b""
        if end <= len(self._first):
            return self._first[start:end]
        head = self._first[start:] if start < len(self._first) else b""
        rest = self._read_stream(start + len(head), end - start - len(head))
        return head + rest if head else rest
