"""Command line of the corpus jobs (CommonCrawl, Wikipedia): options, config, run, exit code."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

import apache_beam as beam

from filters.langid import default_lid_model_path, load_fasttext_model
from filters.quality import QualityScorer
from labse_common.config import resolve_section
from labse_common.logs import setup_logging
from pipelines.inputs import expand_inputs
from pipelines.options import UsageError, pipeline_options
from pipelines.outputs import prepare_output
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
    p.add_argument("--output", required=True, metavar="DIR",
                   help="output folder: DIR/<lang>/*.parquet and DIR/stats.json")
    p.add_argument("--config", default="demo", metavar="PRESET|FILE",
                   help="preset (demo, paper) or YAML file; its `corpus` section gives defaults")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override any `corpus` config key, e.g. --set lid_threshold=0.3")
    p.add_argument("--lid-model", metavar="PATH",
                   help="fastText LID model (default: lid.176.ftz shipped in filters/models/)")
    p.add_argument("--lid-threshold", type=float, metavar="P",
                   help="drop sentences whose top language probability is below P")
    p.add_argument("--langs", metavar="xx,yy", help="keep only these language labels")
    p.add_argument("--quality-model", metavar="PATH",
                   help="fastText content/boilerplate model from `python -m pipelines.quality "
                   "train` (default: the rule-based scorer in filters/boilerplate.py)")
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
    p.add_argument("--overwrite", action="store_true",
                   help="replace existing output in DIR instead of refusing to run")
    p.add_argument("--log-level", default=None, help="DEBUG, INFO (default), WARNING")
    return p


def resolve_config(args: argparse.Namespace) -> dict:
    """Preset section, then --set overrides, then explicit flags (flags win)."""
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
    }
    try:
        cfg = resolve_section(args.config, "corpus", args.set, flags)
    except (FileNotFoundError, ValueError) as e:
        raise UsageError(str(e)) from e
    if args.no_dedup:
        cfg["dedup"] = False
    if args.write_dropped:
        cfg["write_dropped"] = True
    return cfg


def validate_models(cfg: dict) -> None:
    """Load the models once on the driver: a wrong path fails here, not on 1000 workers."""
    try:
        load_fasttext_model(cfg.get("lid_model") or default_lid_model_path())
        if cfg.get("quality_model"):
            QualityScorer(cfg["quality_model"])
    except (FileNotFoundError, ValueError) as e:
        raise UsageError(str(e)) from e


def run_cli(build, argv: Sequence[str] | None, parser: argparse.ArgumentParser, stage: str) -> int:
    """Parse, validate, build and run a corpus job; map usage errors to exit status 2."""
    args, beam_args = parser.parse_known_args(argv)
    setup_logging(args.log_level)
    try:
        cfg = resolve_config(args)
        validate_models(cfg)
        inputs = expand_inputs(args.input, getattr(args, "paths_prefix", "") or "")
        prepare_output(args.output, args.overwrite)
        opts = pipeline_options(beam_args)
    except UsageError as e:
        log.error("%s", e)
        return 2
    log.info("%s: %d input file(s) -> %s", stage, len(inputs), args.output)
    with beam.Pipeline(options=opts) as p:
        build(p, inputs, args, cfg)
    return report_and_exit(args.output, stage)


def main_wrapper(fn) -> None:
    sys.exit(fn())
