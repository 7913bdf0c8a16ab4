"""Command line: ``python -m mining {embed,mine,mine-many,eval} ...`` (see ``--help`` of each)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
from pathlib import Path

from labse_common.cli import (
    UsageError,
    add_config_options,
    add_log_level_option,
    add_output_option,
    add_overwrite_option,
    add_quantize_option,
    exit_with,
    load_config,
    run_main,
)
from labse_common.errors import InputError
from labse_common.filesystems import is_remote
from labse_common.logs import setup_logging
from labse_common.output_dir import claim_output
from labse_common.remote import require_local
from labse_common.sections.eval import SCORINGS, EvalConfig
from labse_common.sections.mining import MARGINS, RETRIEVAL_MODES, MiningConfig

log = logging.getLogger("mining")


def _add_config(p: argparse.ArgumentParser, section: str = "mining") -> None:
    add_config_options(p, section, "k=8")
    add_log_level_option(p, subcommand=True)


def add_scoring_options(p: argparse.ArgumentParser):
    """Options of the exact/sharded mining core, shared with the Beam mining job."""
    g = p.add_argument_group("mining (each defaults to the config section, then the built-in)")
    g.add_argument("--k", type=int, help="neighbourhood size k for the margin (default 4)")
    g.add_argument(
        "--margin",
        choices=MARGINS,
        help="margin(a, b) = a/b, a-b or a (default ratio)",
    )
    g.add_argument("--mode", choices=RETRIEVAL_MODES, help="retrieval mode (default max)")
    g.add_argument(
        "--threshold", type=float, help="keep pairs with margin > T, in every mode (default: none)"
    )
    g.add_argument(
        "--unify",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="mine each distinct sentence once and map pairs back to all its rows (LASER --unify)",
    )
    g.add_argument("--mem-gb", type=float, help="working-set budget of the kNN search (default 2)")
    g.add_argument(
        "--shard-rows",
        type=int,
        help="rows per shard for sharded search, i.e. per task and per worker's memory "
        "(default: store shards)",
    )
    return g


def _add_mining_options(p: argparse.ArgumentParser) -> None:
    g = add_scoring_options(p)
    g.add_argument(
        "--lexicon",
        metavar="FILE",
        help="IBM Model 1 dictionaries (`filters lexicon`'s lexicon.parquet): adds lex_fwd and "
        "lex_bwd to the mined pairs, and with mining.lexicon_weight > 0 re-ranks each "
        "sentence's mining.lexicon_candidates nearest by margin + weight * (lex_fwd + lex_bwd)",
    )
    g.add_argument(
        "--lexicon-weight",
        type=float,
        help="weight of the lexical scores (default 0: features only)",
    )
    g.add_argument(
        "--lexicon-candidates", type=int, help="candidates re-ranked per sentence (default 16)"
    )
    g.add_argument(
        "--index",
        help="flat (exact, blocked), auto (the planner's choice), ivf_flat, ivf_sq8, ivf_pq, "
        "ivf_pqfs, opq_ivf_pq (or ivf, ivfsq, ivfpq, opq), ivfNNN, or a FAISS factory string "
        "such as 'IVF4096,PQ64' (default flat)",
    )
    g.add_argument("--nprobe", type=int, help="IVF lists probed per query (default 16)")
    g.add_argument("--train-size", type=int, help="vectors sampled to train IVF/PQ (default 200k)")
    g.add_argument(
        "--rerank",
        type=int,
        help="approximate search fetches k*rerank candidates, re-scored exactly (default 16)",
    )
    g.add_argument(
        "--gpu",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="force FAISS on GPU / CPU (default: GPU when faiss sees one)",
    )
    g.add_argument("--batch-size", type=int, help="encoding batch size with --model (default 64)")
    g.add_argument(
        "--workers", type=int, help="processes for sharded exact search; >1 implies sharding"
    )


def mining_config(args: argparse.Namespace) -> MiningConfig:
    """The typed ``mining`` section (preset, --set, then flags): what the library takes."""
    flags = {f.name: getattr(args, f.name, None) for f in dataclasses.fields(MiningConfig)}
    return load_config("mining", args, flags)


def _print_stats(report: dict) -> None:
    print(f"{'unit':<16}{'in':>10}{'out':>10}  dropped")
    for unit, c in report["counts"].items():
        dropped = ", ".join(f"{k}={v}" for k, v in c["dropped"].items()) or "-"
        print(f"{unit:<16}{c['in']:>10}{c['out']:>10}  {dropped}")
    print(f"rows written: {report.get('rows_written', 0)}")


def cmd_mine(args: argparse.Namespace) -> int:
    from mining.mine import run_mine

    cfg = mining_config(args)
    if bool(args.model) == bool(args.src_emb or args.trg_emb):
        raise UsageError("give either --model DIR or both --src-emb and --trg-emb")
    if not args.model and not (args.src_emb and args.trg_emb):
        raise UsageError("give both --src-emb and --trg-emb")
    _require_inputs(
        ("--src-text", args.src_text), ("--trg-text", args.trg_text), ("--lexicon", args.lexicon)
    )
    if args.lexicon:  # checked (values, languages) before the output is claimed
        from mining.lexicon import check_for_pairs

        check_for_pairs(args.lexicon, [(args.src_lang, args.trg_lang)])
    # Written under OUT/_tmp-<id>/; a remote OUT: staged locally, uploaded and committed at the end.
    with claim_output(args.output, args.overwrite, staged=True) as claimed:
        tmp = claimed.path
        report = run_mine(
            args.src_text,
            args.trg_text,
            tmp,
            cfg,
            src_emb=args.src_emb,
            trg_emb=args.trg_emb,
            model=args.model,
            src_lang=args.src_lang,
            trg_lang=args.trg_lang,
            lexicon=args.lexicon,
        )
    _print_stats(report)
    return 0


def _mine_many_key(args: argparse.Namespace, cfg, pairs: list) -> str | None:
    """The fingerprint of a resumable mine-many (its inputs and settings), or None when it
    cannot resume: a remote output, or vectors encoded here (--model)."""
    from labse_common.resume_shards import fingerprint

    if args.model or not args.emb or any(map(is_remote, (args.output, args.corpus, args.emb))):
        return None
    langs = dict.fromkeys(lang for pair in pairs for lang in pair)
    paths = [p.format(lang=lang) for lang in langs for p in (args.corpus, args.emb)]
    paths += [args.lexicon] if args.lexicon else []
    settings = {"pairs": pairs, "config": dataclasses.asdict(cfg), "lexicon": args.lexicon}
    return fingerprint([p for p in paths if os.path.exists(p)], settings)


def _write_shard_stats(out: str, reports: dict[str, dict], resumed: int) -> None:
    """``stats.json`` of the whole job: its pairs' counts summed, and how many pairs an earlier
    attempt finished."""
    from labse_common.stats import sum_reports, write_report

    report = sum_reports("mine-many", reports.values(), shards=len(reports), resumed_shards=resumed)
    write_report(os.path.join(out, "stats.json"), report)


def cmd_mine_many(args: argparse.Namespace) -> int:
    from mining.many import language_pairs, run_many

    cfg = mining_config(args)
    pairs = language_pairs(cfg.pairs)  # checked (and normalised) before the output is claimed
    if not args.model and not args.emb:
        raise UsageError("give --model DIR or --emb PATTERN")
    _require_inputs(("--lexicon", args.lexicon))
    if args.lexicon:  # checked (values, languages) before the output is claimed
        from mining.lexicon import check_for_pairs

        check_for_pairs(args.lexicon, pairs, absent_ok=True)  # absent: mined without it
    # From stores (--emb) into a local folder, each pair is a shard a rerun after a kill keeps;
    # a remote output is staged locally and uploaded at the end.
    key = _mine_many_key(args, cfg, pairs)
    with claim_output(args.output, args.overwrite, staged=True, resume=key, stage="mine") as out:
        reports = run_many(
            pairs,
            args.corpus,
            out.path,
            cfg,
            emb_pattern=args.emb,
            model=args.model,
            lexicon=args.lexicon,
            shards=out.shards,
        )
        if out.shards is not None:
            _write_shard_stats(out.path, reports, out.shards.resumed)
    for pair, rep in reports.items():
        print(f"== {pair}")
        _print_stats(rep)
    return 0


def cmd_embed(args: argparse.Namespace) -> int:
    """The one embedding path (labse_model.embed_store): the store `labse_model encode` and
    `pipelines.embed` write for the same sentences, row i = input row i."""
    from labse_model.embed_store import describe, embed_to_store

    report = embed_to_store(
        args.model,
        args.text,
        args.output,
        dtype=args.dtype,
        batch_size=args.batch_size,
        quantize=args.quantize,
        rows_per_shard=args.rows_per_shard,
        overwrite=args.overwrite,
        show_progress=True,
        flag="--text",
    )
    print(describe(report))
    return 0


def _require_inputs(*flag_paths: tuple[str, str | None]) -> None:
    """Local inputs the user named exist, before an output is claimed (remote ones were
    preflighted by run_main)."""
    for flag, path in flag_paths:
        if path and not is_remote(path) and not Path(path).exists():
            raise InputError(path, "not found", flag)


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


def cmd_eval(args: argparse.Namespace) -> int:
    from mining import bucc, evaluate

    c = _eval_cfg(args)
    need = ["data"] if args.task in ("tatoeba", "bucc") else ["src_text", "trg_text"]
    missing = [f"--{n.replace('_', '-')}" for n in need if not getattr(args, n)]
    if missing:
        raise UsageError(f"eval {args.task} needs {' '.join(missing)}")
    _require_inputs(
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


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m mining",
        description="Bitext mining with FAISS kNN and margin scoring (LASER-compatible), "
        "embedding stores, and retrieval evaluation (Tatoeba, BUCC, UN-style pools).",
    )
    add_log_level_option(ap)
    sub = ap.add_subparsers(dest="command", required=True)

    _add_mine_parser(sub)
    _add_mine_many_parser(sub)
    _add_embed_parser(sub)
    _add_eval_parser(sub)

    from mining.plan_cli import add_plan_parser  # the planner of bounded-memory mining

    add_plan_parser(sub)
    return ap


def _add_mine_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``mine`` subcommand: one corpus pair."""
    m = sub.add_parser(
        "mine",
        help="mine one corpus pair",
        description="Mine translation pairs between two corpora. Writes OUT/mined.parquet, "
        "OUT/mined.tsv.gz (margin<TAB>src<TAB>trg<TAB>src_lang<TAB>trg_lang<TAB>src_id<TAB>"
        "trg_id<TAB>cosine[<TAB>urls...], no header, decreasing margin), OUT/score_hist.png "
        "and OUT/stats.json.",
    )
    m.add_argument(
        "--src-text",
        required=True,
        help="source sentences: text (one per line) or Parquet with a 'text' column",
    )
    m.add_argument("--trg-text", required=True, help="target sentences, same formats")
    m.add_argument("--model", help="LaBSE checkpoint directory (HF format) to embed the texts")
    m.add_argument("--src-emb", help="source embeddings: .npy (row i = line i) or store directory")
    m.add_argument("--trg-emb", help="target embeddings: .npy or store directory")
    m.add_argument("--src-lang", default="", help="source language code written in the output")
    m.add_argument("--trg-lang", default="", help="target language code written in the output")
    add_output_option(m, "output directory")
    add_overwrite_option(m, "a non-empty output folder (old files are removed at the end)")
    _add_mining_options(m)
    _add_config(m)
    m.set_defaults(func=cmd_mine)


def _add_mine_many_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``mine-many`` subcommand: several language pairs, each language embedded once."""
    mm = sub.add_parser(
        "mine-many",
        help="mine several language pairs, embedding/indexing each language once",
        description="Mine every pair in --pairs (or the config's mining.pairs). Each language "
        "is read, embedded and indexed once and reused by every pair it is in. Writes "
        "OUT/<src>-<trg>/ with the files of 'mine'.",
    )
    mm.add_argument("--pairs", nargs="+", help="language pairs like de-en fr-en")
    mm.add_argument(
        "--corpus", required=True, help="corpus path pattern with {lang}, e.g. 'sentences/{lang}'"
    )
    mm.add_argument("--emb", help="embeddings path pattern with {lang} (.npy or store)")
    mm.add_argument("--model", help="LaBSE checkpoint directory (instead of --emb)")
    add_output_option(mm, "output directory: OUT/<src>-<trg>/ per pair, OUT/embeddings/<lang>/")
    add_overwrite_option(mm, "a non-empty output folder (old files are removed at the end)")
    _add_mining_options(mm)
    _add_config(mm)
    mm.set_defaults(func=cmd_mine_many)


def _add_embed_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``embed`` subcommand: a corpus into an embedding store."""
    e = sub.add_parser(
        "embed",
        help="embed a corpus into an embedding store",
        description="Embed sentences locally with a LaBSE checkpoint into a store directory "
        "(shards of .npy + Parquet ids). For workers/clusters use `python -m pipelines.embed`.",
    )
    e.add_argument("--text", required=True, help="sentences: text file or Parquet with 'text'")
    e.add_argument("--model", required=True, help="LaBSE checkpoint directory")
    add_output_option(e, "store directory to write")
    add_overwrite_option(e, "a non-empty store folder (old files are removed at the end)")
    add_log_level_option(e, subcommand=True)
    e.add_argument("--lang", default="", help="language code (metadata)")
    e.add_argument(
        "--dtype", choices=["float16", "float32"], default="float16", help="stored precision"
    )
    e.add_argument("--rows-per-shard", type=int, default=100_000, help="rows per shard file")
    e.add_argument("--batch-size", type=int, default=64, help="encoding batch size")
    add_quantize_option(e)
    e.set_defaults(func=cmd_embed)


def _add_eval_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``eval`` subcommand: Tatoeba, BUCC and UN retrieval."""
    ev = sub.add_parser(
        "eval",
        help="retrieval evaluation: tatoeba, bucc, un",
        description="tatoeba: accuracy both ways on {prefix}.xxx-eng.{xxx,eng}; bucc: mine "
        "'ID<TAB>sentence' files, tune the threshold on one split's gold, report P/R/F1 on "
        "another; un: P@1 of aligned files over the whole pool. Embeddings come from --model, "
        "or from <text file>.npy (beside the text, or in --emb-dir).",
    )
    ev.add_argument("task", choices=["tatoeba", "bucc", "un"], help="which evaluation")
    ev.add_argument("--model", help="LaBSE checkpoint directory")
    ev.add_argument(
        "--emb-dir",
        help="directory of precomputed <text file name>.npy (or embedding stores <text file name>.emb/)",
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
    _add_config(ev, "eval")
    ev.set_defaults(func=cmd_eval)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)
    # One error mapping; every s3:// / gs:// value is preflighted before the command runs.
    return run_main(lambda: args.func(args), log, args=args)


if __name__ == "__main__":
    exit_with(main)
