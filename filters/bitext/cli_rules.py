"""``python -m filters rules``: hard rules on pairs; kept pairs, dropped pairs with reasons, stats."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from tqdm import tqdm

from filters.bitext.cds.cliutil import run_cli
from filters.bitext.pair_io import PairFileError, PairWriter, iter_pair_batches
from labse_common.config import load, to_dict
from labse_common.stats import StageCounter, check_balanced, write_report

log = logging.getLogger("filters.rules")
STAGE = "pair_rules"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m filters rules",
        description="Apply the hard rules of the preset's pair_rules section to sentence pairs. "
        "Writes OUTPUT/kept.parquet and OUTPUT/kept.tsv.gz (src<TAB>trg<TAB>other columns, no "
        "header), with --write-dropped OUTPUT/dropped.{parquet,tsv.gz} (plus step and reason "
        "columns), and OUTPUT/stats.json: pairs in/out/dropped per reason, the counts of each "
        "step, and what each step kept by language pair and by length bucket.",
    )
    p.add_argument("--pairs", required=True,
                   help="mining output (mined.parquet, mined.tsv.gz or its directory), any Parquet "
                   "with src/trg columns, or a TSV src<TAB>trg[<TAB>more] (.gz or plain)")  # fmt: skip
    p.add_argument("--src-lang", default="", help="source language code (ISO 639-1/3 or xx_Scrp); "
                   "a non-empty src_lang column in the input wins")  # fmt: skip
    p.add_argument("--trg-lang", default="", help="target language code (same forms)")
    p.add_argument("--output", required=True, help="output directory")
    p.add_argument(
        "--config", default="demo", help="preset name (demo, paper) or YAML file (default demo)"
    )
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a pair_rules key, e.g. --set max_ratio=2.5 (repeatable)")  # fmt: skip
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="same as --set")
    p.add_argument("--write-dropped", action="store_true", default=None,
                   help="also write the dropped pairs with their step and reason")  # fmt: skip
    p.add_argument(
        "--lid-model", help="fastText LID model path (default: the lid.176.ftz shipped in filters/models)"
    )
    p.add_argument("--layout", choices=["auto", "src-trg", "scored"], default="auto",
                   help="TSV columns: src<TAB>trg..., margin<TAB>src<TAB>trg... (mining), or auto")  # fmt: skip
    p.add_argument("--batch-rows", type=int, default=20000, help="pairs per batch (default 20000)")
    return p


def run(args: argparse.Namespace) -> dict:
    from filters.bitext.pair_rules import PairRulesRunner

    cfg = load(STAGE, args.config, [*args.set, *args.overrides],
               {"write_dropped": args.write_dropped, "lid_model": args.lid_model})  # fmt: skip
    if args.batch_rows < 1:
        raise ValueError("--batch-rows must be >= 1")
    if not Path(args.pairs).exists():
        raise FileNotFoundError(f"pair file not found: {args.pairs}")
    if "script" in cfg.steps:
        from filters.bitext.scripts import scripts_of

        for flag, lang in (("--src-lang", args.src_lang), ("--trg-lang", args.trg_lang)):
            if lang and scripts_of(lang) is None:
                log.warning("%s %s: script unknown to filters/bitext/scripts.py; the script rule skips that side",
                            flag, lang)  # fmt: skip
    t0 = time.perf_counter()
    out = Path(args.output)
    runner = PairRulesRunner(cfg, args.src_lang, args.trg_lang)
    reader = StageCounter()
    kept_w = PairWriter(out, "kept")
    drop_w = PairWriter(out, "dropped") if cfg.write_dropped else None
    needs_lang = {"script", "lang"} & set(cfg.steps)
    checked_langs = False
    try:
        with tqdm(unit=" pairs", desc="rules", disable=None) as bar:
            for batch in iter_pair_batches(
                args.pairs, reader, batch_rows=args.batch_rows, layout=args.layout
            ):
                if not checked_langs:
                    have = {"src_lang", "trg_lang"} <= set(batch.schema.names)
                    if needs_lang and not have and not (args.src_lang and args.trg_lang):
                        raise ValueError("give --src-lang and --trg-lang (the input has no src_lang/"
                                         "trg_lang columns and the script/lang rules need them)")  # fmt: skip
                    checked_langs = True
                kept, dropped = runner.filter_batch(batch, want_dropped=drop_w is not None)
                kept_w.write(kept)
                if drop_w is not None:
                    drop_w.write(dropped)
                bar.update(batch.num_rows)
        if not runner.chain.counts.get("pairs/in"):
            raise PairFileError(
                f"{args.pairs}: no readable pair (expected Parquet with src/trg or TSV src<TAB>trg)"
            )
    except BaseException:
        for w in (kept_w, drop_w):
            if w is not None:
                w.discard()
        raise
    files = [str(p) for p in kept_w.close()]
    if drop_w is not None:
        files += [str(p) for p in drop_w.close()]
    report = runner.report(
        STAGE,
        reader.counts,
        input=str(args.pairs),
        outputs=files,
        config=to_dict(cfg),
        src_lang=args.src_lang,
        trg_lang=args.trg_lang,
        seconds=round(time.perf_counter() - t0, 3),
    )
    problems = check_balanced(report) + check_balanced({"counts": report["steps"]})
    if problems:
        raise RuntimeError("unbalanced counts: " + "; ".join(problems))
    write_report(str(out / "stats.json"), report)
    return report


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_cli("rules", lambda: _summarise(run(args), args))


def _summarise(report: dict, args: argparse.Namespace) -> int:
    c = report["counts"]["pairs"]
    print(f"rules: {c['in']} pairs in, {c['out']} kept, "
          f"{c['in'] - c['out']} dropped -> {args.output}")  # fmt: skip
    for reason, n in sorted(c["dropped"].items(), key=lambda kv: -kv[1]):
        print(f"  {reason:<24} {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
