"""Object-store paths checked up front, and every S3 call bounded: one line and exit 2, not a hang.

Beam's S3 filesystem retries a failing call for minutes with a traceback per retry when the
endpoint does not answer or there are no credentials. :func:`check_paths` asks the same
questions once, with short timeouts and no retries, before a command reads or writes anything:

* are the S3/GCS client libraries installed (``apache-beam[aws]`` / ``apache-beam[gcp]``);
* are there credentials (Beam's ``--s3_access_key_id`` or boto3's own chain);
* does the endpoint answer and does the bucket exist.

The options are Beam's S3 options, from the job's own flags (Beam jobs) or from
``$LABSE_BEAM_OPTIONS`` (every other command; see :mod:`labse_common.filesystems`).

After the check the server can still stall or die. Every boto3 client the project makes comes
from :func:`s3_client` (the check, ``--publish``, and Beam's S3 filesystem through
:func:`labse_common.filesystems.install_s3_client_cache`), with the limits of
:func:`s3_limits`, set in the environment (so Beam's local workers inherit them):

* ``LABSE_S3_CONNECT_TIMEOUT``: seconds to open a connection (default 5);
* ``LABSE_S3_READ_TIMEOUT``: seconds to wait for an answer, or to send one chunk (default 30);
* ``LABSE_S3_MAX_ATTEMPTS``: attempts per request, first included (default 3; botocore's
  "standard" retries of timeouts, dropped connections, 5xx and throttling).

A call that still fails is one :class:`~labse_common.errors.RemoteFailure` line naming the
operation, the path and the endpoint (:mod:`labse_common.remote_errors`).
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from labse_common.errors import RemoteError, RemoteFailure, UsageError
from labse_common.filesystems import is_remote

log = logging.getLogger(__name__)

SCHEMES = ("s3://", "gs://")
CONNECT_TIMEOUT_ENV = "LABSE_S3_CONNECT_TIMEOUT"
READ_TIMEOUT_ENV = "LABSE_S3_READ_TIMEOUT"
MAX_ATTEMPTS_ENV = "LABSE_S3_MAX_ATTEMPTS"
DEFAULT_CONNECT_TIMEOUT_S = 5.0
DEFAULT_READ_TIMEOUT_S = 30.0
DEFAULT_MAX_ATTEMPTS = 3
LIMIT_ENVS = (CONNECT_TIMEOUT_ENV, READ_TIMEOUT_ENV, MAX_ATTEMPTS_ENV)


@dataclass(frozen=True)
class S3Limits:
    """Bounds of one S3 request: the worst case of a silent server is about
    ``attempts * (connect_s + read_s)`` plus botocore's short back-off."""

    connect_s: float
    read_s: float
    attempts: int


def _env_number(name: str, default: float, integer: bool = False) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw, 10) if integer else float(raw)
    except ValueError:
        value = math.nan
    top = 20 if integer else 3600.0  # beyond that a silent server is a hang again
    if not (math.isfinite(value) and 0 < value <= top):
        kind = "a whole number of attempts" if integer else "seconds"
        raise UsageError(f"{name}={raw!r}: not {kind} > 0 and <= {top:g}")
    return value


def s3_limits() -> S3Limits:
    """The limits of every S3 request, from the environment (module docstring); a bad value is
    a UsageError naming the variable."""
    return S3Limits(
        _env_number(CONNECT_TIMEOUT_ENV, DEFAULT_CONNECT_TIMEOUT_S),
        _env_number(READ_TIMEOUT_ENV, DEFAULT_READ_TIMEOUT_S),
        int(_env_number(MAX_ATTEMPTS_ENV, DEFAULT_MAX_ATTEMPTS, integer=True)),
    )


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
    if isinstance(options, dict):
        return options
    if options is None:
        from labse_common.filesystems import filesystems

        options = filesystems()._pipeline_options  # noqa: SLF001 - Beam has no public getter
    if options is None:
        return {}
    from apache_beam.options.pipeline_options import S3Options

    return options.view_as(S3Options).get_all_options()


def _verify(value: Any) -> bool | str | None:
    """``--s3_verify`` as botocore takes it: a flag's "false" means False, a path a CA bundle."""
    if value is None or isinstance(value, bool):
        return value
    text = str(value).strip()
    if text.lower() in ("false", "0", "no"):
        return False
    if text.lower() in ("true", "1", "yes", ""):
        return True
    return text


def _session(o: dict[str, Any]):
    import boto3

    return boto3.session.Session(
        aws_access_key_id=o.get("s3_access_key_id"),
        aws_secret_access_key=o.get("s3_secret_access_key"),
        aws_session_token=o.get("s3_session_token"),
        region_name=o.get("s3_region_name"),
    )


def s3_client(options: Any = None, *, preflight: bool = False, session: Any = None, **config: Any):
    """A boto3 S3 client for Beam's S3 ``options`` (PipelineOptions, a dict of them, or None:
    ``$LABSE_BEAM_OPTIONS``, else boto3's environment) with the limits of :func:`s3_limits` and
    the check that answers are S3's (:func:`labse_common.remote_errors.refuse_non_s3`).
    ``preflight``: one attempt with short timeouts. ``config``: more botocore Config fields."""
    from botocore.config import Config

    from labse_common.remote_errors import refuse_non_s3

    o = _s3_options(options)
    lim = s3_limits()
    cfg = Config(
        connect_timeout=lim.connect_s,
        read_timeout=min(lim.connect_s, lim.read_s) if preflight else lim.read_s,
        retries={"total_max_attempts": 1 if preflight else lim.attempts, "mode": "standard"},
        **config,
    )
    session = session if session is not None else _session(o)
    client = session.client(
        "s3",
        endpoint_url=o.get("s3_endpoint_url"),
        config=cfg,
        api_version=o.get("s3_api_version"),
        use_ssl=not o.get("s3_disable_ssl"),
        verify=_verify(o.get("s3_verify")),
    )
    client.meta.events.register("before-parse.s3", refuse_non_s3)
    return client


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
        import boto3  # noqa: F401
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
    session = _session(o)
    if session.get_credentials() is None:
        raise RemoteError(
            f"{where}: no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or pass "
            "--s3_access_key_id/--s3_secret_access_key (Beam jobs) or LABSE_BEAM_OPTIONS"
        )
    client = s3_client(o, preflight=True, session=session)
    # The endpoint the client really uses: the option, AWS_ENDPOINT_URL(_S3), or AWS's own.
    shown = client.meta.endpoint_url
    try:
        client.head_bucket(Bucket=bucket)
    except NoCredentialsError:
        raise RemoteError(f"{where}: no S3 credentials") from None
    except (EndpointConnectionError, BotoConnectTimeout, ReadTimeoutError) as e:
        raise RemoteError(
            f"{where}: S3 endpoint {shown} does not answer ({type(e).__name__}); set "
            "--s3_endpoint_url / AWS_ENDPOINT_URL to a reachable server"
        ) from None
    except ClientError as e:
        code = str(e.response.get("Error", {}).get("Code", ""))
        if code in ("404", "NoSuchBucket", "NotFound"):
            raise RemoteError(f"{where}: bucket {bucket!r} does not exist") from None
        if code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
            raise RemoteError(f"{where}: access to bucket {bucket!r} denied ({code})") from None
        raise RemoteError(f"{where}: S3 refused the request ({code or e})") from None
    except BotoCoreError as e:
        from labse_common.remote_errors import describe

        raise RemoteError(f"{where}: S3 endpoint {shown} {describe(e)}") from None


def check_gcs(path: str, flag: str | None = None) -> None:
    where = f"{flag} {path}" if flag else path
    try:
        import google.cloud.storage  # noqa: F401
    except ImportError:
        raise RemoteError(f"{where}: GCS needs pip install 'apache-beam[gcp]'") from None


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


#: How a Beam worker's traceback text names a failure (a worker process sends its error back
#: as text in a RuntimeError).
_WORKER_FAILURE = re.compile(
    r"labse_common\.remote_errors\.S3Failure: (.+?)(?: \[while running [^\]]*\])?\s*$", re.MULTILINE
)


def failure_in(e: BaseException | None, depth: int = 0) -> RemoteFailure | None:
    """The RemoteFailure behind ``e``: ``e`` itself, one inside a Beam ``BeamIOError``'s
    per-path details (Beam's filesystem wraps each path's error), its explicit cause, or, for
    the RuntimeError of a Beam job whose worker process failed, the failure its traceback text
    names."""
    if e is None or depth > 8:
        return None
    if isinstance(e, RemoteFailure):
        return first_failure(e)
    details = getattr(e, "exception_details", None)
    if isinstance(details, dict):
        for inner in details.values():
            found = failure_in(inner if isinstance(inner, BaseException) else None, depth + 1)
            if found is not None:
                return found
    if isinstance(e, RuntimeError):
        lines = _WORKER_FAILURE.findall(str(e))
        if lines:
            return RemoteFailure(lines[-1].strip())
    return failure_in(e.__cause__, depth + 1)


def first_failure(e: RemoteFailure) -> RemoteFailure:
    """The failure that started it: a clean-up after a failed write (deleting the temporary
    files, releasing the claim) meets the same dead server and fails too, and its failure
    replaces the first one; the first names the operation that actually broke. Python keeps
    the first in the ``__context__`` chain (through Beam's and botocore's own wrappers)."""
    first: RemoteFailure = e
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen and len(seen) < 64:
        seen.add(id(cur))
        if isinstance(cur, RemoteFailure):
            first = cur
        cur = cur.__context__
    return first
