"""S3 failures after the start-up check, as one line naming the operation, path and endpoint.

The start-up check (:func:`labse_common.remote.check_s3`) proves the endpoint answered once; the
server can still stall, close connections, refuse a request or turn out to be a web server
that answers HTML with status 200 (which botocore accepts as an empty S3 answer). Every boto3
client the project builds (:func:`labse_common.s3_client.new_client`; Beam's S3 filesystem gets
its client there too, see :func:`labse_common.filesystems.install_s3_client_cache`) has bounded
timeouts and attempts (:func:`labse_common.s3_limits.s3_limits`) and refuses answers that are not
S3's (:func:`refuse_non_s3`). What still fails after those attempts becomes
:class:`S3Failure`: a :class:`~labse_common.errors.RemoteFailure` (a UsageError, so every
command reports it in one line with exit status 2) and a Beam ``PermanentException``, so
Beam's own retry decorators (seven more tries with back-off, a traceback logged for each) do
not start over.

Imported only when a remote path is used (it imports botocore and Beam).
"""

from __future__ import annotations

from typing import Any

from apache_beam.utils.retry import PermanentException
from botocore.exceptions import BotoCoreError

from labse_common.errors import RemoteFailure

#: Object operations whose 2xx answer carries the object's ETag on every S3-compatible server
#: (a 2xx without one comes from something that is not S3).
_NEED_ETAG = ("GetObject", "HeadObject", "PutObject", "UploadPart")
#: Operations whose answer is the object itself: its Content-Type is the user's, HTML included.
_OBJECT_READS = ("GetObject", "HeadObject")


class NotS3Answer(BotoCoreError):
    """A 2xx answer that is not S3's (an HTML page, no ETag): raised inside the boto3 call, so
    every ``except BotoCoreError`` that handles S3 errors handles it too."""

    fmt = "answered {operation} with HTTP {status} {what}, which is not S3's answer"


class CallStopped(BotoCoreError):
    """A call not (or no longer) tried: its deadline passed, its endpoint failed a moment ago, or
    its upload was cancelled (:mod:`labse_common.s3_client`). Not an ``HTTPClientError``, so
    botocore does not retry it."""

    fmt = "{why}"


class CallCancelled(CallStopped):
    """A call of an upload's part stopped because another part of the same upload failed."""


class S3Failure(RemoteFailure, PermanentException):
    """A :class:`RemoteFailure` raised under Beam's S3 filesystem: permanent for Beam's retry
    decorators (botocore already made the bounded attempts)."""


def refuse_non_s3(operation_model: Any = None, response_dict: Any = None, **_: Any) -> None:
    """botocore ``before-parse.s3`` handler: a 2xx answer that is not S3's raises
    :class:`NotS3Answer` instead of parsing as an empty success (an ``s3://`` write into a
    captive portal would otherwise "succeed")."""
    if operation_model is None or not response_dict:
        return
    status = int(response_dict.get("status_code") or 0)
    if not 200 <= status < 300:
        return  # an error answer: botocore makes it a ClientError with the status
    headers = response_dict.get("headers") or {}
    op = operation_model.name
    body = response_dict.get("body")
    # A web page, whatever its Content-Type says (moto sends text/html with S3's empty answers).
    # The bodies of object reads are the user's data (and streams): judged by their ETag.
    if op not in _OBJECT_READS and isinstance(body, (bytes, bytearray)):
        head = bytes(body[:256]).lstrip().lower()
        if head.startswith((b"<!doctype html", b"<html")):
            raise NotS3Answer(operation=op, status=status, what="(a web page)")
    if op in _NEED_ETAG and not headers.get("etag"):
        ctype = str(headers.get("content-type") or "no content type").split(";")[0].strip()
        raise NotS3Answer(operation=op, status=status, what=f"({ctype}, no ETag)")


def http_status(e: BaseException) -> int | None:
    """The HTTP status of a botocore/Beam error, when the server answered one."""
    code = getattr(e, "code", None)
    if isinstance(code, int):
        return code
    response = getattr(e, "response", None)
    if isinstance(response, dict):
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return int(status) if status else None
    return None


def describe(e: BaseException) -> str:
    """What the server did, in a few words (the failure of one S3 call, after its attempts)."""
    from botocore.exceptions import (
        ClientError,
        ConnectionClosedError,
        ConnectTimeoutError,
        EndpointConnectionError,
        NoCredentialsError,
        ReadTimeoutError,
        ResponseStreamingError,
    )
    from botocore.parsers import ResponseParserError

    from labse_common.s3_limits import MAX_ATTEMPTS_ENV, READ_TIMEOUT_ENV, s3_limits

    lim = s3_limits()
    tries = f"{lim.attempts} attempt{'s' if lim.attempts > 1 else ''}"
    if isinstance(e, ReadTimeoutError):
        return (
            f"did not answer within {lim.read_s:g} s ({tries}; {READ_TIMEOUT_ENV} and "
            f"{MAX_ATTEMPTS_ENV} set how long to wait)"
        )
    if isinstance(e, ConnectTimeoutError):
        return f"did not accept a connection within {lim.connect_s:g} s ({tries})"
    if isinstance(e, EndpointConnectionError):
        return f"refused the connection ({tries}; is the server running?)"
    if isinstance(e, (ConnectionClosedError, ResponseStreamingError)):
        return f"closed the connection in the middle of the request ({tries})"
    if isinstance(e, CallStopped):
        return str(e)
    if isinstance(e, NotS3Answer):
        return f"{e}: is the endpoint an S3 server?"
    if isinstance(e, ResponseParserError):
        return "answered something that is not S3's XML: is the endpoint an S3 server?"
    if isinstance(e, NoCredentialsError):
        return "has no credentials to check against (no S3 credentials)"
    if isinstance(e, ClientError):
        err = e.response.get("Error", {})
        code, msg = err.get("Code", ""), " ".join(str(err.get("Message", "")).split())
        status = http_status(e)
        what = " ".join(str(x) for x in (status, code) if x) or type(e).__name__
        return f"refused it (HTTP {what}{': ' + msg[:200] if msg else ''})"
    text = " ".join(str(e).split())[:300]
    return f"failed ({type(e).__name__}{': ' + text if text else ''})"


def s3_failure(e: BaseException, operation: str, path: str, endpoint: str | None) -> S3Failure:
    """``e`` (a boto3 call's error, after its attempts) as one line naming the operation, the
    path and the endpoint. An error that already is a RemoteFailure keeps its words."""
    if isinstance(e, RemoteFailure):
        if isinstance(e, S3Failure):
            return e
        return S3Failure(
            str(e), operation=e.operation, path=e.path, endpoint=e.endpoint, code=e.code
        )
    status = http_status(e)
    shown = endpoint or "(unknown endpoint)"
    return S3Failure(
        f"{operation} {path}: S3 endpoint {shown} {describe(e)}",
        operation=operation,
        path=path,
        endpoint=endpoint,
        code=status,
    )
