"""train the CDS scorer: theta_noisy on candidate pairs, theta_clean on trusted pairs

``python -m filters cds-train --noisy PAIRS --trusted PAIRS --output MODEL_DIR``

A transformers encoder-decoder (a small BART from the cds section, or a local pretrained seq2seq
checkpoint with --init) is trained on the candidate pairs (theta_noisy), then a copy is
fine-tuned on the trusted pairs (theta_clean). The claimed folder MODEL_DIR (committed at the
end) receives cds.json, the tokenizer, fwd/{noisy,clean}/ (and bwd/ with bidirectional=true) in
Hugging Face format, and stats.json.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path

import pyarrow.compute as pc

from filters.bitext.cliutil import (
    add_common_options,
    add_layout_option,
    local_input,
    run_command,
    section_config,
    write_stats,
)
from filters.bitext.pair_io import read_pairs
from labse_common.cli import command_parser, doc_details
from labse_common.config import to_dict
from labse_common.errors import InputError, UsageError
from labse_common.output_dir import claim_output
from labse_common.stats import StageCounter

log = logging.getLogger("filters.cds_train")
STAGE = "cds_train"


def build_parser() -> argparse.ArgumentParser:
    p = command_parser(
        "python -m filters cds-train",
        "Train the CDS scorer: a translation model on the candidate pairs (noisy), and a copy of it fine-tuned on trusted pairs (clean).",
        doc_details(__doc__),
        examples=[
            "python -m filters cds-train --noisy mined/mined.parquet --trusted trusted.tsv --output cds_model/",
        ],
    )
    p.add_argument(
        "--noisy",
        required=True,
        metavar="PAIRS",
        help="candidate pairs: mining output (Parquet, TSV.gz) or TSV src<TAB>trg",
    )
    p.add_argument(
        "--trusted",
        required=True,
        metavar="PAIRS",
        help="trusted parallel pairs, same formats (at least cds.min_trusted usable pairs)",
    )
    p.add_argument(
        "--vocab",
        metavar="DIR",
        help="BERT tokenizer dir (e.g. python -m pipelines.vocab output); default cds.vocab, "
        "else a WordPiece learned from the pairs",
    )
    p.add_argument(
        "--init",
        metavar="CHECKPOINT",
        help="local pretrained seq2seq checkpoint dir (Marian, BART) with its tokenizer "
        "to start from instead of random weights (default cds.init)",
    )
    p.add_argument(
        "--bidirectional",
        action="store_true",
        default=None,
        help="also train target->source models (cds_score_bwd and dual_xent)",
    )
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], help="default cds.device (auto)")
    p.add_argument("--threads", type=int, help="torch CPU threads (default cds.threads)")
    add_layout_option(p, "--noisy and --trusted")
    add_common_options(p, "cds", "model folder to write (MODEL_DIR)", "noisy_epochs=4")
    return p


def read_side(
    path: str, unit: str, counter: StageCounter, layout: str, flag: str | None = None
) -> tuple[list[str], list[str]]:
    """(sources, targets) of ``path``; pairs with an empty side are dropped (counted)."""
    reader = StageCounter()
    table = read_pairs(path, reader, layout=layout, flag=flag)
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
        cfg = section_config(
            "cds",
            args,
            {
                "vocab": args.vocab,
                "init": args.init,
                "device": args.device,
                "threads": args.threads,
                "bidirectional": args.bidirectional,
            },
        )
        for what, path in (("--vocab", cfg.vocab), ("--init", cfg.init)):
            local_input(path, what)
            if path is not None and not os.path.isdir(path):
                raise InputError(path, "folder not found", what)
        import torch

        from filters.bitext.cds.fit import TrustedTooSmall, train_cds
        from labse_common.threads import size_threads

        if cfg.device == "cuda" and not torch.cuda.is_available():
            raise UsageError("--device cuda (cds.device): no GPU is visible")
        size_threads(cfg.threads)  # null: the CPUs this process may use (affinity, quota)
        t0 = time.perf_counter()
        counter = StageCounter()
        noisy = read_side(args.noisy, "noisy_pairs", counter, args.layout, "--noisy")
        trusted = read_side(args.trusted, "trusted_pairs", counter, args.layout, "--trusted")
        # Claimed now; committed when the block ends, removed if it raises.
        with claim_output(args.output, args.overwrite) as out:
            tmp = Path(out.tmp)
            try:
                meta = train_cds(noisy, trusted, cfg, str(tmp), counter)
            except TrustedTooSmall as e:  # the inputs are too small: the user's to fix
                raise UsageError(f"--noisy {args.noisy} / --trusted {args.trusted}: {e}") from e
            report = counter.to_report(
                STAGE,
                noisy=args.noisy,
                trusted=args.trusted,
                directions=meta["directions"],
                training=meta["training"],
                config=to_dict(cfg),
                seconds=round(time.perf_counter() - t0, 3),
            )
            write_stats(tmp, report)
        fig = meta["training"]["fwd"]
        print(
            f"cds-train: theta_noisy on {len(noisy[0])} pairs (loss {fig['noisy']['first_loss']:.3f} -> "
            f"{fig['noisy']['last_loss']:.3f}), theta_clean on {len(trusted[0])} trusted pairs "
            f"(loss -> {fig['clean']['last_loss']:.3f}) -> {args.output}"
        )
        return 0

    return run_command(args, body, log, "cds-train", models=True)
