"""The runner's command line: ``python -m pipelines.run`` (console script ``labse-run``).

How the runner works inside (stage declarations, manifests, claims) is the package docstring
(:mod:`pipelines.run`) and docs/stages.md; ``--help`` says what a user does with it."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

from labse_common.cli import CommandParser, add_log_level_option, command_parser, run_main
from labse_common.errors import InputError, UsageError
from labse_common.filesystems import is_remote
from labse_common.logs import setup_logging
from labse_common.model_init import demo_shape_warning
from labse_common.output_dir import claim_output
from labse_common.resume_shards import RUN_FOLDER_ENV
from pipelines.run.config import effective_config, typed_config
from pipelines.run.corpus_stages import SYNTHETIC
from pipelines.run.declare import STAGES, Context
from pipelines.run.loop import plan_lines, publish_bitext, run_stages
from pipelines.run.plan import make_plan
from pipelines.run.run_folder import RunFolder, default_scratch
from pipelines.run.stages import NAMES
from pipelines.run.validate import validate_demo, validate_sources, validate_synthetic

log = logging.getLogger("pipelines.run")


SUMMARY = """\
Run the whole pipeline, from your crawl, dumps and pairs to filtered, NMT-ready bitext, as a
series of stages writing into one run folder."""

DETAILS = """\
What a run reads and mines is its config: the sources section (web crawl, Wikipedia dumps,
plain text, training pairs, known alignments), mining.pairs, model.init, beam (the runner of
every Beam stage) and launch (how training starts). The demo preset runs on a small embedded
sample, or on --data.

A rerun skips every stage that is complete and unchanged: a stopped or failed run resumes at
the stage that did not finish, and a changed setting reruns the stages that read it and
those after them. A person labels a sample of the mined pairs: the run stops after the sample
stage with exit status 3 naming OUTPUT/labels.tsv; label it (python -m filters label
OUTPUT/labels.tsv, or any editor) and run the same command again (sources.label_from: eval
labels from the known alignment instead). Two runs on one run folder: the second stops with
exit status 2.

stages, in order: {stages}
(--list says what each stage reads; docs/stages.md what each writes and how a rerun decides.)

environment:
  LABSE_STAGE_START=fork|spawn  how each stage's process starts: fork (the default on Linux)
      from a server that imported Beam, torch and transformers once; spawn (the default
      elsewhere, and the fallback when that server cannot start) a new interpreter"""

EXAMPLES = (
    "python -m pipelines.run --config demo --output demo_out",
    "python -m pipelines.run --config demo --output demo_out --dry-run",
    "python -m pipelines.run --config my.yaml --data /data --output s3://bucket/run "
    "--set mining.k=8",
    "python -m pipelines.run --config my.yaml --data /data --output run --from mine",
    "python -m pipelines.run --list",
)


def build_parser() -> CommandParser:
    """The runner's parser: shortened flags (``--conf``, ``--out``) are unknown flags, exit 2."""
    ap = command_parser(
        "python -m pipelines.run",
        SUMMARY,
        DETAILS.format(stages=" -> ".join(NAMES)),
        EXAMPLES,
    )
    ap.add_argument(
        "--config",
        default="demo",
        metavar="PRESET|FILE",
        help="preset (demo, paper) or YAML file; every stage reads its section (demo)",
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override a config value, e.g. --set mining.k=8 (repeatable)",
    )
    ap.add_argument(
        "--data",
        metavar="DIR",
        help="folder the relative globs of sources: are taken from (default: the current folder); "
        "for the demo preset the ../shared/data layout (tatoeba/, wikipedia/, commoncrawl/), and "
        "without it the demo runs on the embedded synthetic sample",
    )
    _add_output_options(ap)
    ap.add_argument(
        "--publish",
        metavar="URL",
        help="at the end, copy the final bitext folder (Parquet, TSV, Moses, hf/) and the report "
        "to URL (s3://, gs:// or a local folder); checked before any stage runs. URL must be "
        "empty or hold an earlier publication (see --publish-overwrite); never the run folder "
        "or --data, nor inside them",
    )
    ap.add_argument(
        "--publish-overwrite",
        action="store_true",
        help="with --publish: replace the earlier publication at URL (exactly the files its "
        "_PUBLISHED.json lists; other files there are kept)",
    )
    ap.add_argument(
        "--from",
        dest="start",
        choices=NAMES,
        metavar="STAGE",
        help="rerun STAGE and every stage after it (earlier ones must be complete)",
    )
    ap.add_argument(
        "--only",
        type=_stage_list,
        metavar="STAGE[,STAGE...]",
        help="rerun these stages alone, e.g. --only wikipedia,commoncrawl (their inputs must be "
        "complete; the stages after them are left as they are)",
    )
    ap.add_argument(
        "--dry-run", action="store_true", help="print the plan (run/skip and why) and exit"
    )
    ap.add_argument(
        "--list",
        action="store_true",
        help="print every stage: what it does, the config keys and stages it reads",
    )
    add_log_level_option(ap)
    return ap


def _add_output_options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--output",
        default="demo_out",
        metavar="DIR|URL",
        help="run folder (demo_out): a local folder, a shared mount, or s3://BUCKET/PATH or "
        "gs://BUCKET/PATH, where manifests, logs, stats, labels.tsv and every stage's outputs "
        "live (the runner works in a local scratch copy of it, see --scratch; S3 endpoint and "
        "credentials as for any Beam job: beam.options or LABSE_BEAM_OPTIONS)",
    )
    ap.add_argument(
        "--scratch",
        metavar="DIR",
        help="with --output on object storage: the local working copy, only a cache (default: "
        "$XDG_CACHE_HOME/labse/runs/<the URL>-<hash>, ~/.cache when unset); a runner elsewhere "
        "with an empty one goes on from the remote run folder",
    )


def _stage_list(value: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    wrong = [n for n in names if n not in NAMES]
    if wrong or not names:
        raise argparse.ArgumentTypeError(
            f"unknown stage {', '.join(wrong) or repr(value)} (stages: {', '.join(NAMES)})"
        )
    return names


def describe_stages() -> str:
    lines = []
    for s in STAGES:
        lines.append(f"{s.name}: {s.what}")
        lines.append(f"    reads config: {', '.join(s.reads(None)) or '-'}")
        ups = [*s.inputs, *(f"{o} (when it runs)" for o in s.optional_inputs)]
        lines.append(f"    reads stages: {', '.join(ups) or '-'}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)
    return run_main(lambda: _main(args), log)


def _main(args: argparse.Namespace) -> int:
    if args.list:
        sys.stdout.write(describe_stages())
        return 0
    if args.start and args.only:
        raise UsageError("--from and --only exclude each other")
    cfg = effective_config(args.config, args.set)
    _share_store_options(cfg)
    folder = _remote_folder(args, cfg)
    out = folder.scratch.resolve() if folder else Path(args.output).resolve()
    os.environ[RUN_FOLDER_ENV] = str(out)  # the stages' shard fingerprints spell it $OUT
    demo = typed_config(cfg)["sources"]["demo"]
    if args.data and is_remote(args.data):
        raise UsageError(f"--data {args.data}: the stage runner reads a local folder")
    synthetic = demo is not None and not args.data
    if synthetic:
        base = out / SYNTHETIC.name
        validate_synthetic(demo)
    else:
        base = Path(args.data).resolve() if args.data else Path.cwd()
        if args.data and not base.is_dir():
            raise InputError(base, "not a folder", "--data")
        if demo is not None:
            validate_demo(base, demo)
    ctx = Context(
        out=out,
        base=base,
        synthetic=synthetic,
        config_file=out / "_config.yaml",
        cfg=cfg,
        remote=folder.url if folder else None,
        folder=folder,
    )
    validate_sources(ctx)
    guard = _publish_guard(args, out, base)
    # After every up-front check: a run refused with one line prints that line alone.
    if warning := demo_shape_warning(ctx.values):
        log.warning(warning)
    if args.dry_run and folder is None:
        sys.stdout.write(plan_lines(make_plan(ctx, args.start, args.only)))
        return 0
    # The whole run folder is this runner's until it ends (however it ends); a runner killed
    # outright leaves its claim behind, which the next run takes over.
    with claim_output(out, resumable=True), _remote_claim(folder, push=not args.dry_run):
        if args.dry_run:
            sys.stdout.write(plan_lines(make_plan(ctx, args.start, args.only)))
            return 0
        rc = run_stages(ctx, args)
        if rc == 0 and args.publish:
            publish_bitext(ctx, args.publish, overwrite=args.publish_overwrite, protected=guard)
    return rc


def _share_store_options(cfg: dict) -> None:
    """The object-store options of ``beam.options`` (``s3_endpoint_url``, …) for the runner's
    own reads and writes and every stage's outside a Beam job, through ``LABSE_BEAM_OPTIONS``
    (which the stages inherit), unless that is set: one place to give an endpoint."""
    from labse_common import filesystems
    from labse_common.sections.beam import BeamConfig

    if os.environ.get(filesystems.ENV):
        return
    args = BeamConfig(**typed_config(cfg)["beam"]).args()
    store = [a for a in args if a.startswith(("--s3_", "--gcs_", "--hdfs_"))]
    if store:
        os.environ[filesystems.ENV] = shlex.join(store)
        filesystems.forget_configuration()


def _remote_folder(args: argparse.Namespace, cfg: dict) -> RunFolder | None:
    """The run folder on object storage (``--output s3://…``), checked before anything runs:
    endpoint, bucket and credentials (one line, exit 2); None for a local run folder."""
    if not is_remote(args.output):
        if args.scratch:
            raise UsageError("--scratch: only with --output on object storage (s3://, gs://)")
        return None
    from labse_common.remote import check_paths

    check_paths([args.output])
    scratch = Path(args.scratch) if args.scratch else default_scratch(args.output)
    if scratch.exists() and not scratch.is_dir():
        raise InputError(scratch, "not a folder", "--scratch")
    return RunFolder(args.output, scratch)


@contextlib.contextmanager
def _remote_claim(folder: RunFolder | None, push: bool = True) -> Iterator[None]:
    """The remote run folder's claim and state: pulled at start, pushed however the run ends
    (not after a ``--dry-run``, which changes nothing)."""
    if folder is None:
        yield
        return
    folder.claim()
    try:
        folder.pull_state()
        yield
    finally:
        try:
            if push:
                folder.push_state()
        finally:
            folder.release()


def _publish_guard(args: argparse.Namespace, out: Path, base: Path) -> dict[str, Path]:
    """Check the --publish destination before any stage runs; the folders it must keep out of."""
    if args.publish_overwrite and not args.publish:
        raise UsageError("--publish-overwrite: needs --publish URL")
    guard = {"the run folder, --output": out}
    if args.data:
        guard["the --data folder"] = base
    if args.publish and is_remote(args.output):
        run_url, dest = args.output.rstrip("/") + "/", args.publish.rstrip("/") + "/"
        if run_url.startswith(dest) or dest.startswith(run_url):
            raise UsageError(
                f"--publish {args.publish}: inside or above the run folder --output {args.output}"
            )
    if args.publish:
        from labse_common.publish import check_destination

        check_destination(
            args.publish, "--publish", overwrite=args.publish_overwrite, protected=guard
        )
    return guard
