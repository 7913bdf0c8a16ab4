"""Command line of the corpus jobs (CommonCrawl, Wikipedia): options, config, run, exit code."""

from __future__ import annotations

import argparse
import json
import logging
import os
from collections.abc import Iterable, Sequence

from apache_beam.io.filesystems import FileSystems

from filters.langid import default_lid_model_path, load_fasttext_model
from filters.mono.quality import QualityScorer
from labse_common.cli import (
    add_config_options,
    add_log_level_option,
    add_output_option,
    add_overwrite_option,
    command_parser,
    load_config,
    run_main,
)
from labse_common.errors import InputError, UsageError
from labse_common.filesystems import is_remote
from labse_common.logs import setup_logging
from labse_common.output_dir import claim_output
from labse_common.sections.corpus import CorpusConfig
from pipelines.inputs import expand_inputs
from pipelines.options import check_remote, new_pipeline, pipeline_options, run_pipeline
from pipelines.spill import remove_spill
from pipelines.stats_io import report_and_exit

log = logging.getLogger(__name__)


def base_parser(
    prog: str, description: str, examples: Iterable[str] = ()
) -> argparse.ArgumentParser:
    """The parser of a corpus job (CommonCrawl, Wikipedia): ``description`` is what it does;
    ``examples`` default to a local run and a run on a Dask cluster."""
    p = command_parser(
        prog,
        description,
        "Any other option is passed to Apache Beam unchanged, e.g. --runner FlinkRunner "
        "--flink_master HOST:8081 --environment_type DOCKER --environment_config IMAGE, or "
        "--runner DataflowRunner --project P --region R --temp_location gs://... "
        "--sdk_container_image IMAGE. Locally the DirectRunner runs in multi_processing mode "
        "with one worker per core (--direct_num_workers N to change).",
        examples=list(examples)
        or [
            f"{prog} --input 'input/*' --output sentences/",
            f"{prog} --input 's3://bucket/input/*' --output s3://bucket/sentences "
            "--set lid_threshold=0.3 --runner DaskRunner",
        ],
    )
    p.add_argument(
        "--input",
        action="append",
        required=True,
        metavar="PATTERN",
        help="input glob or Beam filesystem path (gs://, s3://, hdfs://); repeatable",
    )
    add_output_option(p, "output folder: DIR/<lang>/*.parquet and DIR/stats.json")
    add_config_options(p, "corpus", "lid_threshold=0.3")
    p.add_argument(
        "--lid-model",
        metavar="PATH",
        help="fastText LID model (default: lid.176.ftz shipped in filters/models/)",
    )
    p.add_argument(
        "--lid-threshold",
        type=float,
        metavar="P",
        help="drop sentences whose top language probability is below P",
    )
    p.add_argument("--langs", metavar="xx,yy", help="keep only these language labels")
    p.add_argument(
        "--quality-model",
        metavar="PATH",
        help="fastText content/boilerplate model from `python -m pipelines.quality "
        "train` (default: the rule-based scorer in filters/mono/boilerplate.py)",
    )
    p.add_argument(
        "--quality-threshold",
        type=float,
        metavar="P",
        help="drop sentences whose content probability is below P",
    )
    p.add_argument("--min-chars", type=int, help="minimum line/sentence length in characters")
    p.add_argument("--max-chars", type=int, help="maximum line/sentence length in characters")
    p.add_argument(
        "--no-dedup",
        action="store_true",
        help="skip the job-wide exact deduplication of normalised sentences",
    )
    p.add_argument(
        "--write-dropped",
        action="store_true",
        help="also write dropped lines/sentences with their reason to DIR/_dropped/",
    )
    p.add_argument("--rows-per-file", type=int, help="rows per output Parquet file")
    p.add_argument(
        "--shards-per-language",
        type=int,
        help="dedup/write groups per language; one group's distinct rows are held "
        "by one worker, so use about rows-per-language / 1M at scale",
    )
    _add_resume_options(p)
    add_overwrite_option(p, "output in DIR")
    add_log_level_option(p)
    return p


def _add_resume_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--resume",
        action="store_true",
        help="resumable by shard (groups of input files): a rerun after a kill keeps the "
        "shards an earlier attempt finished (DIR/_partial/) and does the rest; local DIR only",
    )
    p.add_argument(
        "--resume-stage",
        metavar="NAME",
        help="the name LABSE_KILL_AFTER=NAME:N matches (default: the job's name)",
    )
    p.add_argument(
        "--files-per-shard",
        type=int,
        metavar="N",
        help="with --resume: input files per shard (default: about 64 shards in all)",
    )


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
    for flag, path in (
        ("--lid-model", cfg.lid_model or default_lid_model_path()),
        ("--quality-model", cfg.quality_model),
    ):
        if not path:
            continue
        if is_remote(path):  # fastText loads a local file, on the driver and on every worker
            raise UsageError(
                f"{flag} {path}: fastText models are loaded from a local file; "
                "copy the model to every worker (e.g. into the container image)"
            )
        if not os.path.isfile(path):
            raise InputError(path, "fastText model not found", flag)
        try:  # fastText reports a foreign or damaged model as ValueError with its C++ message
            QualityScorer(path) if flag == "--quality-model" else load_fasttext_model(path)
        except ValueError as e:
            raise InputError(path, f"not a usable fastText model ({e})", flag) from None


def run_cli(
    build,
    argv: Sequence[str] | None,
    parser: argparse.ArgumentParser,
    stage: str,
    extra_flags=None,
    check=None,
    documents=None,
) -> int:
    """Parse, validate, build and run a corpus job under the one error mapping (run_main).

    ``extra_flags(args)`` gives the job's own flags for config keys (e.g. --page-timeout);
    ``check(args)`` validates the job's own inputs once the filesystems are configured;
    ``documents(p, inputs, args, cfg)`` gives the job's documents and stats for ``--resume``."""
    args, beam_args = parser.parse_known_args(argv)
    setup_logging(args.log_level)
    body = lambda: _run(build, args, beam_args, stage, extra_flags, check, documents)  # noqa: E731
    # Remote paths are checked in _run, with the job's own S3 options once they are parsed.
    return run_main(body, log, args=args, check_remote=False)


def _run(build, args, beam_args, stage: str, extra_flags, check, documents) -> int:
    if args.files_per_shard is not None and args.files_per_shard < 1:
        raise UsageError(f"--files-per-shard {args.files_per_shard}: must be at least 1")
    cfg = resolve_config(args, extra_flags(args) if extra_flags else None)
    opts = pipeline_options(beam_args)  # first: it gives FileSystems the S3/GCS options
    check_remote(
        [
            *args.input,
            args.output,
            getattr(args, "paths_prefix", None),
            getattr(args, "index", None),
            cfg.lid_model,
            cfg.quality_model,
        ],
        opts,
    )
    validate_models(cfg)
    if check is not None:
        check(args)
    inputs = expand_inputs(args.input, getattr(args, "paths_prefix", "") or "")
    log.info("%s: %d input file(s) -> %s", stage, len(inputs), args.output)
    if args.resume and documents is not None:
        return _run_resumed(documents, args, opts, inputs, cfg, stage)
    # The job writes under OUTPUT/_tmp-<job id>/; the files move into OUTPUT at the end, and
    # nothing is left when it fails (a useless input included).
    with claim_output(args.output, args.overwrite) as out:
        with new_pipeline(opts) as p:
            build(p, inputs, argparse.Namespace(**{**vars(args), "output": out.tmp}), cfg)
            run_pipeline(p)
        remove_spill(out.tmp)
        code = report_and_exit(out.tmp, stage, shown_as=out.output)  # named where it will be
        _require_some_input(out.tmp, inputs)
    return code


def _run_resumed(documents, args, opts, inputs: list[str], cfg, stage: str) -> int:
    """The job by shard (pipelines/corpus_resume.py): the finished shards of a killed attempt
    are kept, the rest done, then the shards are deduplicated together into the output."""
    from labse_common.resume_shards import Shards, partial_of
    from pipelines import corpus_resume, remote_claim

    groups = corpus_resume.plan_shards(inputs, args.files_per_shard)
    key = corpus_resume.resume_key(inputs, groups, args, cfg)
    kill_as = args.resume_stage or stage
    remote = is_remote(args.output)
    if remote:  # the shards' records beside the job's own folder (labse_common.resume_shards)
        remote_claim.take_stale_claim(args.output)
        claim = claim_output(args.output, args.overwrite)
    else:
        claim = claim_output(args.output, args.overwrite, resume=key, stage=kill_as)
    with claim as out:
        if remote:
            remote_claim.remove_stale_tmp(out.output, out.tmp)
            shards = Shards(partial_of(out.output), kill_as)
            shards.prepare(key)
            where = out.tmp
        else:
            shards, where = out.shards, out.path
        corpus_resume.write_resumed(where, shards, documents, groups, args, opts, cfg, stage)
        code = report_and_exit(where, stage, shown_as=out.output)
        _require_some_input(where, inputs)
    if remote:
        Shards(partial_of(args.output), kill_as).remove()
    return code


def _require_some_input(output: str, inputs: list[str]) -> None:
    """Every input file unreadable (empty, truncated, not WARC/XML): one line, exit 2, nothing
    written; a job that read its input and kept nothing is a result (stats.json says why)."""
    with FileSystems.open(FileSystems.join(output, "stats.json")) as f:
        counts = json.loads(f.read().decode("utf-8"))["counts"]
    for unit in ("files", "file_ranges"):
        c = counts.get(unit)
        if c and c["in"] > 0 and c["out"] == 0:
            why = ", ".join(f"{r}={n}" for r, n in sorted(c["dropped"].items()))
            path = inputs[0] if len(inputs) == 1 else None
            what = "is not readable" if path else f"none of the {len(inputs)} files is readable"
            raise InputError(path, f"{what}, no sentence written ({why})", "--input")
