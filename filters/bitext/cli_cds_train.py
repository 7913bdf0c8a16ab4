"""``python -m filters cds-train``: θ_noisy on the candidate pairs, θ_clean on trusted pairs."""

from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path

import pyarrow.compute as pc

from filters.bitext.cds.cliutil import (
    add_config_args,
    load_config,
    run_cli,
)
from filters.bitext.pair_io import read_pairs
from labse_common.config import to_dict
from labse_common.output_dir import OutputDir
from labse_common.stats import StageCounter, check_balanced, write_report

log = logging.getLogger("filters.cds_train")
STAGE = "cds_train"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m filters cds-train",
        description=(
            "Train the CDS scorer: a transformers encoder-decoder (a small BART from the cds: "
            "section, or a local pretrained seq2seq checkpoint with --init) is trained on the "
            "candidate pairs (theta_noisy), then a copy is fine-tuned on the trusted pairs "
            "(theta_clean). MODEL_DIR receives cds.json, the tokenizer, fwd/{noisy,clean}/ (and "
            "bwd/ with bidirectional=true) in Hugging Face format, and stats.json."
        ),
    )
    p.add_argument("--noisy", required=True, metavar="PAIRS",
                   help="candidate pairs: mining output (Parquet, TSV.gz) or TSV src<TAB>trg")  # fmt: skip
    p.add_argument("--trusted", required=True, metavar="PAIRS",
                   help="trusted parallel pairs, same formats (at least cds.min_trusted usable pairs)")  # fmt: skip
    p.add_argument("--output", required=True, metavar="MODEL_DIR", help="model directory to write")
    p.add_argument("--vocab", metavar="DIR",
                   help="BERT tokenizer dir (e.g. python -m pipelines.vocab output); default cds.vocab, "
                   "else a WordPiece learned from the pairs")  # fmt: skip
    p.add_argument("--init", metavar="CHECKPOINT",
                   help="local pretrained seq2seq checkpoint dir (Marian, BART) with its tokenizer "
                   "to start from instead of random weights (default cds.init)")  # fmt: skip
    p.add_argument("--bidirectional", action="store_true", default=None,
                   help="also train target->source models (cds_score_bwd and dual_xent)")  # fmt: skip
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], help="default cds.device (auto)")
    p.add_argument("--threads", type=int, help="torch CPU threads (default cds.threads)")
    p.add_argument("--layout", choices=["auto", "src-trg", "scored"], default="auto",
                   help="TSV columns: src<TAB>trg..., margin<TAB>src<TAB>trg... (mining), or auto")  # fmt: skip
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty MODEL_DIR")
    add_config_args(p)
    return p


def read_side(path: str, unit: str, counter: StageCounter, layout: str) -> tuple[list[str], list[str]]:
    """(sources, targets) of ``path``; pairs with an empty side are dropped (counted)."""
    reader = StageCounter()
    table = read_pairs(path, reader, layout=layout)
    for key, n in reader.counts.items():  # the reader's "lines" unit, renamed per input
        counter.counts[f"{unit}_{key}"] += n
    src = pc.utf8_trim_whitespace(table.column("src"))
    trg = pc.utf8_trim_whitespace(table.column("trg"))
    empty = pc.or_(pc.equal(pc.utf8_length(src), 0), pc.equal(pc.utf8_length(trg), 0))
    n_empty = int(pc.sum(empty).as_py() or 0)
    counter.add_in(unit, table.num_rows)
    counter.add_dropped(unit, "empty_side", n_empty)
    keep = pc.invert(empty)
    # Training text is stripped of outer spaces; scoring keeps the text exactly as given.
    s, t = pc.filter(src, keep).to_pylist(), pc.filter(trg, keep).to_pylist()
    counter.add_out(unit, len(s))
    return s, t


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def body() -> int:
        import torch

        from filters.bitext.cds.fit import train_cds

        cfg = load_config(args, {"vocab": args.vocab, "init": args.init, "device": args.device,
                                 "threads": args.threads, "bidirectional": args.bidirectional})  # fmt: skip
        for what, path in (("--vocab", cfg.vocab), ("--init", cfg.init)):
            if path is not None and not os.path.isdir(path):
                raise FileNotFoundError(f"{what} directory not found: {path}")
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        t0 = time.perf_counter()
        counter = StageCounter()
        noisy = read_side(args.noisy, "noisy_pairs", counter, args.layout)
        trusted = read_side(args.trusted, "trusted_pairs", counter, args.layout)
        # Claimed now; committed when the block ends, removed if it raises.
        with OutputDir(args.output, args.overwrite).open() as out:
            tmp = Path(out.tmp)
            meta = train_cds(noisy, trusted, cfg, str(tmp), counter)
            report = counter.to_report(
                STAGE, noisy=args.noisy, trusted=args.trusted, directions=meta["directions"],
                training=meta["training"], config=to_dict(cfg),
                seconds=round(time.perf_counter() - t0, 3),
            )
            problems = check_balanced(report)
            if problems:
                raise RuntimeError("unbalanced counts: " + "; ".join(problems))
            write_report(str(tmp / "stats.json"), report)
        fig = meta["training"]["fwd"]
        print(f"cds-train: theta_noisy on {len(noisy[0])} pairs (loss {fig['noisy']['first_loss']:.3f} -> "
              f"{fig['noisy']['last_loss']:.3f}), theta_clean on {len(trusted[0])} trusted pairs "
              f"(loss -> {fig['clean']['last_loss']:.3f}) -> {args.output}")  # fmt: skip
        return 0

    return run_cli("cds-train", body, models=True)
