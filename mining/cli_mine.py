"""Mine one corpus pair."""

from __future__ import annotations

import argparse
import logging

from labse_common.cli import (
    UsageError,
    add_output_option,
    add_overwrite_option,
    command_parser,
    run_main,
)
from labse_common.logs import setup_logging
from labse_common.output_dir import claim_output
from mining.command_options import (
    add_config,
    add_mining_options,
    mining_config,
    print_stats,
    require_inputs,
)

log = logging.getLogger("mining")

SUMMARY = (
    "Mine translation pairs between two corpora (FAISS kNN, margin scoring, LASER-compatible)."
)
DETAILS = """\
Writes OUT/mined.parquet, OUT/mined.tsv.gz (margin<TAB>src<TAB>trg<TAB>src_lang<TAB>trg_lang
<TAB>src_id<TAB>trg_id<TAB>cosine[<TAB>urls...], no header, decreasing margin),
OUT/score_hist.png and OUT/stats.json."""
EXAMPLES = (
    "python -m mining mine --src-text de.txt --trg-text en.txt --model run/model "
    "--src-lang de --trg-lang en --output mined/",
    "python -m mining mine --src-text de.parquet --trg-text en.parquet --src-emb emb/de "
    "--trg-emb emb/en --output mined/ --k 8",
)


def build_parser() -> argparse.ArgumentParser:
    m = command_parser("python -m mining mine", SUMMARY, DETAILS, EXAMPLES)
    m.add_argument(
        "--src-text",
        required=True,
        help="source sentences: text (one per line) or Parquet with a 'text' column",
    )
    m.add_argument("--trg-text", required=True, help="target sentences, same formats")
    m.add_argument("--model", help="LaBSE checkpoint directory (HF format) to embed the texts")
    m.add_argument("--src-emb", help="source embeddings: .npy (row i = line i) or store directory")
    m.add_argument("--trg-emb", help="target embeddings: .npy or store directory")
    m.add_argument("--src-lang", default="", help="source language code written in the output")
    m.add_argument("--trg-lang", default="", help="target language code written in the output")
    add_output_option(m, "output directory")
    add_overwrite_option(m, "a non-empty output folder (old files are removed at the end)")
    add_mining_options(m)
    add_config(m)
    return m


def run(args: argparse.Namespace) -> int:
    from mining.mine import run_mine

    cfg = mining_config(args)
    if bool(args.model) == bool(args.src_emb or args.trg_emb):
        raise UsageError("give either --model DIR or both --src-emb and --trg-emb")
    if not args.model and not (args.src_emb and args.trg_emb):
        raise UsageError("give both --src-emb and --trg-emb")
    require_inputs(
        ("--src-text", args.src_text), ("--trg-text", args.trg_text), ("--lexicon", args.lexicon)
    )
    if args.lexicon:  # checked (values, languages) before the output is claimed
        from mining.lexicon_file import check_for_pairs

        check_for_pairs(args.lexicon, [(args.src_lang, args.trg_lang)])
    # Written under OUT/_tmp-<id>/; a remote OUT: staged locally, uploaded and committed at the end.
    with claim_output(args.output, args.overwrite, staged=True) as claimed:
        report = run_mine(
            args.src_text,
            args.trg_text,
            claimed.path,
            cfg,
            src_emb=args.src_emb,
            trg_emb=args.trg_emb,
            model=args.model,
            src_lang=args.src_lang,
            trg_lang=args.trg_lang,
            lexicon=args.lexicon,
        )
    print_stats(report)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)
    # One error mapping; every s3:// / gs:// value is preflighted before the command runs.
    return run_main(lambda: run(args), log, args=args)
