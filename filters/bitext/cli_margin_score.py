"""LaBSE margin score of given pairs, neighbourhoods from each side's sentences

``python -m filters margin-score --model LABSE_DIR --pairs PAIRS --output DIR``

Scores given pairs with the LaBSE margin: each side's sentences of the pair list (plus optional
extra sentences) form the kNN neighbourhoods, exactly as when mining. Writes, into the claimed
folder DIR (committed at the end), DIR/scored.parquet and DIR/scored.tsv.gz with the input
columns plus margin and cosine (an input margin/cosine column is kept as margin_input/
cosine_input), and DIR/stats.json. Pairs with an empty side get no score (NaN) and are counted.
``--output`` is a folder; the old form ``--output FILE.parquet`` is refused (exit 2).
"""

from __future__ import annotations

import argparse
import logging
import os
import time

import pyarrow as pa

from filters.bitext.cliutil import (
    add_common_options,
    add_layout_option,
    local_input,
    run_command,
    section_config,
    write_stats,
)
from filters.bitext.pair_io import read_pairs, write_pairs
from labse_common.cli import command_parser, doc_details
from labse_common.datafiles import read_text
from labse_common.errors import InputError, UsageError
from labse_common.output_dir import claim_output
from labse_common.sections.mining import MARGINS
from labse_common.stats import StageCounter

log = logging.getLogger("filters.margin_score")
STAGE = "margin_score"


def build_parser() -> argparse.ArgumentParser:
    p = command_parser(
        "python -m filters margin-score",
        "Score given pairs with the LaBSE margin, the neighbourhoods drawn from each side's sentences as when mining.",
        doc_details(__doc__),
        examples=[
            "python -m filters margin-score --model labse/ --pairs pairs.tsv --output margin/",
        ],
    )
    p.add_argument(
        "--model", required=True, help="LaBSE checkpoint directory (HF or sentence-transformers)"
    )
    p.add_argument(
        "--pairs",
        required=True,
        help="mining output, Parquet with src/trg, or TSV src<TAB>trg (.gz or plain)",
    )
    p.add_argument("--k", type=int, help="neighbourhood size (default: mining.k, 4)")
    p.add_argument(
        "--margin",
        choices=MARGINS,
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
    add_layout_option(p, "--pairs")
    p.add_argument(
        "--gpu", action="store_true", default=None, help="FAISS on GPU (default: when one is seen)"
    )
    add_common_options(
        p, "mining", "output folder (scored.parquet, scored.tsv.gz, stats.json)", "index=ivf"
    )
    return p


def _read_lines(path: str | None, flag: str) -> list[str]:
    """One sentence per line (not UTF-8: one line naming the file and flag, exit 2)."""
    if not path:
        return []
    lines = read_text(path, flag).split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline ends the last line; it starts no new one
    return [line.rstrip("\r") for line in lines]


def run(args: argparse.Namespace) -> dict:
    from filters.bitext.margin_score import margin_score_pairs
    from labse_model.model import CheckpointError

    if args.output.endswith((".parquet", ".tsv.gz")) and not os.path.isdir(args.output):
        parent = os.path.dirname(args.output.rstrip("/")) or "."
        raise UsageError(
            f"--output {args.output}: --output is a folder now (DIR/scored.parquet, "
            f"DIR/scored.tsv.gz and DIR/stats.json are written); e.g. --output {parent}"
        )
    cfg = section_config(
        "mining",
        args,
        {"k": args.k, "margin": args.margin, "batch_size": args.batch_size, "gpu": args.gpu},
    )
    local_input(args.model, "--model", "a local checkpoint folder")
    if not os.path.isdir(args.model):
        raise InputError(args.model, "model folder not found", "--model")
    t0 = time.perf_counter()
    counter = StageCounter()
    with claim_output(args.output, args.overwrite) as out:
        table = read_pairs(args.pairs, counter, layout=args.layout, flag="--pairs")
        extra_src = _read_lines(args.src_sentences, "--src-sentences")
        extra_trg = _read_lines(args.trg_sentences, "--trg-sentences")
        try:
            res = margin_score_pairs(
                args.model,
                table.column("src").to_pylist(),
                table.column("trg").to_pylist(),
                cfg,
                extra_src=extra_src,
                extra_trg=extra_trg,
            )
        except CheckpointError as e:  # a folder that is not a LaBSE checkpoint: the user's to fix
            raise InputError(args.model, str(e), "--model") from e
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
        write_pairs(table, out.tmp, "scored")
        report = counter.to_report(
            STAGE,
            input=str(args.pairs),
            outputs=["scored.parquet", "scored.tsv.gz"],
            model=str(args.model),
            k=cfg.k,
            margin=cfg.margin,
            neighbourhood={"src_sentences": res.n_src, "trg_sentences": res.n_trg},
            seconds=round(time.perf_counter() - t0, 3),
        )
        write_stats(out.tmp, report)
    return report


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(args, lambda: _summarise(run(args), args), log, "margin-score", models=True)


def _summarise(report: dict, args: argparse.Namespace) -> int:
    c = report["counts"]["pairs"]
    print(
        f"margin-score: {c['in']} pairs scored (k={report['k']}, {report['margin']}) -> {args.output}"
    )
    return 0
