"""The jobs' default runner: Beam's batch engine, never a run-time download of Prism."""

from __future__ import annotations

import logging
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import DirectOptions, StandardOptions
from apache_beam.testing.util import assert_that, equal_to

from pipelines import local_runner
from pipelines.options import pipeline_options, run_pipeline


def test_default_runner_is_local_and_explicit_runner_wins() -> None:
    opts = pipeline_options([])
    assert opts.view_as(StandardOptions).runner == local_runner.NAME
    assert opts.view_as(DirectOptions).direct_running_mode == "multi_processing"
    assert (
        pipeline_options(["--runner", "DirectRunner"]).view_as(StandardOptions).runner
        == "DirectRunner"
    )


def test_default_worker_count_is_the_usable_cpus_and_the_flag_wins() -> None:
    """Beam's own default is 1 worker; a job without the flag must use every CPU it may use."""
    from labse_common.threads import usable_cpus

    workers = lambda argv: pipeline_options(argv).view_as(DirectOptions).direct_num_workers  # noqa: E731
    assert workers([]) == usable_cpus()
    assert workers(["--direct_num_workers", "1"]) == 1
    assert workers(["--direct_num_workers=3"]) == 3


@pytest.mark.slow
def test_local_runner_runs_multi_processing_without_prism(caplog) -> None:
    caplog.set_level(logging.INFO)
    p = beam.Pipeline(options=pipeline_options(["--direct_num_workers", "2"]))
    out = (
        p
        | beam.Create(range(20))
        | beam.Map(lambda x: (x % 3, x))
        | beam.GroupByKey()
        | beam.MapTuple(lambda k, xs: (k, sum(xs)))
    )
    assert_that(out, equal_to([(0, 63), (1, 70), (2, 57)]))
    run_pipeline(p)
    # Beam's DirectRunner logs "Running pipeline with PrismRunner" before it tries the download.
    assert not [r for r in caplog.records if "prism" in r.getMessage().lower()]


def test_misspelt_runner_is_a_usage_error() -> None:
    import pytest

    from labse_common.errors import UsageError

    with pytest.raises(UsageError, match="--runner NoSuchRunner"):
        pipeline_options(["--runner", "NoSuchRunner"])


def test_a_job_stopped_while_building_leaves_no_beam_temp_folder(tmp_path, monkeypatch) -> None:
    import tempfile

    import pytest

    from pipelines.options import new_pipeline

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where Beam's mkdtemp puts it
    with pytest.raises(ValueError, match="useless input"):
        with new_pipeline(pipeline_options([])) as p:
            assert list(tmp_path.glob("beam-pipeline-temp*")) == [Path(p.local_tempdir)]
            raise ValueError("useless input")  # as a build step's check would
    assert not list(tmp_path.glob("beam-pipeline-temp*"))
    # Beam's own Pipeline keeps it in the same case (the reason for the helper).
    beam.Pipeline(options=pipeline_options([]))
    assert len(list(tmp_path.glob("beam-pipeline-temp*"))) == 1
