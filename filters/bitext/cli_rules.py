"""hard rules on pairs: kept, dropped with a named reason, stats

``python -m filters rules --pairs PAIRS --output DIR [--src-lang de --trg-lang en]``

Applies the hard rules of the config's ``pair_rules`` section. Writes, into the claimed folder
DIR (committed at the end; ``--overwrite`` replaces everything an earlier run left there):

* ``DIR/kept.parquet`` and ``DIR/kept.tsv.gz`` (src<TAB>trg<TAB>other columns, no header);
* with ``--write-dropped``: ``DIR/dropped.parquet`` and ``DIR/dropped.tsv.gz`` (plus step and
  reason columns);
* ``DIR/stats.json``: lines and pairs in/out/dropped per reason, the counts of each step, and
  what each step kept by language pair and by length bucket.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

from tqdm import tqdm

from filters.bitext.cliutil import (
    add_common_options,
    add_layout_option,
    positive,
    run_command,
    section_config,
    write_stats,
)
from filters.bitext.pair_io import PairWriter, iter_pair_batches, no_pairs
from labse_common.cli import command_parser, doc_details
from labse_common.config import to_dict
from labse_common.errors import UsageError
from labse_common.output_dir import claim_output
from labse_common.stats import StageCounter

log = logging.getLogger("filters.rules")
STAGE = "pair_rules"


def build_parser() -> argparse.ArgumentParser:
    p = command_parser(
        "python -m filters rules",
        "Apply the hard rules to pairs: the pairs kept, the pairs dropped with a named reason, and the counts.",
        doc_details(__doc__),
        examples=[
            "python -m filters rules --pairs mined/mined.parquet --src-lang de --trg-lang en --output rules/",
            "python -m filters rules --pairs pairs.tsv --write-dropped --set max_ratio=2.5 --output rules/",
        ],
    )
    p.add_argument(
        "--pairs",
        required=True,
        help="mining output (mined.parquet, mined.tsv.gz or its directory), any Parquet "
        "with src/trg columns, or a TSV src<TAB>trg[<TAB>more] (.gz or plain)",
    )
    p.add_argument(
        "--src-lang",
        default="",
        help="source language code (ISO 639-1/3 or xx_Scrp); "
        "a non-empty src_lang column in the input wins",
    )
    p.add_argument("--trg-lang", default="", help="target language code (same forms)")
    p.add_argument(
        "--write-dropped",
        action="store_true",
        default=None,
        help="also write the dropped pairs with their step and reason",
    )
    p.add_argument(
        "--lid-model",
        help="fastText LID model path (default: the lid.176.ftz shipped in filters/models)",
    )
    add_layout_option(p, "--pairs")
    # 5,000: at 1M pairs the scale ladder measured 105 µs/pair and a 218 MiB peak at 5,000, 158 µs
    # and 273 MiB at 20,000 (bench/HISTORY.md "Scale ladder: pair rules and CDS scoring").
    p.add_argument("--batch-rows", type=int, default=5000, help="pairs per batch (default 5000)")
    add_common_options(p, STAGE, "output folder (kept.*, dropped.*, stats.json)", "max_ratio=2.5")
    return p


def run(args: argparse.Namespace) -> dict:
    from filters.bitext.pair_rules import PairRulesRunner

    cfg = section_config(
        STAGE, args, {"write_dropped": args.write_dropped, "lid_model": args.lid_model}
    )
    positive(args.batch_rows, "--batch-rows")
    if "script" in cfg.steps:
        from filters.bitext.scripts import scripts_of

        for flag, lang in (("--src-lang", args.src_lang), ("--trg-lang", args.trg_lang)):
            if lang and scripts_of(lang) is None:
                log.warning(
                    "%s %s: script unknown to filters/bitext/scripts.py; the script rule skips that side",
                    flag,
                    lang,
                )
    t0 = time.perf_counter()
    runner = PairRulesRunner(cfg, args.src_lang, args.trg_lang)
    needs_lang = {"script", "lang"} & set(cfg.steps)
    # Claimed before reading: a second run into the same folder stops here, exit 2.
    with claim_output(args.output, args.overwrite) as out:
        tmp = Path(out.tmp)
        reader_counts = _filter(args, runner, tmp, cfg.write_dropped, needs_lang)
        files = ["kept.parquet", "kept.tsv.gz"]
        if cfg.write_dropped:
            files += ["dropped.parquet", "dropped.tsv.gz"]
        report = runner.report(
            STAGE,
            reader_counts,
            input=str(args.pairs),
            outputs=files,
            config=to_dict(cfg),
            src_lang=args.src_lang,
            trg_lang=args.trg_lang,
            seconds=round(time.perf_counter() - t0, 3),
        )
        write_stats(tmp, report)
    return report


def _filter(args, runner, tmp: Path, write_dropped: bool, needs_lang: set) -> dict:
    reader = StageCounter()
    kept_w = PairWriter(tmp, "kept")
    drop_w = PairWriter(tmp, "dropped") if write_dropped else None
    try:
        _stream(args, runner, reader, kept_w, drop_w, needs_lang)
    except BaseException:
        for w in (kept_w, drop_w):
            if w is not None:
                w.discard()
        raise
    # Inside the claimed temporary folder: a failure above leaves nothing (OutputDir aborts).
    kept_w.close()
    if drop_w is not None:
        drop_w.close()
    return reader.counts


def _stream(
    args, runner, reader, kept_w: PairWriter, drop_w: PairWriter | None, needs_lang: set
) -> None:
    checked_langs = False
    reader.add_in("files")
    with tqdm(unit=" pairs", desc="rules", disable=None) as bar:
        # A Parquet row group that does not decode costs its own pairs (counted
        # damaged_row_group), not the run: pairs stand alone, as in pipelines.filter_pairs.
        for batch in iter_pair_batches(
            args.pairs,
            reader,
            batch_rows=args.batch_rows,
            layout=args.layout,
            flag="--pairs",
            survive_damage=True,
        ):
            if not checked_langs:
                have = {"src_lang", "trg_lang"} <= set(batch.schema.names)
                if needs_lang and not have and not (args.src_lang and args.trg_lang):
                    raise UsageError(
                        "give --src-lang and --trg-lang (the input has no src_lang/"
                        "trg_lang columns and the script/lang rules need them)"
                    )
                checked_langs = True
            kept, dropped = runner.filter_batch(batch, want_dropped=drop_w is not None)
            kept_w.write(kept)
            if drop_w is not None:
                drop_w.write(dropped)
            bar.update(batch.num_rows)
    if not runner.chain.counts.get("pairs/in"):
        raise no_pairs(args.pairs, "--pairs")
    reader.add_out("files")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(args, lambda: _summarise(run(args), args), log, "rules")


def _summarise(report: dict, args: argparse.Namespace) -> int:
    c = report["counts"]["pairs"]
    print(
        f"rules: {c['in']} pairs in, {c['out']} kept, {c['in'] - c['out']} dropped -> {args.output}"
    )
    for reason, n in sorted(c["dropped"].items(), key=lambda kv: -kv[1]):
        print(f"  {reason:<24} {n}")
    return 0
