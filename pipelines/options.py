"""Runner options shared by every Beam job, kept free of heavy imports (models, fastText)."""

from __future__ import annotations

import os
from collections.abc import Sequence

from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions

from labse_common.cli import UsageError

__all__ = ["UsageError", "pipeline_options"]


def pipeline_options(beam_args: Sequence[str]) -> PipelineOptions:
    """Beam options from the unparsed CLI arguments; locally the DirectRunner uses every core.

    Every standard option (--runner FlinkRunner --flink_master ..., --runner DataflowRunner
    --project ...) passes through unchanged; only the DirectRunner's defaults change, to
    multi_processing with one worker per core.
    """
    opts = PipelineOptions(list(beam_args), save_main_session=False)
    direct = opts.view_as(DirectOptions)
    if "--direct_running_mode" not in " ".join(beam_args):
        direct.direct_running_mode = "multi_processing"
    if not direct.direct_num_workers:
        direct.direct_num_workers = os.cpu_count() or 1
    return opts
