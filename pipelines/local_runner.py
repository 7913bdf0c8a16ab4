"""The local default runner: the engine of Beam's DirectRunner for batch jobs, without its Prism try.

Beam's DirectRunner (2.6x) first tries the Prism runner, a Go binary it downloads from GitHub
at run time. Here that breaks two rules: nothing may download at run time, and offline it costs
seconds per job plus a ``/tmp/beam-temp*`` folder that is never removed. Online it would
silently swap the engine under the job. The DirectRunner's fallback, the FnApiRunner, is what
the jobs are written and tested for (``--direct_running_mode``, ``--direct_num_workers``), so
the default runs that directly. ``--runner DirectRunner`` (or any other) still picks Beam's own.

Its SDK worker processes (``multi_processing``, the default) die with the job's process, however
that one dies: Beam's own outlive a killed job until their gRPC channel times out (18 s or more),
still holding memory and files of a run the stage runner has already lost.
"""

from __future__ import annotations

from apache_beam.portability import python_urns
from apache_beam.portability.api import beam_provision_api_pb2
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.runners.portability.portable_runner import JobServiceHandle
from apache_beam.runners.runner import PipelineRunner

from labse_common.forked_main import dying_with_this_process

#: The ``--runner`` value ``pipelines.options`` sets when the command line names none.
NAME = f"{__name__}.LocalRunner"


class LocalRunner(PipelineRunner):
    """Runs a batch pipeline on this machine with Beam's FnApiRunner, as the DirectRunner's
    batch path does: the job's options reach every SDK worker through the provision info."""

    def run_pipeline(self, pipeline, options):
        encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
        info = fn_runner.ExtendedProvisionInfo(
            beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)
        )
        return _WorkersDieWithJob(provision_info=info).run_pipeline(pipeline, options)


class _WorkersDieWithJob(fn_runner.FnApiRunner):
    """The FnApiRunner with every subprocess SDK worker's command line (``sh -c`` runs it, from
    a thread that waits for it) wrapped to die with this process."""

    def run_via_runner_api(self, pipeline_proto, options):
        for env in pipeline_proto.components.environments.values():
            if env.urn == python_urns.SUBPROCESS_SDK:
                env.payload = dying_with_this_process(env.payload.decode("utf-8")).encode("utf-8")
        return super().run_via_runner_api(pipeline_proto, options)
