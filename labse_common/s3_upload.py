"""Uploads for Beam's S3 filesystem: one request for a small file, parallel parts for a large one.

Beam's stock ``S3Uploader`` opens a multipart upload for every file, so a 64 KB stats file or
claim costs three requests (create, one part, complete), and it sends the parts of a large file
one after another, each waiting for the previous one's round trip. Here:

* a file smaller than one part is sent with a single ``PutObject`` when it is closed;
* a larger one starts a multipart upload at its first full part and sends its parts from a
  small thread pool (``MAX_IN_FLIGHT`` at once; boto3 clients are thread-safe), so the writer
  keeps filling the next part while earlier ones travel. Memory per open file is at most
  ``MAX_IN_FLIGHT + 1`` parts.

Errors surface at the latest when the file is closed, as
:class:`labse_common.remote_errors.S3Failure` (one line naming the operation, the object and the
endpoint; the call already made its bounded attempts, so Beam does not retry it); a failed
multipart upload is aborted so no parts linger on the bucket. The first part that fails stops
the upload: the writer gets the error at its next part, the parts still in flight are cancelled
(:class:`labse_common.s3_client.Scope`: no new attempt starts) and their threads have ended
when the error is raised, so nothing goes on sending or retrying after the error line.
Installed with :func:`labse_common.filesystems.install_s3_client_cache`, which every job calls.
"""

from __future__ import annotations

import logging
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from apache_beam.io.filesystemio import Uploader

from labse_common.s3_client import Scope, in_scope

log = logging.getLogger(__name__)

#: Bytes per part (S3's minimum is 5 MiB for every part but the last).
PART_BYTES = 8 << 20
#: Parts sent at once per open file.
MAX_IN_FLIGHT = 4


def as_beam_error(
    e: Exception, operation: str = "S3 request", path: str = "", endpoint: str | None = None
) -> Exception:
    """A boto/connection error as Beam's callers need it: ``messages.S3ClientError`` with the
    HTTP code for 404 (missing) and 412 (replaced while read), which Beam's code and
    :mod:`labse_common.s3_download` test; anything else (the server stalled, died, refused or
    answered HTML, after the client's bounded attempts) a
    :class:`~labse_common.remote_errors.S3Failure` naming ``operation``, ``path`` and
    ``endpoint``, which Beam does not retry again."""
    from apache_beam.io.aws.clients.s3 import messages

    from labse_common.errors import RemoteFailure
    from labse_common.remote_errors import http_status, s3_failure

    if isinstance(e, messages.S3ClientError) and isinstance(e.__context__, Exception):
        e = e.__context__  # Beam's wrapper around the botocore error: judge the original
    status = http_status(e)
    if status in (404, 412) and not isinstance(e, RemoteFailure):
        return messages.S3ClientError(str(e), status)
    return s3_failure(e, operation, path, endpoint)


class S3ParallelUploader(Uploader):
    """Drop-in for ``apache_beam.io.aws.s3io.S3Uploader``: ``(client, path, mime_type)``, where
    ``client`` is Beam's boto3 wrapper (its ``.client`` is the boto3 client)."""

    def __init__(self, client: Any, path: str, mime_type: str = "application/octet-stream") -> None:
        from apache_beam.io.aws.s3io import parse_s3_path

        self._s3 = client.client
        self._path = path
        self._bucket, self._key = parse_s3_path(path)
        self._mime = mime_type
        self._buf = bytearray()
        self._upload_id: str | None = None
        self._parts: list[Future] = []
        self._pool: ThreadPoolExecutor | None = None
        self._scope = Scope()  # the parts' requests, cancelled together
        # Set when a part could not be handed over: the bytes already taken from the buffer are
        # gone, so closing must fail too, never send what is left as a shorter file.
        self._failed: Exception | None = None

    def put(self, data: memoryview) -> None:
        if self._failed is not None:
            raise self._failed
        self._buf += data
        while len(self._buf) >= PART_BYTES:
            chunk = bytes(self._buf[:PART_BYTES])
            del self._buf[:PART_BYTES]
            try:
                self._send(chunk)
            except Exception as e:
                self._failed = e
                raise

    def _send(self, chunk: bytes) -> None:
        if self._upload_id is None:
            try:
                r = self._s3.create_multipart_upload(
                    Bucket=self._bucket, Key=self._key, ContentType=self._mime
                )
            except Exception as e:
                raise self._error(e, "CreateMultipartUpload") from e
            self._upload_id = r["UploadId"]
            self._pool = ThreadPoolExecutor(MAX_IN_FLIGHT, thread_name_prefix="s3-upload")
        pending = [f for f in self._parts if not f.done()]
        if len(pending) >= MAX_IN_FLIGHT:  # bounded memory: wait for a slot
            wait(pending, return_when=FIRST_COMPLETED)
        failed = self._part_failure()
        if failed is not None:  # a failed part fails the file now: no more parts are sent
            raise failed
        number = len(self._parts) + 1
        self._parts.append(self._pool.submit(self._upload_part, number, chunk))

    def _part_failure(self) -> Exception | None:
        """The error of the first part that failed of itself, not because another part's
        failure cancelled it; None while no part has failed."""
        from labse_common.remote_errors import CallCancelled

        done = [f for f in self._parts if f.done() and not f.cancelled()]
        errors = [e for e in (f.exception() for f in done) if e is not None]
        own = [e for e in errors if not isinstance(e.__cause__, CallCancelled)]
        return (own or errors or [None])[0]

    def _error(self, e: Exception, operation: str) -> Exception:
        return as_beam_error(e, operation, self._path, self._s3.meta.endpoint_url)

    def _upload_part(self, number: int, chunk: bytes) -> str:
        try:
            with in_scope(self._scope):
                r = self._s3.upload_part(
                    Bucket=self._bucket,
                    Key=self._key,
                    UploadId=self._upload_id,
                    PartNumber=number,
                    Body=chunk,
                )
        except Exception as e:
            raise self._error(e, f"UploadPart {number} of") from e
        return r["ETag"]

    def finish(self) -> None:
        if self._failed is not None:
            self._abort()
            raise self._part_failure() or self._failed
        operation = "PutObject"
        try:
            if self._upload_id is None:  # the whole file is smaller than a part
                self._s3.put_object(
                    Bucket=self._bucket,
                    Key=self._key,
                    Body=bytes(self._buf),
                    ContentType=self._mime,
                )
                return
            if self._buf:
                self._send(bytes(self._buf))
            self._buf = bytearray()
            parts = [{"ETag": f.result(), "PartNumber": i + 1} for i, f in enumerate(self._parts)]
            operation = "CompleteMultipartUpload"
            self._s3.complete_multipart_upload(
                Bucket=self._bucket,
                Key=self._key,
                UploadId=self._upload_id,
                MultipartUpload={"Parts": parts},
            )
        except Exception as e:
            self._abort()
            raise self._error(self._part_failure() or e, operation) from e
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)

    def _abort(self) -> None:
        """Stop the parts (queued ones never start, running ones make no new attempt and end
        within their deadline), wait for their threads, then abort the multipart upload."""
        self._scope.cancel()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        if self._upload_id is None:
            return
        try:
            self._s3.abort_multipart_upload(
                Bucket=self._bucket, Key=self._key, UploadId=self._upload_id
            )
        except Exception:  # the original error is the one to report
            log.warning("could not abort the multipart upload of %s", self._path)
