"""Runner options shared by every Beam job, kept free of heavy imports (models, fastText)."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator, Sequence

from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import (
    DirectOptions,
    PipelineOptions,
    SetupOptions,
    StandardOptions,
)
from apache_beam.runners.runner import create_runner

from labse_common.cli import UsageError
from labse_common.remote import check_paths, remote_paths
from labse_common.sections.beam import SHORT_RUNNER_NAMES, BeamOptionError, parse_beam_args
from pipelines import local_runner

__all__ = ["UsageError", "check_remote", "new_pipeline", "pipeline_options", "run_pipeline"]


def pipeline_options(beam_args: Sequence[str]) -> PipelineOptions:
    """Beam options from the unparsed CLI arguments; locally the job uses every core.

    Every standard option (--runner FlinkRunner --flink_master ..., --runner DataflowRunner
    --project ...) passes through unchanged. With no --runner the job runs on
    :class:`pipelines.local_runner.LocalRunner` (the DirectRunner's batch engine, no Prism
    download), in multi_processing mode with one worker per core.
    """
    try:  # what Beam would drop with a warning, or fail on once the job runs, is one line now
        parse_beam_args(beam_args)
    except BeamOptionError as e:
        # The command's own parser took its flags first: an unknown one is neither.
        what = "not an option of this command or of Beam" if e.unknown else e.problem
        raise UsageError(f"--{e.option}: {what}{e.hint('--')}") from None
    opts = PipelineOptions(list(beam_args), save_main_session=False)
    from labse_common.filesystems import install_s3_client_cache

    install_s3_client_cache()  # one S3 client per process, not one per file operation
    # The driver's own FileSystems calls (input globbing, output claim, stats) use the job's
    # S3/GCS options too; Dask workers get them from a worker plugin (below).
    FileSystems.set_options(opts)
    # Beam's SDK workers (local processes, Flink, Dataflow) import this package first: its import
    # installs the bounded S3 client there too, even in a worker whose stages are all Beam's own
    # (a sink's finalize), which would otherwise wait 60 s per try and retry for minutes.
    setup = opts.view_as(SetupOptions)
    setup.beam_plugins = [*(setup.beam_plugins or []), "pipelines"]
    _give_dask_workers_options(opts, beam_args)
    std = opts.view_as(StandardOptions)
    if not std.runner:  # Beam's default, the DirectRunner, would first download Prism
        std.runner = local_runner.NAME
    # Beam knows the Dask runner only by its full name; the short one is what users write.
    std.runner = SHORT_RUNNER_NAMES.get(std.runner, std.runner)
    try:  # a misspelt --runner is a usage error now, not a traceback once the job is built
        create_runner(std.runner)
    except (ValueError, ImportError, AttributeError) as e:
        raise UsageError(f"--runner {std.runner}: {e}") from e
    direct = opts.view_as(DirectOptions)
    given = " ".join(beam_args)
    if "--direct_running_mode" not in given:
        direct.direct_running_mode = "multi_processing"
    # Beam's default is 1 worker, not "unset": test the flag, not the value (the jobs ran on
    # one core of every machine until 2026-11-24 because of this).
    if "--direct_num_workers" not in given or not direct.direct_num_workers:
        from labse_common.threads import usable_cpus

        direct.direct_num_workers = usable_cpus()
    return opts


def check_remote(values, opts: PipelineOptions) -> None:
    """Preflight every ``s3://``/``gs://`` value among ``values`` with the job's own S3 options,
    right after :func:`pipeline_options`: missing credentials, endpoint or bucket is one line
    within seconds instead of minutes of Beam retries with a traceback each."""
    check_paths(remote_paths(values), options=opts)


@contextlib.contextmanager
def new_pipeline(opts: PipelineOptions) -> Iterator:
    """A ``beam.Pipeline`` whose local temp folder goes when the block ends. Beam makes the
    folder when the pipeline is built and removes it only in ``run``: a job that stops before
    (a useless input found while building) left an empty ``/tmp/beam-pipeline-temp*`` behind."""
    import apache_beam as beam

    p = beam.Pipeline(options=opts)
    try:
        yield p
    finally:
        shutil.rmtree(p.local_tempdir, ignore_errors=True)


def run_pipeline(p) -> None:
    """Run ``p`` to the end; a worker's error is raised here. Closes a DaskRunner's client, whose
    connection would otherwise outlive the job (and retry once the cluster is gone)."""
    result = p.run()
    try:
        result.wait_until_finish()
    finally:
        client = getattr(result, "client", None)
        if client is not None:
            client.close()


try:  # dask is optional (the `dev` extra); only the DaskRunner needs it
    from distributed import WorkerPlugin as _WorkerPlugin
except ImportError:  # pragma: no cover
    _WorkerPlugin = object


class _FileSystemOptions(_WorkerPlugin):
    """A dask ``WorkerPlugin``: gives each worker's FileSystems the job's options (Beam ships
    options to Flink/Dataflow workers itself; its DaskRunner does not)."""

    name = "labse-beam-filesystem-options"

    def __init__(self, args: list[str]) -> None:
        import os

        from labse_common.s3_limits import LIMIT_ENVS

        self.args = args
        # The S3 limits are environment settings: a cluster's workers do not share ours.
        self.limits = {k: os.environ[k] for k in LIMIT_ENVS if k in os.environ}

    def setup(self, worker) -> None:
        import os

        from labse_common.filesystems import configure

        os.environ.update(getattr(self, "limits", {}))
        configure(self.args)


def _give_dask_workers_options(opts: PipelineOptions, beam_args: Sequence[str]) -> None:
    runner = str(opts.view_as(StandardOptions).runner or "")
    if not runner.endswith("DaskRunner"):
        return
    from labse_common.filesystems import require_part

    require_part("dask", f"--runner {runner}")  # one line naming the extra, not a traceback
    from apache_beam.runners.dask.dask_runner import DaskOptions
    from distributed import Client

    address = opts.view_as(DaskOptions).address
    if not address:
        return  # a LocalCluster of this process: FileSystems is already configured
    with Client(address, timeout=60) as client:
        client.register_plugin(_FileSystemOptions(list(beam_args)))
