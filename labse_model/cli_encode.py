"""Embed sentences into an embedding store (or one .npy)."""

from __future__ import annotations

import argparse
import logging

from labse_common.cli import (
    add_log_level_option,
    add_output_option,
    add_overwrite_option,
    add_quantize_option,
    command_parser,
    run_main,
)
from labse_common.errors import UsageError
from labse_common.logs import setup_logging
from labse_model.run_options import quiet_transformers

log = logging.getLogger("labse_model")

SUMMARY = (
    "Embed sentences with a LaBSE checkpoint: row i of the output is input row i; blank lines\n"
    "keep their row with a zero vector and are counted in stats.json."
)
DETAILS = "The same embedding path as `mining embed` and `pipelines.embed`, one process."
EXAMPLES = (
    "python -m labse_model encode --model run/model --input de.txt --output emb/de",
    "python -m labse_model encode --model run/model --input sents.parquet --output de.npy --fp16",
)


def build_parser() -> argparse.ArgumentParser:
    p = command_parser("python -m labse_model encode", SUMMARY, DETAILS, EXAMPLES)
    p.add_argument(
        "--model",
        required=True,
        metavar="DIR",
        help="HF BertModel or sentence-transformers directory",
    )
    p.add_argument(
        "--input",
        required=True,
        metavar="FILE|DIR|GLOB",
        help="text file (one sentence per line), Parquet file, folder of Parquet "
        "files or embedding store",
    )
    add_output_option(
        p,
        "an embedding store folder (any path not ending in .npy; read by `mining mine "
        "--src-emb DIR` and load_vectors), or a .npy file",
        metavar="DIR|EMB.npy",
    )
    p.add_argument(
        "--dtype",
        choices=["float16", "float32"],
        default=None,
        help="stored precision (default float32)",
    )
    p.add_argument(
        "--fp16",
        action="store_true",
        help="same as --dtype float16 (computed in fp16 on GPU, fp32 on CPU)",
    )
    p.add_argument(
        "--batch-size", type=int, default=64, help="sentences per forward pass (default: 64)"
    )
    add_quantize_option(p)
    p.add_argument(
        "--max-seq-length",
        type=int,
        default=128,
        help="tokens per sentence incl. [CLS] and [SEP] (at least 3); longer ones are "
        "truncated and counted (default: 128)",
    )
    p.add_argument(
        "--text-column", default="text", help="Parquet column holding the sentences (default: text)"
    )
    p.add_argument(
        "--rows-per-shard",
        "--shard-size",
        dest="rows_per_shard",
        type=int,
        default=None,
        help="rows per shard of the store (default 100000)",
    )
    p.add_argument("--device", help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    add_overwrite_option(p, "store folder or .npy (the old output is replaced at the end)")
    p.add_argument(
        "--stats",
        metavar="FILE",
        help="also write the stats here (a store keeps its stats.json inside, a "
        "X.npy its own X.stats.json beside it)",
    )
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_log_level_option(p)
    return p


def run(args: argparse.Namespace) -> int:
    from labse_model import embed_store

    if args.fp16 and args.dtype == "float32":
        raise UsageError("--fp16 contradicts --dtype float32")
    dtype = "float16" if args.fp16 else (args.dtype or "float32")
    common = dict(
        dtype=dtype,
        batch_size=args.batch_size,
        text_column=args.text_column,
        device=args.device,
        max_seq_length=args.max_seq_length,
        quantize=args.quantize,
        show_progress=not args.no_progress,
    )
    if str(args.output).endswith(".npy"):
        if args.rows_per_shard is not None:
            raise UsageError(
                "--rows-per-shard writes an embedding store folder: give --output "
                "DIR (not a .npy file)"
            )
        report = embed_store.embed_to_npy(
            args.model,
            args.input,
            args.output,
            stats_path=args.stats,
            overwrite=args.overwrite,
            **common,
        )
    else:
        report = embed_store.embed_to_store(
            args.model,
            args.input,
            args.output,
            overwrite=args.overwrite,
            rows_per_shard=embed_store.ROWS_PER_SHARD
            if args.rows_per_shard is None
            else args.rows_per_shard,
            **common,
        )
        if args.stats:
            embed_store.write_json(args.stats, report)
    print(embed_store.describe(report))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)
    quiet_transformers()
    # One error mapping; every s3:// / gs:// value is preflighted before the command runs.
    return run_main(lambda: run(args), log, args=args)
