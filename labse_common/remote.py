"""Object-store paths checked up front: one line and exit 2 within seconds, not a hang.

Beam's S3 filesystem retries a failing call for minutes with a traceback per retry when the
endpoint does not answer or there are no credentials. :func:`check_paths` asks the same
questions once, with short timeouts and no retries, before a command reads or writes anything:

* are the S3/GCS client libraries installed (``apache-beam[aws]`` / ``apache-beam[gcp]``);
* are there credentials (Beam's ``--s3_access_key_id`` or boto3's own chain);
* does the endpoint answer and does the bucket exist.

The options are Beam's S3 options, from the job's own flags (Beam jobs) or from
``$LABSE_BEAM_OPTIONS`` (every other command; see :mod:`labse_common.filesystems`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from labse_common.errors import RemoteError, UsageError

log = logging.getLogger(__name__)

SCHEMES = ("s3://", "gs://")
CONNECT_TIMEOUT_S = 5.0


def is_remote(path: Any) -> bool:
    return isinstance(path, str) and path.startswith(SCHEMES)


def remote_paths(values: Iterable[Any]) -> list[str]:
    """The ``s3://``/``gs://`` strings among ``values`` (lists and tuples are looked into)."""
    out: list[str] = []
    for v in values:
        if isinstance(v, (list, tuple)):
            out += remote_paths(v)
        elif is_remote(v):
            out.append(v)
    return out


def _s3_options(options=None) -> dict[str, Any]:
    if options is None:
        from labse_common.filesystems import filesystems

        options = filesystems()._pipeline_options  # noqa: SLF001 - Beam has no public getter
    if options is None:
        return {}
    from apache_beam.options.pipeline_options import S3Options

    return options.view_as(S3Options).get_all_options()


def _bucket(path: str) -> tuple[str, str]:
    rest = path.split("://", 1)[1]
    bucket = rest.split("/", 1)[0]
    if not bucket:
        raise RemoteError(f"{path}: no bucket in the path")
    return path[:5], bucket


def check_s3(path: str, options=None, flag: str | None = None) -> None:
    """Credentials, endpoint and bucket of one ``s3://`` path; RemoteError naming what lacks."""
    where = f"{flag} {path}" if flag else path
    try:
        import boto3
        from botocore.config import Config
        from botocore.exceptions import (
            BotoCoreError,
            ClientError,
            EndpointConnectionError,
            NoCredentialsError,
            ReadTimeoutError,
        )
        from botocore.exceptions import ConnectTimeoutError as BotoConnectTimeout
    except ImportError:
        raise RemoteError(f"{where}: S3 needs boto3: pip install 'apache-beam[aws]'") from None
    o = _s3_options(options)
    _, bucket = _bucket(path)
    session = boto3.session.Session(
        aws_access_key_id=o.get("s3_access_key_id"),
        aws_secret_access_key=o.get("s3_secret_access_key"),
        aws_session_token=o.get("s3_session_token"),
        region_name=o.get("s3_region_name"),
    )
    endpoint = o.get("s3_endpoint_url")
    if session.get_credentials() is None:
        raise RemoteError(
            f"{where}: no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or pass "
            "--s3_access_key_id/--s3_secret_access_key (Beam jobs) or LABSE_BEAM_OPTIONS")
    cfg = Config(connect_timeout=CONNECT_TIMEOUT_S, read_timeout=CONNECT_TIMEOUT_S,
                 retries={"max_attempts": 1, "mode": "standard"})  # fmt: skip
    verify = o.get("s3_verify")
    client = session.client("s3", endpoint_url=endpoint, config=cfg,
                            verify=None if verify is None else verify not in (False, "false"))  # fmt: skip
    try:
        client.head_bucket(Bucket=bucket)
    except NoCredentialsError:
        raise RemoteError(f"{where}: no S3 credentials") from None
    except (EndpointConnectionError, BotoConnectTimeout, ReadTimeoutError) as e:
        shown = endpoint or "the default AWS endpoint"
        raise RemoteError(
            f"{where}: S3 endpoint {shown} does not answer ({type(e).__name__}); set "
            "--s3_endpoint_url / AWS_ENDPOINT_URL to a reachable server") from None
    except ClientError as e:
        code = str(e.response.get("Error", {}).get("Code", ""))
        if code in ("404", "NoSuchBucket", "NotFound"):
            raise RemoteError(f"{where}: bucket {bucket!r} does not exist") from None
        if code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
            raise RemoteError(f"{where}: access to bucket {bucket!r} denied ({code})") from None
        raise RemoteError(f"{where}: S3 refused the request ({code or e})") from None
    except BotoCoreError as e:
        raise RemoteError(f"{where}: S3 is not usable ({e})") from None


def check_gcs(path: str, flag: str | None = None) -> None:
    where = f"{flag} {path}" if flag else path
    try:
        import google.cloud.storage  # noqa: F401
    except ImportError:
        raise RemoteError(f"{where}: GCS needs pip install 'apache-beam[gcp]'") from None


def check_paths(paths: Iterable[str], options=None) -> None:
    """Preflight every remote path (each bucket once); raises RemoteError."""
    seen: set[tuple[str, str]] = set()
    for path in paths:
        if not is_remote(path):
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
    if path is not None and "://" in str(path) and not str(path).startswith("file://"):
        raise UsageError(f"{flag} {path}: {what} writes only to a local folder; "
                         "write locally and copy the folder to the object store")  # fmt: skip
