"""``python -m filters margin-score``: LaBSE margin of given pairs, with mining's kNN and margins."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import pyarrow as pa

from filters.bitext.cds.cliutil import run_cli
from filters.bitext.pair_io import read_pairs, write_parquet, write_tsv_gz
from labse_common.config import load
from labse_common.stats import StageCounter, check_balanced, write_report

STAGE = "margin_score"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m filters margin-score",
        description="Score given pairs with the LaBSE margin: each side's sentences of the pair "
        "list (plus optional extra sentences) form the kNN neighbourhoods, exactly as when mining. "
        "Writes SCORED (.parquet, or .tsv.gz) with the input columns plus margin and cosine "
        "(an input margin/cosine column is kept as margin_input/cosine_input), and stats.json "
        "next to it. Pairs with an empty side get no score (NaN) and are counted.",
    )
    p.add_argument(
        "--model", required=True, help="LaBSE checkpoint directory (HF or sentence-transformers)"
    )
    p.add_argument(
        "--pairs",
        required=True,
        help="mining output, Parquet with src/trg, or TSV src<TAB>trg (.gz or plain)",
    )
    p.add_argument("--output", required=True, help="scored pairs: a .parquet or .tsv.gz path")
    p.add_argument(
        "--config",
        default="demo",
        help="preset (demo, paper) or YAML file; its mining section gives the defaults",
    )
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a mining key, e.g. --set index=ivf (repeatable)")  # fmt: skip
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="same as --set")
    p.add_argument("--k", type=int, help="neighbourhood size (default: mining.k, 4)")
    p.add_argument(
        "--margin",
        choices=["ratio", "distance", "absolute"],
        help="margin function (default: mining.margin, ratio)",
    )
    p.add_argument(
        "--batch-size", type=int, help="encoding batch size (default: mining.batch_size)"
    )
    p.add_argument(
        "--src-sentences", help="extra source sentences (one per line) for the neighbourhoods"
    )
    p.add_argument(
        "--trg-sentences", help="extra target sentences (one per line) for the neighbourhoods"
    )
    p.add_argument(
        "--layout",
        choices=["auto", "src-trg", "scored"],
        default="auto",
        help="TSV layout of --pairs",
    )
    p.add_argument(
        "--gpu", action="store_true", default=None, help="FAISS on GPU (default: when one is seen)"
    )
    return p


def _read_lines(path: str | None) -> list[str]:
    if not path:
        return []
    if not os.path.isfile(path):
        raise FileNotFoundError(f"sentence file not found: {path}")
    with open(path, encoding="utf-8", errors="replace") as f:
        return [line.rstrip("\r\n") for line in f]


def run(args: argparse.Namespace) -> dict:
    from filters.bitext.margin_score import margin_score_pairs
    from mining.knn import KnnConfig

    out = Path(args.output)
    if not (out.name.endswith(".parquet") or out.name.endswith(".tsv.gz")):
        raise ValueError(f"--output must end in .parquet or .tsv.gz: {out}")
    cfg = load("mining", args.config, [*args.set, *args.overrides],
               {"k": args.k, "margin": args.margin, "batch_size": args.batch_size})  # fmt: skip
    if not os.path.isdir(args.model):
        raise FileNotFoundError(f"model directory not found: {args.model}")
    t0 = time.perf_counter()
    counter = StageCounter()
    table = read_pairs(args.pairs, counter, layout=args.layout)
    knn_cfg = KnnConfig(index=cfg.index, mem_gb=cfg.mem_gb, nprobe=cfg.nprobe, train_size=cfg.train_size,
                        rerank=cfg.rerank, use_gpu=args.gpu, show_progress=True)  # fmt: skip
    res = margin_score_pairs(
        args.model,
        table.column("src").to_pylist(),
        table.column("trg").to_pylist(),
        k=cfg.k,
        margin=cfg.margin,
        knn_cfg=knn_cfg,
        batch_size=cfg.batch_size,
        extra_src=_read_lines(args.src_sentences),
        extra_trg=_read_lines(args.trg_sentences),
    )
    for name in ("margin", "cosine"):
        if name in table.column_names:
            table = table.rename_columns(
                [f"{name}_input" if c == name else c for c in table.column_names]
            )
    table = table.append_column("margin", pa.array(res.margin, pa.float32()))
    table = table.append_column("cosine", pa.array(res.cosine, pa.float32()))
    n = table.num_rows
    counter.add_in("pairs", n)
    counter.add_out("pairs", n)  # scoring drops nothing; empty sides are an event (NaN score)
    if res.empty:
        counter.add_event("pairs", "empty_side_not_scored", res.empty)
    (write_parquet if out.name.endswith(".parquet") else write_tsv_gz)(table, out)
    report = counter.to_report(
        STAGE, input=str(args.pairs), output=str(out), model=str(args.model), k=cfg.k, margin=cfg.margin,
        neighbourhood={"src_sentences": res.n_src, "trg_sentences": res.n_trg},
        seconds=round(time.perf_counter() - t0, 3),
    )  # fmt: skip
    problems = check_balanced(report)
    if problems:
        raise RuntimeError("unbalanced counts: " + "; ".join(problems))
    write_report(str(out.parent / "stats.json"), report)
    return report


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from labse_model.model import CheckpointError

    return run_cli("margin-score", lambda: _summarise(run(args), args),
                   errors=(CheckpointError, OSError))  # fmt: skip


def _summarise(report: dict, args: argparse.Namespace) -> int:
    c = report["counts"]["pairs"]
    print(
        f"margin-score: {c['in']} pairs scored (k={report['k']}, {report['margin']}) -> {args.output}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
