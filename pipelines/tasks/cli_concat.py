"""Concatenate several pair Parquet files into one (the filters take one file)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from labse_common.cli import (
    add_log_level_option,
    add_overwrite_option,
    command_parser,
    run_main,
)
from labse_common.datafiles import read_parquet
from labse_common.logs import setup_logging
from labse_common.output_dir import claim_output
from labse_common.stats import StageCounter
from pipelines.tasks import log_result

log = logging.getLogger("pipelines.tasks")

SUMMARY = "Several pair Parquet files (src, trg, ...) as one, in the order given."
DETAILS = ""
EXAMPLES = (
    "python -m pipelines.e2e_tasks concat rules/de-en/kept.parquet rules/fr-en/kept.parquet "
    "--output kept_all.parquet",
)


def concat(inputs: list[Path], out: Path, overwrite: bool = False) -> dict:
    counter = StageCounter()
    with claim_output(out, overwrite, files=("",)) as claimed:
        tmp = claimed.path
        tables = []
        for f in inputs:
            tables.append(read_parquet(f, flag="inputs"))
            counter.add_in("pairs", tables[-1].num_rows)
            counter.add_out("pairs", tables[-1].num_rows)
        pq.write_table(pa.concat_tables(tables, promote_options="default"), tmp)
    return counter.to_report("concat")


def build_parser() -> argparse.ArgumentParser:
    k = command_parser("python -m pipelines.e2e_tasks concat", SUMMARY, DETAILS, EXAMPLES)
    k.add_argument("inputs", nargs="+", help="Parquet files with src, trg")
    k.add_argument("--output", required=True, help="Parquet file to write")
    add_overwrite_option(k, "the output file")
    add_log_level_option(k)
    return k


def run(args: argparse.Namespace) -> int:
    rep = concat([Path(p) for p in args.inputs], Path(args.output), args.overwrite)
    log_result("concat", rep)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)
    return run_main(lambda: run(args), log, args=args)
