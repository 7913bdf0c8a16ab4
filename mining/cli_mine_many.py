"""Mine several language pairs, embedding/indexing each language once."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os

from labse_common.cli import (
    UsageError,
    add_output_option,
    add_overwrite_option,
    command_parser,
    run_main,
)
from labse_common.filesystems import is_remote
from labse_common.logs import setup_logging
from labse_common.output_dir import claim_output
from labse_common.sections.mining import MiningConfig
from mining.command_options import (
    add_config,
    add_mining_options,
    mining_config,
    print_stats,
    require_inputs,
)

log = logging.getLogger("mining")

SUMMARY = "Mine every pair in --pairs (or the config's mining.pairs), each language embedded once."
DETAILS = """\
Each language is read, embedded and indexed once and reused by every pair it is in. Writes
OUT/<src>-<trg>/ with the files of `mine`. From embedding stores (--emb) into a local folder,
a rerun after a kill keeps the pairs an earlier attempt finished."""
EXAMPLES = (
    "python -m mining mine-many --pairs de-en fr-en --corpus 'sentences/{lang}' "
    "--emb 'emb/{lang}' --output mined/",
    "python -m mining mine-many --config my.yaml --corpus 'sentences/{lang}' --model run/model "
    "--output mined/",
)


def build_parser() -> argparse.ArgumentParser:
    mm = command_parser("python -m mining mine-many", SUMMARY, DETAILS, EXAMPLES)
    mm.add_argument("--pairs", nargs="+", help="language pairs like de-en fr-en")
    mm.add_argument(
        "--corpus", required=True, help="corpus path pattern with {lang}, e.g. 'sentences/{lang}'"
    )
    mm.add_argument("--emb", help="embeddings path pattern with {lang} (.npy or store)")
    mm.add_argument("--model", help="LaBSE checkpoint directory (instead of --emb)")
    add_output_option(mm, "output directory: OUT/<src>-<trg>/ per pair, OUT/embeddings/<lang>/")
    add_overwrite_option(mm, "a non-empty output folder (old files are removed at the end)")
    add_mining_options(mm)
    add_config(mm)
    return mm


def _resume_key(args: argparse.Namespace, cfg: MiningConfig, pairs: list) -> str | None:
    """The fingerprint of a resumable mine-many (its inputs and settings), or None when it
    cannot resume: a remote output, or vectors encoded here (--model)."""
    from labse_common.resume_shards import fingerprint

    if args.model or not args.emb or any(map(is_remote, (args.output, args.corpus, args.emb))):
        return None
    langs = dict.fromkeys(lang for pair in pairs for lang in pair)
    paths = [p.format(lang=lang) for lang in langs for p in (args.corpus, args.emb)]
    paths += [args.lexicon] if args.lexicon else []
    settings = {"pairs": pairs, "config": dataclasses.asdict(cfg), "lexicon": args.lexicon}
    return fingerprint([p for p in paths if os.path.exists(p)], settings)


def _write_shard_stats(out: str, reports: dict[str, dict], resumed: int) -> None:
    """``stats.json`` of the whole job: its pairs' counts summed, and how many pairs an earlier
    attempt finished."""
    from labse_common.stats import sum_reports, write_report

    report = sum_reports("mine-many", reports.values(), shards=len(reports), resumed_shards=resumed)
    write_report(os.path.join(out, "stats.json"), report)


def run(args: argparse.Namespace) -> int:
    from mining.many import language_pairs, run_many

    cfg = mining_config(args)
    pairs = language_pairs(cfg.pairs)  # checked (and normalised) before the output is claimed
    if not args.model and not args.emb:
        raise UsageError("give --model DIR or --emb PATTERN")
    require_inputs(("--lexicon", args.lexicon))
    if args.lexicon:  # checked (values, languages) before the output is claimed
        from mining.lexicon_file import check_for_pairs

        check_for_pairs(args.lexicon, pairs, absent_ok=True)  # absent: mined without it
    # From stores (--emb) into a local folder, each pair is a shard a rerun after a kill keeps;
    # a remote output is staged locally and uploaded at the end.
    key = _resume_key(args, cfg, pairs)
    with claim_output(args.output, args.overwrite, staged=True, resume=key, stage="mine") as out:
        reports = run_many(
            pairs,
            args.corpus,
            out.path,
            cfg,
            emb_pattern=args.emb,
            model=args.model,
            lexicon=args.lexicon,
            shards=out.shards,
        )
        if out.shards is not None:
            _write_shard_stats(out.path, reports, out.shards.resumed)
    for pair, rep in reports.items():
        print(f"== {pair}")
        print_stats(rep)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)
    # One error mapping; every s3:// / gs:// value is preflighted before the command runs.
    return run_main(lambda: run(args), log, args=args)
