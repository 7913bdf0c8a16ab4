"""Embed a corpus into an embedding store."""

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
from labse_common.logs import setup_logging

log = logging.getLogger("mining")

SUMMARY = (
    "Embed sentences locally with a LaBSE checkpoint into an embedding store (shards of .npy\n"
    "and Parquet ids), row i = input row i."
)
DETAILS = (
    "The one embedding path (labse_model.embed_store), as `labse_model encode`; for workers\n"
    "and clusters use `python -m pipelines.embed`."
)
EXAMPLES = ("python -m mining embed --text de.txt --model run/model --output emb/de --lang de",)


def build_parser() -> argparse.ArgumentParser:
    e = command_parser("python -m mining embed", SUMMARY, DETAILS, EXAMPLES)
    e.add_argument("--text", required=True, help="sentences: text file or Parquet with 'text'")
    e.add_argument("--model", required=True, help="LaBSE checkpoint directory")
    add_output_option(e, "store directory to write")
    add_overwrite_option(e, "a non-empty store folder (old files are removed at the end)")
    add_log_level_option(e)
    e.add_argument("--lang", default="", help="language code (metadata)")
    e.add_argument(
        "--dtype", choices=["float16", "float32"], default="float16", help="stored precision"
    )
    e.add_argument("--rows-per-shard", type=int, default=100_000, help="rows per shard file")
    e.add_argument("--batch-size", type=int, default=64, help="encoding batch size")
    add_quantize_option(e)
    return e


def run(args: argparse.Namespace) -> int:
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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)
    # One error mapping; every s3:// / gs:// value is preflighted before the command runs.
    return run_main(lambda: run(args), log, args=args)
