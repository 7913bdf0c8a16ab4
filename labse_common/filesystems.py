"""Beam's ``FileSystems`` for code outside a pipeline, configured one way everywhere.

Beam's S3 (and GCS) filesystems need pipeline options. Inside a Beam job the options come from
the command line: ``pipelines.options.pipeline_options`` hands them to ``FileSystems`` on the
driver, Beam ships them to Flink/Dataflow workers, and for the DaskRunner a worker plugin gives
them to every dask worker. Code that runs outside any pipeline (training, ``mining``, the
embedding store, the output claim) calls :func:`filesystems`, which configures ``FileSystems``
once per process from the environment:

* ``LABSE_BEAM_OPTIONS``: Beam flags, e.g. ``--s3_endpoint_url http://127.0.0.1:9000
  --s3_region_name us-east-1`` (``shlex``-split);
* otherwise empty options, so boto3's own environment applies: ``AWS_ENDPOINT_URL``,
  ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``.

Beam is imported only when a remote path is used: this module imports nothing heavy, so every
other module imports it at the top and calls ``filesystems.open_read(...)`` and the like.

**What counts as remote** (:func:`is_remote`, the one rule every module uses): a path is remote
when it starts with a URL scheme, ``scheme://``, whose scheme is at least two characters and is
not ``file``: ``s3://b/k``, ``gs://b/k``, ``hdfs://...``. Everything else is a local path read
with the operating system's own calls: ``/data/x``, ``data/x``, ``~/x``, a Windows path
(``C:\\x``, even ``C://x``: a one-letter "scheme" is a drive letter) and ``file://...`` (Beam
has no filesystem for ``file://``; the OS path API is the one that can serve a local file).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import re
import shlex
from collections.abc import Iterator, Sequence
from typing import Any

ENV = "LABSE_BEAM_OPTIONS"
PROJECT = "labse-pipeline"

#: The optional parts (not in the plain ``pip install``): what each serves, the module that shows
#: it is installed, and the project's extra that installs it (pyproject.toml).
OPTIONAL_PARTS = {
    "s3": ("s3:// paths need", "botocore", "s3"),
    "gs": ("gs:// paths need", "google.cloud.storage", "gcs"),
    "dask": ("the DaskRunner needs", "distributed", "dask"),
}

#: ``scheme://`` at the start of a path (RFC 3986 scheme characters, two or more of them).
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+)://")


def is_remote(path: Any) -> bool:
    """Whether ``path`` names an object store or another filesystem served through Beam (module
    docstring: a ``scheme://`` other than ``file://``); False for anything that is not a str or
    path-like."""
    text = os.fspath(path) if isinstance(path, (str, os.PathLike)) else None
    m = _SCHEME.match(text) if isinstance(text, str) else None
    return m is not None and m.group(1).lower() != "file"


@functools.cache
def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # its parent package is missing (google.cloud without google)
        return False


def missing_part(part: str) -> str | None:
    """None when the optional ``part`` (a key of :data:`OPTIONAL_PARTS`: ``s3``, ``gs``,
    ``dask``; anything else counts as installed) is installed, else what it serves and how to
    install it, e.g. ``s3:// paths need pip install 'labse-pipeline[s3]'``."""
    entry = OPTIONAL_PARTS.get(part)
    if entry is None or _installed(entry[1]):
        return None
    what, _, extra = entry
    return f"{what} pip install '{PROJECT}[{extra}]'"


def require_part(part: str, where: str) -> None:
    """A UsageError (one line, exit 2) naming ``where`` and the extra to install when the
    optional ``part`` is not installed."""
    from labse_common.errors import UsageError

    missing = missing_part(part)
    if missing is not None:
        raise UsageError(f"{where}: {missing}")


def _require_scheme(path: str) -> None:
    """The optional part that serves ``path``'s scheme, or one line naming its extra (Beam's
    own message names Beam's extras and comes as a traceback)."""
    scheme = path.split("://", 1)[0].lower()
    if scheme in OPTIONAL_PARTS:
        require_part(scheme, path)


def join(base: str | os.PathLike, *parts: str) -> str:
    """``base/part/...``: Beam's join for a remote ``base`` (``s3://b/k/x``), ``os.path.join``
    for a local one (no Beam import)."""
    base = os.fspath(base)
    if is_remote(base):
        return filesystem(base).join(base, *parts)
    return os.path.join(base, *parts)


def configure(args: Sequence[str] | None = None) -> None:
    """Give ``FileSystems`` these Beam flags (default: ``$LABSE_BEAM_OPTIONS``)."""
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    if args is None:
        args = shlex.split(os.environ.get(ENV, ""))
    install_s3_client_cache()
    FileSystems.set_options(PipelineOptions(list(args)))


def filesystems():
    """``FileSystems``, configured from the environment if nothing configured it yet."""
    from apache_beam.io.filesystems import FileSystems

    if FileSystems._pipeline_options is None:  # noqa: SLF001 - Beam has no public getter
        configure()
    return FileSystems


def forget_configuration() -> None:
    """Drop what :func:`filesystems` configured from this process's environment, so the next call
    reads ``$LABSE_BEAM_OPTIONS`` again: a forked child with another environment must not use its
    parent's S3 endpoint and credentials (labse_common.forked_main)."""
    from apache_beam.io.filesystems import FileSystems

    from labse_common.s3_client import forget_failures

    FileSystems._pipeline_options = None  # noqa: SLF001 - Beam has no public reset
    forget_failures()
    _CACHE.clear()
    _S3_CLIENTS.clear()  # no lock: a forked child has one thread, and a lock may be inherited held


# Beam builds a new filesystem object (for S3: a new boto3 client, ~0.5 s) on every
# FileSystems call; these helpers keep one per scheme and per options.
_CACHE: dict[tuple[str, int], object] = {}


def filesystem(path: str):
    """The (cached) Beam filesystem object that serves ``path``."""
    _require_scheme(path)
    fss = filesystems()
    key = (path.split("://", 1)[0], id(fss._pipeline_options))  # noqa: SLF001
    fs = _CACHE.get(key)
    if fs is None:
        fs = _CACHE[key] = fss.get_filesystem(path)
    return fs


@contextlib.contextmanager
def remote_failures() -> Iterator[None]:
    """Beam's filesystem wraps each path's error in a ``BeamIOError``; one whose cause is a
    :class:`~labse_common.errors.RemoteFailure` (the server stalled, died, refused or answered
    HTML) is raised as that failure: one line naming the operation, path and endpoint."""
    try:
        yield
    except OSError as e:
        from labse_common.remote_failures import failure_in

        found = failure_in(e)
        if found is None or found is e:
            raise
        raise found from None


def open_read(path: str):
    from apache_beam.io.filesystem import CompressionTypes

    with remote_failures():
        return filesystem(path).open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def create(path: str):
    from apache_beam.io.filesystem import CompressionTypes

    with remote_failures():
        return filesystem(path).create(path, compression_type=CompressionTypes.UNCOMPRESSED)


def match(pattern: str) -> list[str]:
    with remote_failures():
        return [m.path for m in filesystem(pattern).match([pattern])[0].metadata_list]


def exists(path: str) -> bool:
    with remote_failures():
        return filesystem(path).exists(path)


def delete(paths: list[str]) -> None:
    if paths:
        with remote_failures():
            filesystem(paths[0]).delete(paths)


def rename(srcs: list[str], dsts: list[str]) -> None:
    if srcs:
        with remote_failures():
            filesystem(srcs[0]).rename(srcs, dsts)


_S3_CLIENTS: dict[tuple, object] = {}
_S3_LOCK = __import__("threading").Lock()


def _s3_key(options) -> tuple:
    from apache_beam.options import pipeline_options

    if isinstance(options, pipeline_options.PipelineOptions):
        o = options.view_as(pipeline_options.S3Options)
        get = lambda k: getattr(o, k, None)  # noqa: E731
    else:
        get = options.get
    return tuple(
        get(k)
        for k in (
            "s3_access_key_id",
            "s3_secret_access_key",
            "s3_session_token",
            "s3_endpoint_url",
            "s3_disable_ssl",
            "s3_region_name",
            "s3_api_version",
            "s3_verify",
        )
    )


_STOCK_TRANSFERS: dict[str, type] = {}


def _transfers() -> dict[str, type]:
    from labse_common.s3_download import S3NoHeadDownloader
    from labse_common.s3_upload import S3ParallelUploader

    # Beam's S3IO.open looks both classes up in its module at every call.
    return {"S3Uploader": S3ParallelUploader, "S3Downloader": S3NoHeadDownloader}


def install_s3_transfers() -> bool:
    """Beam's S3 filesystem writes through :mod:`labse_common.s3_upload` (one request per small
    file, parallel parts for large ones) and reads through :mod:`labse_common.s3_download` (one
    request per file read start to end); idempotent; False without boto3 (the ``s3`` extra)."""
    if missing_part("s3") is not None:
        return False
    try:
        from apache_beam.io.aws import s3io
    except ImportError:
        return False
    for name, ours in _transfers().items():
        if getattr(s3io, name) is not ours:
            _STOCK_TRANSFERS[name] = getattr(s3io, name)
            setattr(s3io, name, ours)
    return True


def uninstall_s3_transfers() -> None:
    """Beam's stock uploader and downloader again (for the bench's before/after comparison)."""
    if _STOCK_TRANSFERS:
        from apache_beam.io.aws import s3io

        for name, stock in _STOCK_TRANSFERS.items():
            setattr(s3io, name, stock)


#: Beam's S3 client wrapper methods and the S3 operation each sends.
_CLIENT_OPERATIONS = {
    "get_object_metadata": "HeadObject",
    "get_stream": "GetObject",
    "list": "ListObjectsV2",
    "create_multipart_upload": "CreateMultipartUpload",
    "upload_part": "UploadPart",
    "complete_multipart_upload": "CompleteMultipartUpload",
    "delete": "DeleteObject",
    "delete_batch": "DeleteObjects",
    "copy": "CopyObject",
}


def _request_path(request) -> str:
    """The object(s) a Beam S3 request names, for the error line."""
    if hasattr(request, "src_bucket"):
        return (
            f"s3://{request.src_bucket}/{request.src_key} -> "
            f"s3://{request.dest_bucket}/{request.dest_key}"
        )
    if hasattr(request, "objects"):
        keys = list(request.objects or [])
        more = f" (and {len(keys) - 1} more)" if len(keys) > 1 else ""
        return f"s3://{request.bucket}/{keys[0] if keys else ''}{more}"
    key = getattr(request, "object", None) or getattr(request, "prefix", None) or ""
    return f"s3://{getattr(request, 'bucket', '?')}/{key}"


def _bounded(method, operation: str):
    """Beam's wrapper method, its errors judged by :func:`labse_common.s3_upload.as_beam_error`:
    404/412 stay Beam's ``S3ClientError``; the rest, after the client's bounded attempts, is an
    ``S3Failure`` that Beam's retry decorators do not retry again (they would try seven more
    times, minutes of back-off with a traceback logged each time)."""
    from apache_beam.io.aws.clients.s3 import messages
    from botocore.exceptions import BotoCoreError, ClientError

    from labse_common.s3_upload import as_beam_error

    @functools.wraps(method)
    def call(self, request, *args, **kwargs):
        try:
            return method(self, request, *args, **kwargs)
        except Exception as e:
            # Beam's handler itself fails on botocore errors whose ``response`` is None (read
            # timeouts, closed connections: an AttributeError, which Beam retries as if it were
            # a server error); the botocore error it was handling is the one to judge.
            ctx = e.__context__
            if not isinstance(e, messages.S3ClientError):
                if not isinstance(ctx, (BotoCoreError, ClientError)):
                    raise
                e = ctx
            raise as_beam_error(
                e, operation, _request_path(request), self.client.meta.endpoint_url
            ) from e

    return call


def install_s3_client_cache() -> bool:
    """Make Beam's S3 filesystem reuse one boto3 client per process and option set, and write
    through :mod:`labse_common.s3_upload` (one request per small file, parallel parts) and read
    through :mod:`labse_common.s3_download` (one request per small file, no HeadObject).

    Beam builds a new boto3 session and client for every file operation (``S3IO(options)`` in
    each ``S3FileSystem`` method), ~0.5 s each on the loopback server: a job with many small files
    spends most of its time there. boto3 clients are thread-safe; the per-download state Beam
    keeps lives on its wrapper object, which stays per operation.

    The client is :func:`labse_common.s3_client.new_client`'s (Beam builds its own with botocore's
    defaults: 60 s timeouts, and its own retries on top): bounded connect/read timeouts and
    attempts (``LABSE_S3_*``), answers that are not S3's refused, and a failure after the
    attempts raised as one ``S3Failure`` line that Beam does not retry. Idempotent; False when
    boto3 is not installed (the ``s3`` extra): nothing to install, and :func:`filesystem`
    names the extra if an ``s3://`` path is used."""
    if missing_part("s3") is not None:
        return False
    try:
        from apache_beam.io.aws.clients.s3 import boto3_client
    except ImportError:
        return False
    install_s3_transfers()
    cls = boto3_client.Client
    if getattr(cls, "_labse_client_cache", False):
        return True

    def __init__(self, options):  # noqa: N807 - replaces Client.__init__
        from labse_common.s3_client import new_client
        from labse_common.s3_limits import s3_limits

        key = (*_s3_key(options), s3_limits())
        with _S3_LOCK:
            client = _S3_CLIENTS.get(key)
        if client is None:
            client = new_client(options)
            with _S3_LOCK:
                client = _S3_CLIENTS.setdefault(key, client)
        self.client = client
        self._download_request = None
        self._download_stream = None
        self._download_pos = 0

    cls.__init__ = __init__
    for name, operation in _CLIENT_OPERATIONS.items():
        setattr(cls, name, _bounded(getattr(cls, name), operation))
    cls._labse_client_cache = True
    return True


def uninstall_s3_client_cache() -> None:
    """Beam's stock behaviour again (for the bench's before/after comparison)."""
    try:
        from apache_beam.io.aws.clients.s3 import boto3_client
    except ImportError:
        return
    uninstall_s3_transfers()
    cls = boto3_client.Client
    if getattr(cls, "_labse_client_cache", False):
        import importlib

        importlib.reload(boto3_client)
    _S3_CLIENTS.clear()
