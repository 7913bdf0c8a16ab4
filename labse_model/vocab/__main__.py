"""Learner alone, from saved smoothed counts (``word_counts.parquet`` of ``pipelines.vocab``).

python -m labse_model.vocab --counts DIR/word_counts.parquet --output OUT --vocab-size N
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa

from labse_common.cli import (
    UsageError,
    add_config_options,
    add_log_level_option,
    add_output_option,
    load_config,
    run_main,
)
from labse_common.config import to_dict
from labse_common.logs import setup_logging
from labse_common.stats import StageCounter
from labse_model.vocab.build import finish_vocab, learner_params, read_counts, read_heldout
from labse_model.vocab.learner import VocabTooSmall

log = logging.getLogger("labse_model.vocab")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m labse_model.vocab",
        description="Learn a wordpiece vocabulary from a smoothed word-count table and write "
        "vocab.txt, tokenizer.json, vocab_stats.json and stats.json.",
    )
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
    add_log_level_option(p)
    return p  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)
    return run_main(lambda: _run(args), log)


def _run(args: argparse.Namespace) -> int:
    counts_path = Path(args.counts)
    if not counts_path.is_file():
        raise UsageError(f"counts file not found: {counts_path}")
    cfg = load_config("vocab", args, {"vocab_size": args.vocab_size})
    params = learner_params(cfg.vocab_size, to_dict(cfg.learner))
    heldout_path = Path(args.heldout) if args.heldout else counts_path.parent / "heldout.parquet"
    if args.heldout and not heldout_path.is_file():
        raise UsageError(f"held-out file not found: {heldout_path}")
    try:
        words, counts = read_counts(counts_path)
    except (KeyError, pa.ArrowException) as e:
        raise UsageError(f"{counts_path}: not a word-count table (columns word, count): {e}") from None
    heldout = read_heldout(heldout_path)
    summary_path = counts_path.parent / "languages.json"
    summary = json.loads(summary_path.read_text("utf-8")) if summary_path.is_file() else None
    try:
        out = finish_vocab(words, counts, params, args.output, StageCounter(), heldout, summary)
    except VocabTooSmall as e:  # checked on the table before any learning
        raise UsageError(str(e)) from None
    stats = json.loads((out / "vocab_stats.json").read_text("utf-8"))
    print(f"vocab: {stats['vocab_size']} tokens in {stats['learn_seconds']:.1f}s -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
