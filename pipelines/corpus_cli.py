"""Command line of the corpus jobs (CommonCrawl, Wikipedia): options, config, run, exit code."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

import apache_beam as beam

from filters.langid import default_lid_model_path, load_fasttext_model
from filters.mono.quality import QualityScorer
from labse_common.cli import (
    USAGE_ERRORS,
    add_config_options,
    add_log_level_option,
    add_output_option,
    add_overwrite_option,
    load_config,
    usage_error,
)
from labse_common.logs import setup_logging
from labse_common.sections.corpus import CorpusConfig
from pipelines.inputs import expand_inputs
from pipelines.options import UsageError, pipeline_options, run_pipeline
from pipelines.outputs import claim_output
from pipelines.stats_io import report_and_exit

log = logging.getLogger(__name__)


def base_parser(prog: str, description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "Any other option is passed to Apache Beam unchanged, e.g. --runner FlinkRunner "
            "--flink_master HOST:8081 --environment_type DOCKER --environment_config IMAGE, or "
            "--runner DataflowRunner --project P --region R --temp_location gs://... "
            "--sdk_container_image IMAGE. Locally the DirectRunner runs in multi_processing mode "
            "with one worker per core (--direct_num_workers N to change)."
        ),
    )
    p.add_argument("--input", action="append", required=True, metavar="PATTERN",
                   help="input glob or Beam filesystem path (gs://, s3://, hdfs://); repeatable")
    add_output_option(p, "output folder: DIR/<lang>/*.parquet and DIR/stats.json")
    add_config_options(p, "corpus", "lid_threshold=0.3")
    p.add_argument("--lid-model", metavar="PATH",
                   help="fastText LID model (default: lid.176.ftz shipped in filters/models/)")
    p.add_argument("--lid-threshold", type=float, metavar="P",
                   help="drop sentences whose top language probability is below P")
    p.add_argument("--langs", metavar="xx,yy", help="keep only these language labels")
    p.add_argument("--quality-model", metavar="PATH",
                   help="fastText content/boilerplate model from `python -m pipelines.quality "
                   "train` (default: the rule-based scorer in filters/mono/boilerplate.py)")
    p.add_argument("--quality-threshold", type=float, metavar="P",
                   help="drop sentences whose content probability is below P")
    p.add_argument("--min-chars", type=int, help="minimum line/sentence length in characters")
    p.add_argument("--max-chars", type=int, help="maximum line/sentence length in characters")
    p.add_argument("--no-dedup", action="store_true",
                   help="skip the job-wide exact deduplication of normalised sentences")
    p.add_argument("--write-dropped", action="store_true",
                   help="also write dropped lines/sentences with their reason to DIR/_dropped/")
    p.add_argument("--rows-per-file", type=int, help="rows per output Parquet file")
    p.add_argument("--shards-per-language", type=int,
                   help="dedup/write groups per language; one group's distinct rows are held "
                   "by one worker, so use about rows-per-language / 1M at scale")
    add_overwrite_option(p, "output in DIR")
    add_log_level_option(p)
    return p


def resolve_config(args: argparse.Namespace, extra_flags: dict | None = None) -> CorpusConfig:
    """The typed ``corpus`` section: preset, then --set overrides, then explicit flags (flags
    win). A bad value (``lid_threshold=abc``, ``min_chars=-5``, unknown keys, NaN) is a
    ConfigError naming the key, raised here, before any worker starts."""
    flags = {
        "lid_model": args.lid_model,
        "lid_threshold": args.lid_threshold,
        "langs": args.langs.split(",") if args.langs else None,
        "quality_model": args.quality_model,
        "quality_threshold": args.quality_threshold,
        "min_chars": args.min_chars,
        "max_chars": args.max_chars,
        "rows_per_file": args.rows_per_file,
        "shards_per_language": args.shards_per_language,
        "dedup": False if args.no_dedup else None,
        "write_dropped": True if args.write_dropped else None,
        **(extra_flags or {}),
    }
    return load_config("corpus", args, flags)


def validate_models(cfg: CorpusConfig) -> None:
    """Load the models once on the driver: a wrong path fails here, not on 1000 workers."""
    try:
        load_fasttext_model(cfg.lid_model or default_lid_model_path())
        if cfg.quality_model:
            QualityScorer(cfg.quality_model)
    except (FileNotFoundError, ValueError) as e:
        raise UsageError(str(e)) from e


def run_cli(
    build,
    argv: Sequence[str] | None,
    parser: argparse.ArgumentParser,
    stage: str,
    extra_flags=None,
) -> int:
    """Parse, validate, build and run a corpus job; usage and config errors are exit status 2.

    ``extra_flags(args)`` gives the job's own flags for config keys (e.g. --page-timeout)."""
    args, beam_args = parser.parse_known_args(argv)
    setup_logging(args.log_level)
    try:
        cfg = resolve_config(args, extra_flags(args) if extra_flags else None)
        validate_models(cfg)
        opts = pipeline_options(beam_args)  # first: it gives FileSystems the S3/GCS options
        inputs = expand_inputs(args.input, getattr(args, "paths_prefix", "") or "")
        out = claim_output(args.output, args.overwrite)
    except USAGE_ERRORS as e:
        return usage_error(e, log)
    log.info("%s: %d input file(s) -> %s", stage, len(inputs), args.output)
    # The job writes under OUTPUT/_tmp-<job id>/; the files move into OUTPUT at the end.
    try:
        p = beam.Pipeline(options=opts)
        build(p, inputs, argparse.Namespace(**{**vars(args), "output": out.tmp}), cfg)
        run_pipeline(p)
        code = report_and_exit(out.tmp, stage)
    except BaseException:
        out.abort()
        raise
    out.commit()
    return code


def main_wrapper(fn) -> None:
    sys.exit(fn())
