"""A stand-in Beam stage for tests/pipelines/test_stage_descendants.py, run as ``python -m
tests.pipelines.beam_sleep_job``: a job on the default local runner with two SDK worker
processes, each sleeping in its elements until killed."""

from __future__ import annotations

import time

import apache_beam as beam

from pipelines.options import pipeline_options


def _sleep(x: int) -> int:
    time.sleep(600)
    return x


def main() -> None:
    with beam.Pipeline(options=pipeline_options(["--direct_num_workers", "2"])) as p:
        _ = p | beam.Create(range(8)) | beam.Reshuffle() | beam.Map(_sleep)


if __name__ == "__main__":
    main()
