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

from labse_common.config import apply_overrides, load_section
from labse_common.logs import setup_logging
from labse_common.stats import StageCounter
from labse_model.vocab.build import finish_vocab, learner_params, read_counts, read_heldout

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
    p.add_argument("--output", required=True, metavar="DIR", help="output folder")
    p.add_argument("--vocab-size", type=int, metavar="N", help="target size (preset: vocab_size)")
    p.add_argument(
        "--heldout",
        metavar="PARQUET",
        help="held-out sentences (columns lang, text) for vocab_stats.json; default: "
        "heldout.parquet next to --counts when present",
    )
    p.add_argument(
        "--preset",
        default="demo",
        metavar="demo|paper|FILE",
        help="preset or YAML file whose `vocab.learner` section gives the defaults",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a `vocab` key, e.g. --set learner.num_iterations=3",
    )
    p.add_argument("--log-level", default=None, help="DEBUG, INFO (default), WARNING")
    return p  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)
    counts_path = Path(args.counts)
    if not counts_path.is_file():
        log.error("counts file not found: %s", counts_path)
        return 2
    try:
        cfg = apply_overrides(load_section(args.preset, "vocab"), args.set)
        size = args.vocab_size or cfg.get("vocab_size")
        if not size or int(size) <= 0:
            raise ValueError("--vocab-size must be a positive integer")
        params = learner_params(int(size), cfg.get("learner"))
    except (FileNotFoundError, ValueError, TypeError) as e:
        log.error("%s", e)
        return 2
    words, counts = read_counts(counts_path)
    heldout_path = Path(args.heldout) if args.heldout else counts_path.parent / "heldout.parquet"
    if args.heldout and not heldout_path.is_file():
        log.error("held-out file not found: %s", heldout_path)
        return 2
    heldout = read_heldout(heldout_path)
    summary_path = counts_path.parent / "languages.json"
    summary = json.loads(summary_path.read_text("utf-8")) if summary_path.is_file() else None
    out = finish_vocab(words, counts, params, args.output, StageCounter(), heldout, summary)
    stats = json.loads((out / "vocab_stats.json").read_text("utf-8"))
    print(f"vocab: {stats['vocab_size']} tokens in {stats['learn_seconds']:.1f}s -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
