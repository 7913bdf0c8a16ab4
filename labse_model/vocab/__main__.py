"""Learner alone, from saved smoothed counts (``word_counts.parquet`` of ``pipelines.vocab``).

python -m labse_model.vocab --counts DIR/word_counts.parquet --output OUT --vocab-size N
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from labse_common.cli import (
    add_config_options,
    add_log_level_option,
    add_output_option,
    add_overwrite_option,
    command_parser,
    exit_with,
    load_config,
    run_main,
)
from labse_common.datafiles import read_json, read_parquet
from labse_common.errors import InputError, UsageError
from labse_common.filesystems import is_remote
from labse_common.logs import setup_logging
from labse_common.output_dir import claim_output
from labse_common.remote import require_local
from labse_common.stats import StageCounter
from labse_model.vocab.build import finish_vocab
from labse_model.vocab.learner import LearnerParams, VocabTooSmall

log = logging.getLogger("labse_model.vocab")


SUMMARY = (
    "Learn a WordPiece vocabulary from a smoothed word-count table (word_counts.parquet of\n"
    "python -m pipelines.vocab) and write vocab.txt, tokenizer.json, vocab_stats.json and\n"
    "stats.json."
)
DETAILS = "The learner alone: rerun it on saved counts with another size or learner settings."
EXAMPLES = (
    "python -m labse_model.vocab --counts vocab/word_counts.parquet --output vocab2 "
    "--vocab-size 16000",
)


def build_parser() -> argparse.ArgumentParser:
    p = command_parser("python -m labse_model.vocab", SUMMARY, DETAILS, EXAMPLES)
    p.add_argument(
        "--counts",
        required=True,
        metavar="PARQUET",
        help="word_counts.parquet (columns word, count) from pipelines.vocab",
    )
    add_output_option(p, "output folder")
    p.add_argument("--vocab-size", type=int, metavar="N", help="target size (preset: vocab_size)")
    p.add_argument(
        "--heldout",
        metavar="PARQUET",
        help="held-out sentences (columns lang, text) for vocab_stats.json; default: "
        "heldout.parquet next to --counts when present",
    )
    add_config_options(p, "vocab", "learner.num_iterations=3")
    add_overwrite_option(p)
    add_log_level_option(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)
    return run_main(lambda: _run(args), log, args=args)


def _read_counts(path: str) -> tuple[list[str], np.ndarray]:
    table = read_parquet(path, ["word", "count"], "--counts", required=["word", "count"])
    if table.num_rows == 0:
        raise InputError(path, "no words in the table", "--counts")
    counts = table.column("count").to_numpy(zero_copy_only=False)
    if not np.issubdtype(counts.dtype, np.number):
        raise InputError(
            path, f"column 'count' is not numeric ({table.column('count').type})", "--counts"
        )
    return table.column("word").to_pylist(), counts.astype(np.float64)


def _read_heldout(path: str, flag: str | None) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    table = read_parquet(path, ["lang", "text"], flag, required=["lang", "text"])
    for lang, text in zip(table.column("lang").to_pylist(), table.column("text").to_pylist()):
        out.setdefault(lang, []).append(text)
    return out


def _run(args: argparse.Namespace) -> int:
    # The learner writes with local file APIs: say so before any work.
    require_local(args.output, "--output", "python -m labse_model.vocab")
    cfg = load_config("vocab", args, {"vocab_size": args.vocab_size})
    params = LearnerParams(cfg.vocab_size, cfg.learner)
    words, counts = _read_counts(args.counts)
    beside = Path(args.counts).parent
    if args.heldout:
        heldout = _read_heldout(args.heldout, "--heldout")
    elif not is_remote(args.counts) and (beside / "heldout.parquet").is_file():
        heldout = _read_heldout(str(beside / "heldout.parquet"), None)
    else:
        heldout = {}
    summary_path = beside / "languages.json"
    summary = (
        read_json(summary_path) if not is_remote(args.counts) and summary_path.is_file() else None
    )
    try:  # the learner checks the table's alphabet against the size before any learning
        with claim_output(args.output, args.overwrite) as out:
            tmp = finish_vocab(
                words,
                counts,
                params,
                out.tmp,
                StageCounter(),
                heldout,
                summary,
                source=args.counts,
                flag="--counts",
            )
            stats = read_json(tmp / "vocab_stats.json")
    except VocabTooSmall as e:  # the table's alphabet does not fit in --vocab-size
        raise UsageError(f"--vocab-size: {e}") from None
    print(f"vocab: {stats['vocab_size']} tokens in {stats['learn_seconds']:.1f}s -> {args.output}")
    return 0


if __name__ == "__main__":
    exit_with(main)
