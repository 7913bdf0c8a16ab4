"""score pairs with IBM Model 1 dictionaries fitted on trusted pairs (lex_fwd, lex_bwd)

``python -m filters lexicon (--fit TRUSTED | --lexicon FILE) --pairs PAIRS --output DIR``

Fits p(trg word | src word) and p(src word | trg word) by EM on ``--fit`` (pairs known to be
translations, e.g. the encoder's training pairs), or reads them from ``--lexicon`` (the
``lexicon.parquet`` of an earlier run), then scores every pair of ``--pairs``:

    lex_fwd = mean over trg tokens of log( mean over src tokens + NULL of p(t|s) )

and ``lex_bwd`` the same from the other side (:mod:`filters.bitext.lexicon`). Higher = more of
the pair's words are explained by the other side. ``filters combine`` uses both as features.
Writes into the claimed folder DIR (committed at the end):

* ``DIR/scored.parquet``: every column of --pairs plus lex_fwd and lex_bwd (NaN where a side has
  no word token);
* ``DIR/lexicon.parquet`` (with --fit): the dictionaries, entries >= lexicon.min_prob;
* ``DIR/stats.json``: unit ``fit_pairs`` (dropped: no_word_token, over_max_pairs) and ``pairs``.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path

from filters.bitext.cliutil import (
    add_common_options,
    add_layout_option,
    positive,
    run_command,
    section_config,
    write_stats,
)
from filters.bitext.pair_io import iter_pair_batches, no_pairs
from filters.bitext.score_file import score_pairs_file
from labse_common.errors import InputError, UsageError
from labse_common.output_dir import OutputDir
from labse_common.stats import StageCounter

log = logging.getLogger("filters.lexicon")
STAGE = "lexicon"
LEXICON = "lexicon.parquet"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m filters lexicon",
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--fit",
        metavar="TRUSTED",
        help="pairs known to be translations to fit the dictionaries on (Parquet or TSV)",
    )
    source.add_argument(
        "--lexicon", metavar="FILE", help="dictionaries an earlier run wrote (its lexicon.parquet)"
    )
    p.add_argument(
        "--pairs",
        required=True,
        metavar="PAIRS",
        help="the pairs to score: mining/rules/cds-score output (Parquet) or TSV src<TAB>trg",
    )
    p.add_argument(
        "--batch-rows",
        type=int,
        default=4096,
        help="pairs read, scored and written per chunk (default 4096)",
    )
    add_layout_option(p, "--fit and --pairs")
    add_common_options(
        p, "lexicon", "output folder (scored.parquet, lexicon.parquet, stats.json)", "iterations=5"
    )
    return p


def _fit_pairs(path: str, cfg, layout: str, counter: StageCounter):
    """(src, trg) of the first ``max_pairs`` usable pairs of ``path``, counted under fit_pairs."""
    from filters.bitext.lexicon import tokens

    reader = StageCounter()
    seen = False
    for batch in iter_pair_batches(path, reader, 65536, layout, flag="--fit"):
        seen = seen or batch.num_rows > 0
        for a, b in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
            counter.add_in("fit_pairs")
            if not tokens(a) or not tokens(b):  # nothing to learn from
                counter.add_dropped("fit_pairs", "no_word_token")
            elif counter.counts["fit_pairs/out"] >= cfg.max_pairs:
                counter.add_dropped("fit_pairs", "over_max_pairs")
            else:
                counter.add_out("fit_pairs")
                yield a, b
    if not seen:
        raise no_pairs(path, "--fit")
    for key, n in reader.counts.items():
        counter.counts[f"fit_{key}"] += n


def _fitted(args, cfg, out_tmp: str, counter: StageCounter):
    from filters.bitext import lexicon

    if args.lexicon:
        if not os.path.isfile(args.lexicon):
            raise UsageError(f"--lexicon {args.lexicon}: not found")
        try:
            return lexicon.load(args.lexicon)
        except (ValueError, OSError) as e:
            raise InputError(f"--lexicon {args.lexicon}: {e}") from e
    try:
        fitted = lexicon.fit(
            _fit_pairs(args.fit, cfg, args.layout, counter), cfg.iterations, cfg.max_tokens
        )
    except ValueError as e:  # no pair with a word on both sides
        raise InputError(f"--fit {args.fit}: {e}") from e
    path = Path(out_tmp) / LEXICON
    entries = lexicon.save(fitted, path, cfg.min_prob)
    log.info(
        "lexicon: %d pairs fitted, %d entries >= %g saved", fitted.pairs, entries, cfg.min_prob
    )
    return lexicon.load(path)  # score with what is saved, as a later --lexicon run would


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def body() -> int:
        cfg = section_config("lexicon", args)
        positive(args.batch_rows, "--batch-rows")
        if args.fit and not os.path.exists(args.fit):
            raise UsageError(f"--fit {args.fit}: not found")
        if not os.path.exists(args.pairs):
            raise UsageError(f"--pairs {args.pairs}: not found")
        t0 = time.perf_counter()
        counter = StageCounter()
        with OutputDir(args.output, args.overwrite).open() as out:
            lex = _fitted(args, cfg, out.tmp, counter)

            def scorer(src, trg):
                return lex.score(src, trg, cfg.max_tokens)

            score_pairs_file(
                scorer,
                args.pairs,
                "--pairs",
                "pairs",
                Path(out.tmp) / "scored.parquet",
                counter,
                args.batch_rows,
                args.layout,
                cfg.progress,
                "lexicon",
            )
            report = counter.to_report(
                STAGE,
                pairs_file=args.pairs,
                fit_file=args.fit,
                lexicon_file=args.lexicon,
                seconds=round(time.perf_counter() - t0, 3),
            )
            write_stats(out.tmp, report)
        c = report["counts"]
        fitted = f" (fitted on {c['fit_pairs']['out']} pairs)" if "fit_pairs" in c else ""
        print(f"lexicon: {c['pairs']['out']} pairs scored{fitted} -> {args.output}")
        return 0

    return run_command(args, body, log, "lexicon")
