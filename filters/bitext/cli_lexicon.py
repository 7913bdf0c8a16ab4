"""fit IBM Model 1 dictionaries on trusted pairs; score pairs with them (lex_fwd, lex_bwd)

``python -m filters lexicon --fit TRUSTED [--langs SRC-TRG | --lang-columns SRC TRG] [--for-pairs SRC-TRG ...] [--pairs PAIRS] --output DIR``
``python -m filters lexicon --lexicon FILE --pairs PAIRS [--pairs-langs SRC-TRG] --output DIR``

Fits p(trg word | src word) and p(src word | trg word) by EM on ``--fit`` (pairs known to be
translations, e.g. the encoder's training pairs), or reads them from ``--lexicon`` (the
``lexicon.parquet`` of an earlier run). ``mining mine --lexicon`` re-ranks candidates with them
and adds the two scores to the mined pairs; ``--pairs`` scores any other pair file here:

    lex_fwd = mean over trg tokens of log( mean over src tokens + NULL of p(t|s) )

and ``lex_bwd`` the same from the other side (:mod:`mining.lexicon`). Higher = more of
the pair's words are explained by the other side. ``filters combine`` uses both as features.
Each language pair of ``--fit`` is fitted on its own and serves both orders (de-en pairs give the
en-de dictionaries too); a pair of ``--for-pairs`` (the pairs to mine) with no training pairs
gets a pivot dictionary composed through a language both its sides were fitted with
(p(fr|de) = sum over en of q(fr|en) q(en|de), q each dictionary's rows raised to
lexicon.pivot_sharpen and renormalised; each word's entries >= lexicon.min_prob, at most
lexicon.pivot_top_k of them when set).
Writes into the claimed folder DIR (committed at the end):

* ``DIR/scored.parquet`` (with --pairs): every column of --pairs plus lex_fwd and lex_bwd (NaN
  where a side has no word token);
* ``DIR/lexicon.parquet`` (with --fit): the dictionaries, entries >= lexicon.min_prob, and the
  language pairs fitted (from the file's src_lang/trg_lang columns, --lang-columns or --langs),
  which ``mining mine --lexicon`` checks against the languages it mines;
* ``DIR/stats.json``: unit ``fit_pairs`` (dropped: no_word_token, over_max_pairs) and ``pairs``;
  ``dictionaries``: the pairs ``direct`` (fitted: pairs fitted on), ``pivot`` (composed: the
  pivot language) and ``absent`` (of --for-pairs, with no dictionary: mined without one).
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from filters.bitext.cliutil import (
    add_common_options,
    add_layout_option,
    local_input,
    positive,
    run_command,
    section_config,
    write_stats,
)
from filters.bitext.pair_io import iter_pair_batches, no_pairs
from filters.bitext.score_file import score_pairs_file
from labse_common.cli import command_parser, doc_details
from labse_common.errors import InputError, UsageError
from labse_common.filesystems import is_remote
from labse_common.output_dir import claim_output
from labse_common.stats import StageCounter

log = logging.getLogger("filters.lexicon")
STAGE = "lexicon"
LEXICON = "lexicon.parquet"


def build_parser() -> argparse.ArgumentParser:
    p = command_parser(
        "python -m filters lexicon",
        "Fit IBM Model 1 word dictionaries on trusted pairs, and score pairs with them (lex_fwd, lex_bwd).",
        doc_details(__doc__),
        examples=[
            "python -m filters lexicon --fit trusted.tsv --langs de-en --output lexicon/",
            "python -m filters lexicon --lexicon lexicon/lexicon.parquet --pairs mined/mined.parquet --pairs-langs de-en --output lex_scored/",
        ],
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
        metavar="PAIRS",
        help="pairs to score: mining/rules/cds-score output (Parquet) or TSV src<TAB>trg "
        "(without it, --fit only fits and saves the dictionaries)",
    )
    langs = p.add_mutually_exclusive_group()
    langs.add_argument(
        "--langs",
        metavar="SRC-TRG",
        help="the language pair of every --fit pair (a file without language columns), "
        "recorded in lexicon.parquet so the miner can check it",
    )
    langs.add_argument(
        "--lang-columns",
        nargs=2,
        metavar=("SRC_COL", "TRG_COL"),
        help="--fit's columns holding each pair's languages (default: src_lang trg_lang when "
        "present; a TSV without header names its third and fourth fields col2 col3)",
    )
    p.add_argument(
        "--for-pairs",
        nargs="+",
        metavar="SRC-TRG",
        help="with --fit: the language pairs to be mined; one without training pairs (either "
        "order) gets a pivot dictionary through a shared language, or is recorded absent",
    )
    p.add_argument(
        "--pairs-langs",
        metavar="SRC-TRG",
        help="the language pair of --pairs, whose dictionaries score it (needed when the "
        "lexicon holds several)",
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


def _fit_pairs(path: str, cfg, args, counter: StageCounter, langs: Counter):
    """(language pair, src, trg) of the first ``max_pairs`` usable pairs of ``path``, counted
    under fit_pairs; ``langs`` counts the language pair of each pair yielded."""
    from mining.lexicon import tokens

    reader = StageCounter()
    seen = False
    rows = 0  # pairs of the earlier batches, for the row number in a message
    for batch in iter_pair_batches(path, reader, 65536, args.layout, flag="--fit"):
        seen = seen or batch.num_rows > 0
        pair_of = _row_langs(batch, path, args, rows)
        rows += batch.num_rows
        for i, (a, b) in enumerate(zip(batch.column(0).to_pylist(), batch.column(1).to_pylist())):
            counter.add_in("fit_pairs")
            if not tokens(a) or not tokens(b):  # nothing to learn from
                counter.add_dropped("fit_pairs", "no_word_token")
            elif counter.counts["fit_pairs/out"] >= cfg.max_pairs:
                counter.add_dropped("fit_pairs", "over_max_pairs")
            else:
                counter.add_out("fit_pairs")
                key = pair_of(i)
                langs[key] += 1
                yield key, a, b
    if not seen:
        raise no_pairs(path, "--fit")
    for key, n in reader.counts.items():
        counter.counts[f"fit_{key}"] += n


def _row_langs(batch, path: str, args, before: int) -> Callable[[int], str | None]:
    """index in ``batch`` -> its pair's "src-trg" (normalised codes), from the language columns
    or --langs (both: they must agree); None when neither says. ``before``: pairs read before
    ``batch``. A code that names no language: InputError naming the pair."""
    from labse_common.langs import normalize_lang

    names = batch.schema.names
    columns = args.lang_columns or ("src_lang", "trg_lang")
    if not set(columns) <= set(names):
        if args.lang_columns:
            missing = " and ".join(c for c in columns if c not in names)
            raise InputError(path, f"no column {missing} (has: {', '.join(names)})", "--fit")
        return lambda i: args.langs
    src = batch.column(names.index(columns[0])).to_pylist()
    trg = batch.column(names.index(columns[1])).to_pylist()
    known: dict[tuple, str] = {}

    def pair_of(i: int) -> str:
        key = (src[i], trg[i])
        if key not in known:
            where = f"pair {before + i + 1} ({columns[0]}, {columns[1]})"
            try:
                known[key] = f"{normalize_lang(key[0])}-{normalize_lang(key[1])}"
            except ValueError as e:
                raise InputError(path, f"{where}: {e}", "--fit") from None
            if args.langs and known[key] != args.langs:
                raise InputError(path, f"{where}: {known[key]}, not --langs {args.langs}", "--fit")
        return known[key]

    return pair_of


def _loaded(args):
    """The dictionaries of --lexicon, checked (:func:`mining.lexicon_file.check_table`) before any
    output is claimed; None with --fit."""
    from mining import lexicon_file

    if not args.lexicon:
        return None
    try:
        return lexicon_file.load(args.lexicon)
    except (ValueError, OSError) as e:
        raise InputError(args.lexicon, str(e), "--lexicon") from e


def _fitted(args, cfg, out_tmp: str, counter: StageCounter):
    from mining import lexicon_file, lexicon_pivot

    langs: Counter = Counter()
    groups: dict[str, list[tuple[str, str]]] = {}
    for key, a, b in _fit_pairs(args.fit, cfg, args, counter, langs):
        groups.setdefault(key or "", []).append((a, b))
    if None in langs:  # some pairs without languages: the lexicon cannot say what it covers
        log.warning(
            "--fit %s: no language columns (src_lang, trg_lang): the lexicon records no "
            "languages and the miner cannot check them; give --langs or --lang-columns",
            args.fit,
        )
        groups = {"": [p for pairs in groups.values() for p in pairs]}
    try:
        fitted = lexicon_pivot.fit_set(groups, cfg.iterations, cfg.max_tokens)
    except ValueError as e:  # no pair with a word on both sides
        raise InputError(args.fit, str(e), "--fit") from e
    lexicon_pivot.add_pivots(
        fitted, args.for_pairs or [], cfg.pivot_top_k, cfg.min_prob, cfg.pivot_sharpen
    )
    path = Path(out_tmp) / LEXICON
    try:
        entries = lexicon_file.save(fitted, path, cfg.min_prob)
    except ValueError as e:  # lexicon.min_prob above every entry of one direction
        raise UsageError(f"--fit {args.fit}: {e}") from e
    log.info(
        "lexicon: %d pairs fitted (%s), %s, %d entries >= %g saved",
        fitted.pairs,
        ", ".join(f"{k}: {n}" for k, n in fitted.langs.items()) or "languages unknown",
        ", ".join(f"{k} through {v}" for k, v in fitted.pivots.items()) or "no pivot",
        entries,
        cfg.min_prob,
    )
    # Scored with what is saved, as a later --lexicon run would score.
    return lexicon_file.load(path) if args.pairs else fitted


def _dictionaries(lex) -> dict:
    """What stats.json says of the pairs covered (:func:`_fitted`'s or --lexicon's)."""
    return {"direct": dict(lex.langs), "pivot": dict(lex.pivots), "absent": list(lex.absent)}


def _scorer(lex, args, max_tokens: int):
    """The scorer of --pairs: the dictionaries of --pairs-langs, or the lexicon's only ones."""
    pair = tuple(args.pairs_langs.split("-")) if args.pairs_langs else ("", "")
    if lex.for_pair(*pair) is None:
        have = ", ".join(lex.tables) or "none"
        if args.pairs_langs:
            raise UsageError(f"--pairs-langs {args.pairs_langs}: no dictionary for it (has {have})")
        raise UsageError(
            f"the lexicon holds the dictionaries of {have}: give --pairs-langs (--pairs' languages)"
        )

    def scorer(src, trg):
        return lex.score(src, trg, max_tokens, pair)

    return scorer


def _pair_code(text: str, flag: str = "--langs") -> str:
    from labse_common.langs import parse_pair

    try:
        return "-".join(parse_pair(text))
    except ValueError as e:
        raise UsageError(f"{flag}: {e}") from None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def body() -> int:
        cfg = section_config("lexicon", args)
        positive(args.batch_rows, "--batch-rows")
        if args.lexicon and not args.pairs:
            raise UsageError("--lexicon without --pairs: nothing to score (give --pairs)")
        local_input(args.lexicon, "--lexicon", "a lexicon file")
        for flag, path in (
            ("--fit", args.fit),
            ("--pairs", args.pairs),
            ("--lexicon", args.lexicon),
        ):
            # Before the fit's seconds: a wrong path is found at once.
            if path and not is_remote(path) and not os.path.exists(path):
                raise UsageError(f"{flag} {path}: not found")
        if (args.langs or args.lang_columns) and not args.fit:
            raise UsageError("--langs and --lang-columns name --fit's languages: give --fit")
        if args.for_pairs and not args.fit:
            raise UsageError("--for-pairs names the pairs to fit or compose: give --fit")
        if args.pairs_langs and not args.pairs:
            raise UsageError("--pairs-langs names --pairs' languages: give --pairs")
        if args.langs:
            args.langs = _pair_code(args.langs)
        args.for_pairs = [_pair_code(p, "--for-pairs") for p in args.for_pairs or []]
        if args.pairs_langs:
            args.pairs_langs = _pair_code(args.pairs_langs, "--pairs-langs")
        t0 = time.perf_counter()
        counter = StageCounter()
        lex = _loaded(args)
        if lex is not None:  # a --pairs-langs the lexicon lacks: refused before the claim
            _scorer(lex, args, cfg.max_tokens)
        with claim_output(args.output, args.overwrite) as out:
            if lex is None:
                lex = _fitted(args, cfg, out.tmp, counter)

            if args.pairs:
                score_pairs_file(
                    _scorer(lex, args, cfg.max_tokens),
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
                dictionaries=_dictionaries(lex),
                seconds=round(time.perf_counter() - t0, 3),
            )
            write_stats(out.tmp, report)
        c = report["counts"]
        done = [f"fitted on {c['fit_pairs']['out']} pairs"] if "fit_pairs" in c else []
        done += [f"{c['pairs']['out']} pairs scored"] if "pairs" in c else []
        print(f"lexicon: {', '.join(done)} -> {args.output}")
        return 0

    return run_command(args, body, log, "lexicon")
