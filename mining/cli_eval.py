"""Retrieval evaluation: tatoeba, bucc, un."""

from __future__ import annotations

import argparse
import dataclasses
import logging
from pathlib import Path

from labse_common.cli import (
    UsageError,
    add_output_option,
    add_overwrite_option,
    add_quantize_option,
    command_parser,
    load_config,
    run_main,
)
from labse_common.logs import setup_logging
from labse_common.output_dir import claim_output
from labse_common.remote import require_local
from labse_common.sections.eval import SCORINGS, EvalConfig
from labse_common.sections.mining import MiningConfig
from mining.command_options import add_config, require_inputs

log = logging.getLogger("mining")

SUMMARY = "Measure retrieval: Tatoeba accuracy, BUCC precision/recall/F1, P@1 over a UN-style pool."
DETAILS = """\
tatoeba: accuracy both ways on {prefix}.xxx-eng.{xxx,eng}; bucc: mine 'ID<TAB>sentence' files,
tune the threshold on one split's gold, report P/R/F1 on another; un: P@1 of aligned files over
the whole pool. Embeddings come from --model, or from <text file>.npy (beside the text, or in
--emb-dir)."""
EXAMPLES = (
    "python -m mining eval tatoeba --data tatoeba/ --model run/model --langs de fr",
    "python -m mining eval bucc --data bucc/ --model run/model --bucc-pairs de-en --output rep/",
    "python -m mining eval un --src-text un.de --trg-text un.en --model run/model",
)


def build_parser() -> argparse.ArgumentParser:
    ev = command_parser("python -m mining eval", SUMMARY, DETAILS, EXAMPLES)
    ev.add_argument("task", choices=["tatoeba", "bucc", "un"], help="which evaluation")
    ev.add_argument("--model", help="LaBSE checkpoint directory")
    ev.add_argument(
        "--emb-dir",
        help="directory of precomputed <text file name>.npy (or embedding stores "
        "<text file name>.emb/)",
    )
    ev.add_argument("--data", help="data directory (tatoeba, bucc)")
    ev.add_argument("--langs", nargs="+", help="tatoeba languages (default: every one found)")
    ev.add_argument(
        "--prefix", help="tatoeba file prefix: tatoeba (LASER) or dev/train (default tatoeba)"
    )
    ev.add_argument(
        "--scoring",
        choices=SCORINGS,
        help="nearest cosine or best ratio margin among k",
    )
    ev.add_argument("--k", type=int, help="k for margin scoring / BUCC mining (default 4)")
    ev.add_argument("--bucc-pairs", nargs="+", help="BUCC pairs, e.g. de-en fr-en")
    ev.add_argument(
        "--tune-split", help="BUCC split whose gold picks the threshold (default training)"
    )
    ev.add_argument("--eval-split", help="BUCC split scored with it (default sample)")
    ev.add_argument("--src-text", help="un: source file (line i translates target line i)")
    ev.add_argument("--trg-text", help="un: target file (the pool)")
    ev.add_argument("--batch-size", type=int, default=64, help="encoding batch size")
    add_quantize_option(ev)
    add_output_option(ev, "directory for the report (.md and .json)", required=False)
    add_overwrite_option(ev, "a non-empty report folder")
    add_config(ev, "eval")
    return ev


def _eval_cfg(args: argparse.Namespace) -> EvalConfig:
    flags = {f.name: getattr(args, f.name, None) for f in dataclasses.fields(EvalConfig)}
    return load_config("eval", args, flags)


def _embedder(args: argparse.Namespace):
    from mining.evaluate import model_embedder, npy_embedder

    if args.model:
        return model_embedder(args.model, args.batch_size, args.quantize)
    return npy_embedder(args.emb_dir)


def _finish(
    report: dict, markdown: str, out: str | None, name: str, overwrite: bool = False
) -> int:
    from mining.evaluate import write_report_files

    print(markdown)
    if out:
        with claim_output(out, overwrite) as claimed:  # claimed, written aside, committed
            write_report_files(report, markdown, claimed.tmp, name)
        print(f"report written to {Path(out) / name}.md/.json")
    return 0


def run(args: argparse.Namespace) -> int:
    from mining import bucc, evaluate

    c = _eval_cfg(args)
    need = ["data"] if args.task in ("tatoeba", "bucc") else ["src_text", "trg_text"]
    missing = [f"--{n.replace('_', '-')}" for n in need if not getattr(args, n)]
    if missing:
        raise UsageError(f"eval {args.task} needs {' '.join(missing)}")
    require_inputs(
        ("--data", args.data),
        ("--src-text", args.src_text),
        ("--trg-text", args.trg_text),
        ("--model", args.model),
        ("--emb-dir", args.emb_dir),
    )
    if args.output:
        require_local(args.output, "--output", "mining eval")
    if not args.model and not args.emb_dir and args.task != "un":
        log.info("no --model/--emb-dir: reading <text file>.npy beside each text file")
    embed = _embedder(args)
    if args.task == "tatoeba":
        rep = evaluate.evaluate_tatoeba(args.data, embed, c.langs, c.prefix, c.scoring, c.k)
        return _finish(
            rep, evaluate.tatoeba_markdown(rep), args.output, f"tatoeba_{c.prefix}", args.overwrite
        )
    if args.task == "bucc":
        # BUCC mining as the paper's: ratio margin, max retrieval, k from the eval section.
        cfg = MiningConfig(k=c.k, margin="ratio", mode="max", unify=True, progress=False)
        rep = bucc.evaluate_bucc(args.data, c.bucc_pairs, embed, c.tune_split, c.eval_split, cfg)
        return _finish(rep, bucc.bucc_markdown(rep), args.output, "bucc", args.overwrite)
    rep = evaluate.evaluate_pool(args.src_text, args.trg_text, embed, c.scoring, c.k)
    md = (
        f"| pool | scoring | P@1 src→trg | P@1 trg→src |\n| ---: | --- | ---: | ---: |\n"
        f"| {rep['pool']} | {rep['scoring']} | {rep['p_at_1_src_to_trg']:.2f} | "
        f"{rep['p_at_1_trg_to_src']:.2f} |"
    )
    return _finish(rep, md, args.output, "un_pool", args.overwrite)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)
    # One error mapping; every s3:// / gs:// value is preflighted before the command runs.
    return run_main(lambda: run(args), log, args=args)
