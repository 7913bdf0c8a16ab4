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
