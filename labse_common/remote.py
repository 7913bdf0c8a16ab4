"""Object-store paths checked up front, and every S3 call bounded: one line and exit 2, not a hang.

Beam's S3 filesystem retries a failing call for minutes with a traceback per retry when the
endpoint does not answer or there are no credentials. :func:`check_paths` asks the same
questions once, with short timeouts and no retries, before a command reads or writes anything:

* are the S3/GCS client libraries installed (the ``s3`` / ``gcs`` extras of the project);
* are there credentials (Beam's ``--s3_access_key_id`` or boto3's own chain);
* does the endpoint answer and does the bucket exist.

The options are Beam's S3 options, from the job's own flags (Beam jobs) or from
``$LABSE_BEAM_OPTIONS`` (every other command; see :mod:`labse_common.filesystems`).

After the check the server can still stall or die. Every boto3 client the project makes comes
from :func:`labse_common.s3_client.new_client` (the check and ``--publish`` through
:func:`s3_client` here, Beam's S3 filesystem through
:func:`labse_common.filesystems.install_s3_client_cache`), with the limits of
:mod:`labse_common.s3_limits` (``LABSE_S3_CONNECT_TIMEOUT``, ``LABSE_S3_READ_TIMEOUT``,
``LABSE_S3_MAX_ATTEMPTS``, set in the environment so Beam's local workers inherit them).
A call that still fails is one :class:`~labse_common.errors.RemoteFailure` line naming the
operation, the path and the endpoint (:mod:`labse_common.remote_errors`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from labse_common.errors import RemoteError, UsageError
from labse_common.filesystems import filesystems, is_remote, missing_part
from labse_common.s3_client import new_client, s3_options, session_for

log = logging.getLogger(__name__)

SCHEMES = ("s3://", "gs://")


def remote_paths(values: Iterable[Any]) -> list[str]:
    """The remote path strings among ``values`` (:func:`labse_common.filesystems.is_remote`;
    lists and tuples are looked into)."""
    out: list[str] = []
    for v in values:
        if isinstance(v, (list, tuple)):
            out += remote_paths(v)
        elif isinstance(v, str) and is_remote(v):
            out.append(v)
    return out


def _s3_options(options=None) -> dict[str, Any]:
    """Beam's S3 options as a dict: from ``options`` (PipelineOptions or a dict of them), else
    from the process's FileSystems options (``$LABSE_BEAM_OPTIONS``)."""
    if options is None:
        options = filesystems()._pipeline_options  # noqa: SLF001 - Beam has no public getter
    return s3_options(options)


def s3_client(options: Any = None, *, preflight: bool = False, session: Any = None, **config: Any):
    """:func:`labse_common.s3_client.new_client` for Beam's S3 ``options`` (PipelineOptions, a
    dict of them, or None: ``$LABSE_BEAM_OPTIONS``, else boto3's environment)."""
    return new_client(_s3_options(options), preflight=preflight, session=session, **config)


def _bucket(path: str) -> tuple[str, str]:
    rest = path.split("://", 1)[1]
    bucket = rest.split("/", 1)[0]
    if not bucket:
        raise RemoteError(f"{path}: no bucket in the path")
    return path[:5], bucket


def _session(where: str, o: dict[str, Any]):
    """A boto3 session with credentials, or RemoteError saying where to set them."""
    session = session_for(o)
    if session.get_credentials() is None:
        raise RemoteError(
            f"{where}: no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or pass "
            "--s3_access_key_id/--s3_secret_access_key (Beam jobs) or LABSE_BEAM_OPTIONS"
        )
    return session


def check_s3(path: str, options=None, flag: str | None = None) -> None:
    """Credentials, endpoint and bucket of one ``s3://`` path; RemoteError naming what lacks.

    The question is a ``ListObjectsV2`` of at most one key, whose answer must be S3's XML
    naming the bucket: a web server that answers every request with status 200 (an HTML page,
    a captive portal) would pass a ``HeadBucket``, which has no body, and the run would fail
    only at its first write."""
    where = f"{flag} {path}" if flag else path
    missing = missing_part("s3")
    if missing is not None:
        raise RemoteError(f"{where}: {missing}")
    # imported only here: boto3 is an optional part (the `s3` extra)
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    from labse_common.remote_errors import describe

    o = _s3_options(options)
    _, bucket = _bucket(path)
    client = s3_client(o, preflight=True, session=_session(where, o))
    # The endpoint the client really uses: the option, AWS_ENDPOINT_URL(_S3), or AWS's own.
    shown = client.meta.endpoint_url
    try:
        answer = client.list_objects_v2(Bucket=bucket, MaxKeys=1)
    except NoCredentialsError:
        raise RemoteError(f"{where}: no S3 credentials") from None
    except ClientError as e:
        raise RemoteError(f"{where}: {_refusal(e, bucket)}") from None
    except BotoCoreError as e:
        raise RemoteError(f"{where}: S3 endpoint {shown} {_unanswered(e, describe)}") from None
    if answer.get("Name") != bucket:
        status = answer.get("ResponseMetadata", {}).get("HTTPStatusCode")
        raise RemoteError(
            f"{where}: S3 endpoint {shown} answered ListObjectsV2 with HTTP {status} but not "
            "with S3's XML naming the bucket: is the endpoint an S3 server?"
        )


def _unanswered(e: Exception, describe) -> str:
    """What a preflight that got no S3 answer says about the endpoint."""
    from botocore.exceptions import (
        ConnectTimeoutError,
        EndpointConnectionError,
        ReadTimeoutError,
    )

    if isinstance(e, (EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError)):
        return (
            f"does not answer ({type(e).__name__}); set "
            "--s3_endpoint_url / AWS_ENDPOINT_URL to a reachable server"
        )
    return describe(e)


def _refusal(e, bucket: str) -> str:
    """An S3 error answer to the preflight, in a few words."""
    code = str(e.response.get("Error", {}).get("Code", ""))
    if code in ("404", "NoSuchBucket", "NotFound"):
        return f"bucket {bucket!r} does not exist"
    if code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
        return f"access to bucket {bucket!r} denied ({code})"
    return f"S3 refused the request ({code or e})"


def check_gcs(path: str, flag: str | None = None) -> None:
    where = f"{flag} {path}" if flag else path
    missing = missing_part("gs")
    if missing is not None:
        raise RemoteError(f"{where}: {missing}")


def check_paths(paths: Iterable[str], options=None) -> None:
    """Preflight every ``s3://``/``gs://`` path (each bucket once); raises RemoteError. Other
    schemes have no preflight: Beam's filesystem names them when it is used."""
    seen: set[tuple[str, str]] = set()
    for path in paths:
        if not str(path).startswith(SCHEMES):
            continue
        key = _bucket(path)
        if key in seen:
            continue
        seen.add(key)
        if path.startswith("s3://"):
            check_s3(path, options)
        else:
            check_gcs(path)


def require_local(path: str | None, flag: str, what: str = "this command") -> None:
    """For outputs a command can only write to a local folder: one clear line, exit 2."""
    if path is not None and is_remote(path):
        raise UsageError(
            f"{flag} {path}: {what} writes only to a local folder; "
            "write locally and copy the folder to the object store"
        )
