"""The one builder of the project's boto3 S3 clients: bounded, and refusing answers not S3's.

Every boto3 client the project makes comes from :func:`new_client`: the start-up check and
``--publish`` (through :func:`labse_common.remote.s3_client`, which adds the process's own
options) and Beam's S3 filesystem (through
:func:`labse_common.filesystems.install_s3_client_cache`). Each has the limits of
:func:`labse_common.s3_limits.s3_limits` and the check that answers are S3's
(:func:`labse_common.remote_errors.refuse_non_s3`).

**One deadline per operation.** botocore bounds each attempt, not the call: a stalled server
cost ``attempts x read timeout`` for the write, then as much again for every clean-up call after
it (deleting the temporary files, aborting the upload, releasing the claim). Here every call has
a deadline (``attempts x (connect + read)`` from its first attempt; no attempt waits past it),
and once a call to an endpoint has failed on a timeout or a lost connection, the calls to that
endpoint that follow (the clean-up) share :data:`GRACE_S` seconds between them, then fail at
once without a request, for :func:`~labse_common.s3_limits.S3Limits.bound_s` seconds or until
one of them gets an answer. Calls made under one :class:`Scope` (the parts of one upload) stop
at their next attempt when the scope is cancelled.

It sits below :mod:`labse_common.filesystems` (which builds Beam's clients here), so it takes
options already chosen; imports boto3 and botocore only when a client is built.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from labse_common.s3_limits import S3Limits, s3_limits

#: Seconds the calls after a failed one (its clean-up) may still spend on the same endpoint.
GRACE_S = 2.0
#: Where a call keeps its deadline, in botocore's request context (shared by its attempts).
_DEADLINE = "labse_deadline"


@dataclass
class _Down:
    at: float  # time.monotonic() when a call to the endpoint failed after its attempts
    why: str


_DOWN: dict[str, _Down] = {}
_DOWN_LOCK = threading.Lock()
_LOCAL = threading.local()


class Scope:
    """The calls of one operation made from several threads (an upload's parts): cancelled
    together when the operation fails, so no thread goes on retrying after the error."""

    def __init__(self) -> None:
        self._cancelled = threading.Event()

    def cancel(self) -> None:
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()


@contextlib.contextmanager
def in_scope(scope: Scope) -> Iterator[None]:
    """The calls this thread makes in the block belong to ``scope``."""
    previous = getattr(_LOCAL, "scope", None)
    _LOCAL.scope = scope
    try:
        yield
    finally:
        _LOCAL.scope = previous


def forget_failures() -> None:
    """Forget which endpoints failed (a forked child, or a test that starts a new server)."""
    global _DOWN_LOCK
    # A new lock, not the old one taken: a forked child may inherit it held by another thread.
    _DOWN_LOCK = threading.Lock()
    _DOWN.clear()


os.register_at_fork(after_in_child=forget_failures)


def _stopped(why: str, cancelled: bool = False) -> Exception:
    from labse_common.remote_errors import CallCancelled, CallStopped

    return (CallCancelled if cancelled else CallStopped)(why=why)


def _attempt_deadline(endpoint: str, lim: S3Limits, deadline: float, now: float) -> float:
    """The deadline of the next attempt of a call whose own deadline is ``deadline``: earlier
    when the endpoint failed a moment ago (the clean-up's shared grace); raises once there is
    no time left."""
    with _DOWN_LOCK:
        down = _DOWN.get(endpoint)
        if down is not None and now >= down.at + GRACE_S + lim.bound_s:
            del _DOWN[endpoint]  # long enough ago: a new operation gets its whole bound again
            down = None
    if down is not None:
        if now >= down.at + GRACE_S:
            raise _stopped(
                f"was not tried: the endpoint failed {now - down.at:.0f} s before ({down.why})"
            )
        deadline = min(deadline, down.at + GRACE_S)
    if now >= deadline:
        raise _stopped(f"did not finish within its deadline of {lim.bound_s:g} s")
    return deadline


def _deadline_handlers(endpoint: str, lim: S3Limits) -> dict[str, Any]:
    """botocore event handlers giving each call of a client one deadline (module docstring)."""
    from botocore.exceptions import ConnectionError as BotoConnectionError
    from botocore.exceptions import HTTPClientError

    def before_send(request: Any = None, **_: Any) -> None:
        scope = getattr(_LOCAL, "scope", None)
        if scope is not None and scope.cancelled:
            raise _stopped("was cancelled: another request of the same upload failed", True)
        context = getattr(request, "context", None)
        if context is None:
            return
        now = time.monotonic()
        deadline = _attempt_deadline(
            endpoint, lim, context.setdefault(_DEADLINE, now + lim.bound_s), now
        )
        # botocore's per-request read timeout: no attempt waits past the deadline.
        context["read_timeout"] = max(0.05, min(lim.read_s, deadline - now))

    def after_call(**_: Any) -> None:
        if _DOWN:  # an answer (any status): the endpoint is back
            with _DOWN_LOCK:
                _DOWN.pop(endpoint, None)

    def after_error(exception: BaseException | None = None, **_: Any) -> None:
        if isinstance(exception, (HTTPClientError, BotoConnectionError)):
            from labse_common.remote_errors import describe

            with _DOWN_LOCK:  # the first failure starts the grace; later ones do not extend it
                _DOWN.setdefault(endpoint, _Down(time.monotonic(), describe(exception)))

    return {
        "before-send.s3": before_send,
        "after-call.s3": after_call,
        "after-call-error.s3": after_error,
    }


def s3_options(options: Any = None) -> dict[str, Any]:
    """Beam's S3 options as a dict: ``options`` itself when it is a dict, the S3 view of Beam
    ``PipelineOptions``, else (None) no options, so boto3's environment applies."""
    if isinstance(options, dict):
        return options
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


def session_for(o: dict[str, Any]):
    """A boto3 session with the credentials and region of Beam's S3 options ``o`` (a dict)."""
    import boto3

    return boto3.session.Session(
        aws_access_key_id=o.get("s3_access_key_id"),
        aws_secret_access_key=o.get("s3_secret_access_key"),
        aws_session_token=o.get("s3_session_token"),
        region_name=o.get("s3_region_name"),
    )


def new_client(options: Any, *, preflight: bool = False, session: Any = None, **config: Any):
    """A boto3 S3 client for Beam's S3 ``options`` (PipelineOptions or a dict of them; None: no
    options, boto3's environment) with the limits of :func:`~labse_common.s3_limits.s3_limits`
    and the check that answers are S3's (:func:`labse_common.remote_errors.refuse_non_s3`).
    ``preflight``: one attempt with short timeouts. ``config``: more botocore Config fields."""
    from botocore.config import Config

    from labse_common.remote_errors import refuse_non_s3

    o = s3_options(options)
    lim = s3_limits()
    if preflight:
        lim = S3Limits(lim.connect_s, min(lim.connect_s, lim.read_s), 1)
    cfg = Config(
        connect_timeout=lim.connect_s,
        read_timeout=lim.read_s,
        retries={"total_max_attempts": lim.attempts, "mode": "standard"},
        **config,
    )
    session = session if session is not None else session_for(o)
    client = session.client(
        "s3",
        endpoint_url=o.get("s3_endpoint_url"),
        config=cfg,
        api_version=o.get("s3_api_version"),
        use_ssl=not o.get("s3_disable_ssl"),
        verify=_verify(o.get("s3_verify")),
    )
    client.meta.events.register("before-parse.s3", refuse_non_s3)
    for event, handler in _deadline_handlers(client.meta.endpoint_url, lim).items():
        client.meta.events.register(event, handler)
    return client
