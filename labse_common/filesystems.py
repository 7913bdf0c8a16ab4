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

Beam is imported only when a remote path is used.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence

ENV = "LABSE_BEAM_OPTIONS"


def configure(args: Sequence[str] | None = None) -> None:
    """Give ``FileSystems`` these Beam flags (default: ``$LABSE_BEAM_OPTIONS``)."""
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    if args is None:
        args = shlex.split(os.environ.get(ENV, ""))
    FileSystems.set_options(PipelineOptions(list(args)))


def filesystems():
    """``FileSystems``, configured from the environment if nothing configured it yet."""
    from apache_beam.io.filesystems import FileSystems

    if FileSystems._pipeline_options is None:  # noqa: SLF001 - Beam has no public getter
        configure()
    return FileSystems


# Beam builds a new filesystem object (for S3: a new boto3 client, ~0.5 s) on every
# FileSystems call; these helpers keep one per scheme and per options.
_CACHE: dict[tuple[str, int], object] = {}


def filesystem(path: str):
    """The (cached) Beam filesystem object that serves ``path``."""
    fss = filesystems()
    key = (path.split("://", 1)[0], id(fss._pipeline_options))  # noqa: SLF001
    fs = _CACHE.get(key)
    if fs is None:
        fs = _CACHE[key] = fss.get_filesystem(path)
    return fs


def open_read(path: str):
    from apache_beam.io.filesystem import CompressionTypes

    return filesystem(path).open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def create(path: str):
    from apache_beam.io.filesystem import CompressionTypes

    return filesystem(path).create(path, compression_type=CompressionTypes.UNCOMPRESSED)


def match(pattern: str) -> list[str]:
    return [m.path for m in filesystem(pattern).match([pattern])[0].metadata_list]


def exists(path: str) -> bool:
    return filesystem(path).exists(path)


def delete(paths: list[str]) -> None:
    if paths:
        filesystem(paths[0]).delete(paths)


def rename(srcs: list[str], dsts: list[str]) -> None:
    if srcs:
        filesystem(srcs[0]).rename(srcs, dsts)


def join(base: str, *parts: str) -> str:
    return filesystem(base).join(base, *parts)
