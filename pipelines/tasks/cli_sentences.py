"""Write each language's sentences in canonical order: what is mined, what the vocabulary learns.

The work is :func:`pipelines.sentences_task.sentences` (resumable by language).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from labse_common.cli import (
    add_log_level_option,
    add_overwrite_option,
    command_parser,
    run_main,
)
from labse_common.logs import setup_logging
from pipelines.sentences_task import sentences
from pipelines.tasks import log_result

log = logging.getLogger("pipelines.tasks")

SUMMARY = (
    "One canonically ordered Parquet per language from the corpus jobs' outputs:\n"
    "OUTPUT/mine/<lang>/ (what is mined) and, with the training sentences added,\n"
    "OUTPUT/vocab/<lang>/ (what the vocabulary learns from)."
)
DETAILS = "A rerun after a kill keeps the languages finished."
EXAMPLES = (
    "python -m pipelines.e2e_tasks sentences --corpus wikipedia/ "
    "--corpus commoncrawl/ --extra inputs/train_sentences --output sentences/",
)


def build_parser() -> argparse.ArgumentParser:
    s = command_parser("python -m pipelines.e2e_tasks sentences", SUMMARY, DETAILS, EXAMPLES)
    s.add_argument("--corpus", action="append", required=True, help="a corpus job's output folder")
    s.add_argument(
        "--extra", action="append", default=[], help="more <lang>/*.parquet for the vocabulary"
    )
    s.add_argument("--output", required=True, help="folder to write (mine/, vocab/)")
    add_overwrite_option(s)
    add_log_level_option(s)
    return s


def run(args: argparse.Namespace) -> int:
    rep = sentences(
        [Path(c) for c in args.corpus],
        [Path(e) for e in args.extra],
        Path(args.output),
        args.overwrite,
    )
    log_result("sentences", rep)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)
    return run_main(lambda: run(args), log, args=args)
