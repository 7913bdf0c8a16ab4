"""Beam job: mining between two embedding stores, the bounded miner's shard tasks as Beam elements.

    python -m pipelines.mine --src-emb emb/de --trg-emb emb/en --output mined/de-en \
        [--k 4] [--margin ratio] [--mode max] [--threshold T] [--shard-rows R] [--mem-gb G] \
        [--set index=auto|flat|ivf_pqfs|FACTORY] [--workdir SHARED] \
        [beam options, e.g. --runner FlinkRunner ...]

The same run as ``python -m mining mine`` with the same config (:func:`mining.mine.run_mine`
through :func:`mining.bounded.mine_bounded`): the search is cut into shards
(``mining.shard_rows`` rows, else one per ``mining.workers``), and each shard task (exact: a
target shard against every source chunk, both directions; an index: a shard of base rows added
to the index trained once on the driver, every query chunk searched) is one Beam element.
Tasks carry only paths and numbers, read the stores in chunks and write their neighbour lists
to ``--workdir``; the driver merges the lists (top-k over shards = one pass), re-scores,
margin-scores and writes mined.parquet, mined.tsv.gz, score_hist.png and stats.json, the files
``mining mine`` writes for the same inputs and config.

The stores may live on any filesystem the workers read (``s3://``, ``gs://``); ``--workdir``
must be a folder every worker can open (default: a local temporary folder, right for the
DirectRunner and a Dask cluster on one machine; a shared mount on a cluster). ``--output`` may
be an object store: written locally, uploaded and committed at the end.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from labse_common.cli import (
    add_config_options,
    add_log_level_option,
    add_output_option,
    add_overwrite_option,
    exit_with,
    run_main,
)
from labse_common.embedding_store import MANIFEST, exists
from labse_common.errors import InputError
from labse_common.filesystems import join
from labse_common.logs import setup_logging
from labse_common.output_dir import claim_output
from labse_common.remote import require_local
from labse_common.sections.mining import MiningConfig
from mining.__main__ import _print_stats, add_scoring_options, mining_config
from mining.bounded import check_workdir
from mining.mine import run_mine
from pipelines.options import check_remote, new_pipeline, pipeline_options, run_pipeline

log = logging.getLogger(__name__)


class BeamTasks:
    """A :class:`mining.bounded.Layout` runner: one Beam pipeline per batch of shard tasks
    (one batch for exact search; one per direction with an index, trained between them)."""

    def __init__(self, opts: PipelineOptions) -> None:
        self.opts = opts
        self.pipelines = 0
        self.tasks = 0

    def __call__(self, fn: Callable, tasks: Sequence) -> list:
        with new_pipeline(self.opts) as p:
            _ = (
                p
                | "Tasks" >> beam.Create(list(tasks))
                | "Spread" >> beam.Reshuffle()  # fan the tasks out over workers
                | "Search" >> beam.Map(fn)
            )
            run_pipeline(p)
        self.pipelines += 1
        self.tasks += len(tasks)
        return [t.out for t in tasks]  # written by the tasks, at known paths


def run_beam_mine(
    src_emb: str,
    trg_emb: str,
    out: str,
    cfg: MiningConfig,
    beam_args: Sequence[str],
    src_text: str | None = None,
    trg_text: str | None = None,
    src_lang: str = "",
    trg_lang: str = "",
    opts: PipelineOptions | None = None,
    workdir: str | None = None,
) -> dict:
    """Mine with the shard tasks run as a Beam job, write the outputs into the local folder
    ``out``; the report (as :func:`mining.mine.run_mine`'s, with ``runner: beam``)."""
    if opts is None:
        opts = pipeline_options(beam_args)  # first: it gives FileSystems the S3/GCS options
    for flag, path in (("--src-emb", src_emb), ("--trg-emb", trg_emb)):
        if not exists(path) and not exists(join(path, MANIFEST)):
            raise InputError(path, "embeddings not found", flag)
    src_text, trg_text = src_text or src_emb, trg_text or trg_emb
    runner = BeamTasks(opts)
    return run_mine(
        src_text,
        trg_text,
        out,
        cfg,
        src_emb,
        trg_emb,
        None,
        src_lang,
        trg_lang,
        runner=runner,
        extra={"runner": "beam"},
        workdir=workdir,
    )


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m pipelines.mine",
        description="`python -m mining mine` with its shard tasks as Beam elements: the search "
        "(exact, or the index mining.index names; auto = the planner's) cut into shards of "
        "mining.shard_rows rows (else one per mining.workers), the lists merged, re-scored and "
        "margin-scored on the driver. Writes OUT/mined.parquet, OUT/mined.tsv.gz, "
        "OUT/score_hist.png and OUT/stats.json (OUT may be s3://...). Any option not listed here "
        "is passed to Beam, e.g. --runner FlinkRunner, --direct_running_mode in_memory.",
    )
    ap.add_argument("--src-emb", required=True, help="source embeddings: store directory or .npy")
    ap.add_argument("--trg-emb", required=True, help="target embeddings: store directory or .npy")
    add_output_option(ap, "output directory")
    ap.add_argument(
        "--src-text",
        help="source sentences (text or Parquet; default: the texts inside the --src-emb store)",
    )
    ap.add_argument("--trg-text", help="target sentences (default: the --trg-emb store's texts)")
    ap.add_argument("--src-lang", default="", help="source language code written in the output")
    ap.add_argument("--trg-lang", default="", help="target language code written in the output")
    ap.add_argument(
        "--workdir",
        help="where the shard tasks write their neighbour lists: a local "
        "folder every worker can open (default: a temporary folder)",
    )
    add_scoring_options(ap)
    add_config_options(ap, "mining", "k=8")
    add_overwrite_option(ap, "a non-empty --output (old files are removed at the end)")
    add_log_level_option(ap)
    return ap


def run(argv: Sequence[str] | None = None) -> int:
    args, beam_args = build_parser().parse_known_args(argv)
    setup_logging(args.log_level)
    # Remote paths are checked in _run, with the job's own S3 options once they are parsed.
    return run_main(lambda: _run(args, beam_args), log, args=args, check_remote=False)


def _run(args: argparse.Namespace, beam_args: list[str]) -> int:
    if args.workdir:  # the tasks write it with local file APIs
        require_local(args.workdir, "--workdir", "python -m pipelines.mine")
        check_workdir(args.workdir, "--workdir")
    cfg = mining_config(args)  # typed: shard_rows >= 1, k >= 1, no NaN, ...
    opts = pipeline_options(beam_args)  # first: it gives FileSystems the S3/GCS options
    check_remote([args.src_emb, args.trg_emb, args.src_text, args.trg_text, args.output], opts)
    # Written aside and committed; a remote --output: staged locally, uploaded, committed.
    with claim_output(args.output, args.overwrite, staged=True) as claimed:
        tmp = claimed.path
        report = run_beam_mine(
            args.src_emb,
            args.trg_emb,
            tmp,
            cfg,
            beam_args,
            args.src_text,
            args.trg_text,
            args.src_lang,
            args.trg_lang,
            opts=opts,
            workdir=args.workdir,
        )
    _print_stats(report)
    return 0


if __name__ == "__main__":
    exit_with(run)
