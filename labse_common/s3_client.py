"""The one builder of the project's boto3 S3 clients: bounded, and refusing answers not S3's.

Every boto3 client the project makes comes from :func:`new_client`: the start-up check and
``--publish`` (through :func:`labse_common.remote.s3_client`, which adds the process's own
options) and Beam's S3 filesystem (through
:func:`labse_common.filesystems.install_s3_client_cache`). Each has the limits of
:func:`labse_common.s3_limits.s3_limits` and the check that answers are S3's
(:func:`labse_common.remote_errors.refuse_non_s3`).

It sits below :mod:`labse_common.filesystems` (which builds Beam's clients here), so it takes
options already chosen; imports boto3 and botocore only when a client is built.
"""

from __future__ import annotations

from typing import Any

from labse_common.s3_limits import s3_limits


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
    cfg = Config(
        connect_timeout=lim.connect_s,
        read_timeout=min(lim.connect_s, lim.read_s) if preflight else lim.read_s,
        retries={"total_max_attempts": 1 if preflight else lim.attempts, "mode": "standard"},
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
    return client
