"""Beam job: mining between two embedding stores, the bounded miner's shard tasks as Beam elements.

    python -m pipelines.mine --src-emb emb/de --trg-emb emb/en --output mined/de-en \
        [--k 4] [--margin ratio] [--mode max] [--threshold T] [--shard-rows R] [--mem-gb G] \
        [--set index=auto|flat|ivf_pqfs|FACTORY] [--workdir SHARED] \
        [beam options, e.g. --runner FlinkRunner ...]
    python -m pipelines.mine --pair de-en --corpus 'sentences/{lang}' --emb 'emb/{lang}' \
        --output mined/de-en [--lexicon lexicon.parquet] [options and beam options as above]
    python -m pipelines.mine --sum-stats mined --pairs de-en fr-en [beam options]

The same run as ``python -m mining mine`` with the same config (:func:`mining.mine.run_mine`
through :func:`mining.bounded.mine_bounded`): the search is cut into shards
(``mining.shard_rows`` rows, else one per ``mining.workers``), and each shard task (exact: a
target shard against every source chunk, both directions; an index: a shard of base rows added
to the index trained once on the driver, every query chunk searched) is one Beam element.
Tasks carry only paths and numbers, read the stores in chunks and write their neighbour lists
to ``--workdir``; the driver merges the lists (top-k over shards = one pass), re-scores,
margin-scores and writes mined.parquet, mined.tsv.gz, score_hist.png and stats.json, the files
``mining mine`` writes for the same inputs and config.

``--pair`` is one pair of ``python -m mining mine-many`` (the runner's ``mine`` stage on a Beam
runner runs one such job per pair): the same library path (:func:`mining.many.run_many`) with
the same corpus patterns, lexicon re-ranking and config, so OUT holds exactly the files and rows
``mine-many`` writes into its ``<pair>/`` folder. ``--sum-stats DIR`` then writes
``DIR/stats.json``, the pairs' counts summed as ``mine-many`` sums them.

The stores may live on any filesystem the workers read (``s3://``, ``gs://``); ``--workdir``
must be a folder every worker can open (default: a local temporary folder, right for the
DirectRunner and a Dask cluster on one machine; a shared mount on a cluster). ``--output`` may
be an object store: written locally, uploaded and committed at the end. Remote sentences
(a Parquet folder or file) and a remote ``--lexicon`` are copied to a local temporary folder
first: the driver reads them whole, as the local path does.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from labse_common import filesystems
from labse_common.cli import (
    add_config_options,
    add_log_level_option,
    add_output_option,
    add_overwrite_option,
    command_parser,
    exit_with,
    run_main,
)
from labse_common.datafiles import read_json
from labse_common.embedding_store import MANIFEST, exists
from labse_common.errors import InputError, UsageError
from labse_common.filesystems import is_remote, join
from labse_common.logs import setup_logging
from labse_common.output_dir import claim_output
from labse_common.remote import require_local
from labse_common.sections.mining import MiningConfig
from labse_common.stats import sum_reports, write_report
from mining.bounded import check_workdir
from mining.command_options import add_scoring_options, mining_config
from mining.command_options import print_stats as _print_stats
from mining.many import language_pairs, run_many
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
    ap = command_parser(
        "python -m pipelines.mine",
        "Mine translation pairs between two embedding stores as a Beam job: 'python -m mining mine' with its shard tasks as Beam elements.",
        "The search (exact, or the index mining.index names; auto = the planner's) is cut into shards of mining.shard_rows rows (else one per mining.workers); the lists are merged, re-scored and margin-scored on the driver. Writes OUT/mined.parquet, OUT/mined.tsv.gz, OUT/score_hist.png and OUT/stats.json (OUT may be s3://...). With --pair: one pair of 'mining mine-many' (its files for that pair, exactly). Any option not listed here is passed to Beam, e.g. --runner FlinkRunner, --direct_running_mode in_memory.",
        examples=[
            "python -m pipelines.mine --src-emb emb/de --trg-emb emb/en --output mined/de-en",
            "python -m pipelines.mine --pair de-en --corpus 'sentences/{lang}' --emb 'emb/{lang}' --output mined/de-en --runner DaskRunner",
            "python -m pipelines.mine --sum-stats mined --pairs de-en fr-en",
        ],
    )
    ap.add_argument("--src-emb", help="source embeddings: store directory or .npy")
    ap.add_argument("--trg-emb", help="target embeddings: store directory or .npy")
    add_output_option(ap, "output directory", required=False)
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
    _add_pair_options(ap)
    add_scoring_options(ap)
    add_config_options(ap, "mining", "k=8")
    add_overwrite_option(ap, "a non-empty --output (old files are removed at the end)")
    add_log_level_option(ap)
    return ap


def _add_pair_options(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("one pair of `mining mine-many` (instead of --src-emb/--trg-emb)")
    g.add_argument("--pair", help="the language pair, e.g. de-en: OUT gets mine-many's <pair>/")
    g.add_argument("--corpus", help="sentences path pattern with {lang}, e.g. 'sentences/{lang}'")
    g.add_argument("--emb", help="embedding store path pattern with {lang}, e.g. 'emb/{lang}'")
    g.add_argument(
        "--lexicon",
        metavar="FILE",
        help="IBM Model 1 dictionaries (`filters lexicon`'s lexicon.parquet): lex_fwd and "
        "lex_bwd columns, and the re-ranking of mining.lexicon_weight, as mine-many's",
    )
    g.add_argument(
        "--sum-stats",
        metavar="DIR",
        help="instead of mining: write DIR/stats.json, the counts of DIR/<pair>/stats.json for "
        "--pairs summed as mine-many sums them (the last step of the runner's mine stage)",
    )
    g.add_argument("--pairs", nargs="+", help="the pairs --sum-stats sums, e.g. de-en fr-en")


def run(argv: Sequence[str] | None = None) -> int:
    ap = build_parser()
    args, beam_args = ap.parse_known_args(argv)
    if args.output is None and not args.sum_stats:  # as a required option is refused
        ap.error("the following arguments are required: --output")
    setup_logging(args.log_level)
    # Remote paths are checked in _run, with the job's own S3 options once they are parsed.
    return run_main(lambda: _run(args, beam_args), log, args=args, check_remote=False)


def _run(args: argparse.Namespace, beam_args: list[str]) -> int:
    _check_mode(args)
    if args.sum_stats:
        return _sum_stats(args.sum_stats, args.pairs, beam_args)
    if args.workdir:  # the tasks write it with local file APIs
        require_local(args.workdir, "--workdir", "python -m pipelines.mine")
        check_workdir(args.workdir, "--workdir")
    cfg = mining_config(args)  # typed: shard_rows >= 1, k >= 1, no NaN, ...
    if args.pair:
        return _run_pair(args, cfg, beam_args)
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


def _check_mode(args: argparse.Namespace) -> None:
    """One of the three forms, with its own flags only."""
    one_pair = ("src_emb", "trg_emb", "src_text", "trg_text", "src_lang", "trg_lang")
    pair_flags = ("pair", "corpus", "emb", "lexicon")
    given = {k for k, v in vars(args).items() if v not in (None, "", False)}
    if args.sum_stats:
        if not args.pairs:
            raise UsageError("--sum-stats needs --pairs (the pairs whose stats.json it sums)")
        extra = given & {*one_pair, *pair_flags, "output"}
        if extra:
            raise UsageError(f"--sum-stats takes no --{sorted(extra)[0].replace('_', '-')}")
        return
    if args.pairs:
        raise UsageError("--pairs goes with --sum-stats (one pair to mine: --pair)")
    if args.pair:
        if not (args.corpus and args.emb):
            raise UsageError("--pair needs --corpus and --emb (path patterns with {lang})")
        extra = given & set(one_pair)
        if extra:
            raise UsageError(f"--pair takes no --{sorted(extra)[0].replace('_', '-')}")
        return
    if given & set(pair_flags):
        raise UsageError(f"--{sorted(given & set(pair_flags))[0]} goes with --pair")
    if not (args.src_emb and args.trg_emb):
        raise UsageError("give --src-emb and --trg-emb (or --pair with --corpus and --emb)")


def _run_pair(args: argparse.Namespace, cfg: MiningConfig, beam_args: list[str]) -> int:
    """One pair of mine-many, its shard tasks as Beam elements, into ``--output`` itself."""
    pairs = language_pairs([args.pair])  # normalised; a code never names a folder unchecked
    (src, trg), name = pairs[0], "-".join(pairs[0])
    inputs = []
    for flag, pattern in (("--corpus", args.corpus), ("--emb", args.emb)):
        try:
            inputs += [pattern.format(lang=src), pattern.format(lang=trg)]
        except (KeyError, IndexError, ValueError):  # another {name}, a lone brace
            inputs = []
        if "{lang}" not in pattern or not inputs:
            raise UsageError(f"{flag} {pattern}: a path pattern with {{lang}} (and no other {{}})")
    opts = pipeline_options(beam_args)  # first: it gives FileSystems the S3/GCS options
    check_remote([*inputs, args.lexicon, args.output], opts)
    with _local_inputs(args.corpus, args.lexicon, (src, trg)) as (corpus, lexicon):
        if lexicon:  # checked (values, languages) before the output is claimed
            from mining.lexicon_file import check_for_pairs

            check_for_pairs(lexicon, pairs, absent_ok=True)  # absent: mined without it
        with claim_output(args.output, args.overwrite, staged=True) as claimed:
            # mine-many writes <its output>/<pair>/: here a folder inside the staged output,
            # whose files then move up to the output's top.
            many = tempfile.mkdtemp(prefix="_pair-", dir=claimed.path)
            reports = run_many(
                pairs,
                corpus,
                many,
                cfg,
                emb_pattern=args.emb,
                lexicon=lexicon,
                runner=BeamTasks(opts),
                workdir=args.workdir,
            )
            for f in os.listdir(os.path.join(many, name)):
                shutil.move(os.path.join(many, name, f), os.path.join(claimed.path, f))
            shutil.rmtree(many)
    _print_stats(reports[name])
    return 0


@contextlib.contextmanager
def _local_inputs(
    corpus: str, lexicon: str | None, langs: Sequence[str]
) -> Iterator[tuple[str, str | None]]:
    """The corpus pattern and lexicon as the library reads them: remote sentences (a Parquet
    folder or file) and a remote lexicon copied to a temporary folder, since the driver reads
    them whole with local file APIs; a remote embedding store as corpus stays where it is
    (:func:`mining.corpus.read_corpus` reads its texts there)."""
    urls = [corpus.format(lang=lang) for lang in langs]
    remote_text = is_remote(corpus) and not all(exists(join(u, MANIFEST)) for u in urls)
    if not (remote_text or is_remote(lexicon)):
        yield corpus, lexicon
        return
    with tempfile.TemporaryDirectory(prefix="mine-inputs-") as tmp:
        if remote_text:
            for lang, url in zip(langs, urls, strict=True):
                _download(url, os.path.join(tmp, "corpus", lang), "--corpus")
            corpus = os.path.join(tmp, "corpus", "{lang}")
        if lexicon and is_remote(lexicon):
            lexicon = _download(lexicon, os.path.join(tmp, "lexicon.parquet"), "--lexicon")
        yield corpus, lexicon


def _download(url: str, local: str, flag: str) -> str:
    """A remote file, or every file under a remote folder, copied to ``local``."""
    url = url.rstrip("/")
    files = [f for f in filesystems.match(url + "/**") if not f.endswith("/")]
    if not files:
        if not filesystems.exists(url):
            raise InputError(url, "not found", flag)
        files = [url]  # one file: copied to ``local`` itself
    for f in files:
        dest = local if f == url else os.path.join(local, f[len(url) + 1 :])
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with filesystems.open_read(f) as src, open(dest, "wb") as out:
            shutil.copyfileobj(src, out, 1 << 22)
    log.info("copied %d file(s) of %s to %s", len(files), url, local)
    return local


def _sum_stats(folder: str, pairs: Sequence[str], beam_args: list[str]) -> int:
    """``folder/stats.json``: the pairs' counts summed, as mine-many writes it (the pairs a
    rerun kept are counted by the runner, in the stage's manifest)."""
    names = ["-".join(p) for p in language_pairs(pairs)]
    opts = pipeline_options(beam_args)  # the S3/GCS options of FileSystems
    check_remote([folder], opts)
    reports = [read_json(join(folder, name, "stats.json"), "--sum-stats") for name in names]
    report = sum_reports("mine-many", reports, shards=len(names))
    target = join(folder, "stats.json")
    if is_remote(folder):  # one PUT: the object appears whole or not at all
        with filesystems.create(target) as f:
            f.write(json.dumps(report, indent=2, ensure_ascii=False).encode("utf-8") + b"\n")
    else:
        write_report(target, report)
    _print_stats(report)
    return 0


if __name__ == "__main__":
    exit_with(run)
