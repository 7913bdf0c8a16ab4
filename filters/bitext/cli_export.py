"""``python -m filters export``: the final bitext (Parquet, TSV.gz, Moses files), every dropped pair with its reason."""

from __future__ import annotations

import argparse
import logging

from labse_common.cli import (
    add_log_level_option,
    add_output_option,
    add_overwrite_option,
    command_parser,
    exit_with,
    run_main,
)
from labse_common.logs import setup_logging

log = logging.getLogger("filters.export")


def build_parser() -> argparse.ArgumentParser:
    p = command_parser(
        "python -m filters export",
        "Write the final bitext (Parquet, TSV.gz, Moses files) from the mined pairs and what the "
        "filters kept, and every dropped pair with its reason.",
        "What is kept: with --combined the combine command's kept pairs; with --filtered the "
        "apply command's kept pairs; else with --rules the pairs the hard rules kept with "
        "margin >= --min-margin; else the mined pairs with that margin. Writes "
        "OUTPUT/bitext.parquet, OUTPUT/bitext.tsv.gz (src, trg, src_lang, trg_lang, margin), "
        "Moses files OUTPUT/bitext.SRC-TRG.{SRC,TRG}, OUTPUT/rejected.parquet (every other mined "
        "pair with its reason) and OUTPUT/stats.json (pairs in, out, dropped per reason).",
        examples=[
            "python -m filters export --mined mined/ --combined combined/ --output bitext/",
            "python -m filters export --mined mined/ --rules rules/ --min-margin 1.1 --output bitext/",
        ],
    )
    add_input_options(p)
    add_output_option(p, "folder to write (local)")
    add_overwrite_option(p)
    add_log_level_option(p)
    return p


def add_input_options(p: argparse.ArgumentParser) -> None:
    """What an export reads (--mined, --filtered, --combined, --rules, --min-margin, --pair):
    the same for ``filters export`` and its Beam job ``pipelines.export``."""
    p.add_argument(
        "--mined",
        required=True,
        metavar="DIR",
        help="mining mine-many output: <pair>/mined.parquet",
    )
    p.add_argument(
        "--filtered",
        metavar="DIR",
        help="the apply command's output (kept.parquet, rejected.parquet)",
    )
    p.add_argument(
        "--combined",
        metavar="DIR",
        help="the combine command's output (scored.parquet with keep, combined.json): "
        "the pairs it kept, its scores and estimated GOOD share (the runner's filter)",
    )
    p.add_argument(
        "--rules",
        metavar="DIR",
        help="the rules command's outputs, one <pair>/ folder each (kept.parquet, dropped.parquet)",
    )
    p.add_argument(
        "--min-margin",
        type=float,
        default=1.05,
        help="margin floor when neither --filtered nor --combined is given (1.05)",
    )
    p.add_argument(
        "--pair",
        metavar="SRC-TRG",
        help="only this language pair (MINE_DIR/SRC-TRG/mined.parquet): writes its part "
        "(kept.parquet, rejected.parquet, stats.json) for python -m pipelines.pair_assembly "
        "bitext, which makes the whole folder from the parts (the stage runner's bitext stage)",
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)

    def body() -> int:
        from filters.bitext.export import export_bitext
        from filters.bitext.export_parts import check_pair, export_pair

        opts = dict(
            filtered=args.filtered,
            combined=args.combined,
            rules=args.rules,
            min_margin=args.min_margin,
            overwrite=args.overwrite,
        )
        if args.pair is not None:
            rep = export_pair(args.mined, check_pair(args.pair), args.output, **opts)
        else:
            rep = export_bitext(args.mined, args.output, **opts)
        c = rep["counts"].get("pairs", {"in": 0, "out": 0})
        log.info("export: %d of %d pairs kept (%s)", c["out"], c["in"], rep["source"])
        if rep.get("warning"):
            log.warning("export: %s", rep["warning"])
        return 0

    return run_main(body, log, args=args)


if __name__ == "__main__":
    exit_with(main)
