"""draw a stratified sample of the mined pairs for labelling (GOOD/BAD), or label it from a known alignment

``python -m filters sample --pairs SCORED.parquet --output DIR``

The threshold of the final filter is chosen on pairs like the ones it judges: the mined
candidates themselves (the paper's annotators labelled extracted pairs). This draws
``combine.sample_size`` of them, stratified by language pair and margin bucket with proportional
allocation (:mod:`filters.bitext.sample`), and writes:

* ``DIR/sample.tsv``: a header and one row per sampled pair; a person fills the ``label``
  column with GOOD or BAD (blank rows are left out when read back). The rows are in labelling
  order: round-robin over the language pairs and their margin strata, random within a stratum
  (``combine.seed``), so the first rows cover every pair and stratum and any prefix labelled is
  a stratified sample;
* ``DIR/sample.parquet``: the same rows, in the same order, with every column of the pairs
  table;
* ``DIR/source.json``: which pairs table the ``sample_id`` column indexes (path, rows, size);
* ``DIR/stats.json``: pairs in = sampled + not sampled (+ other half).

With ``--planted`` (a TSV or Parquet of the true translation pairs, src/trg) the sample is
labelled automatically and drawn only from the calibration half of the source sentences
(``--half``, a stable hash of the source text): the other half stays unseen for the final
evaluation.
"""

from __future__ import annotations

import argparse
import json
import logging
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from filters.bitext.cliutil import check_numeric_column, run_command
from filters.bitext.pair_io import read_pairs
from filters.bitext.sample import (
    auto_label,
    draw_sample,
    in_labelling_order,
    split_halves,
    write_for_labelling,
)
from labse_common.cli import (
    add_config_options,
    add_log_level_option,
    add_output_option,
    add_overwrite_option,
    command_parser,
    doc_details,
    load_config,
)
from labse_common.config import to_dict
from labse_common.datafiles import check_text_column, read_parquet
from labse_common.errors import InputError, UsageError
from labse_common.output_dir import claim_output
from labse_common.stats import StageCounter, to_report, write_report

log = logging.getLogger("filters.bitext.sample")
STAGE = "sample"


def build_parser() -> argparse.ArgumentParser:
    p = command_parser(
        "python -m filters sample",
        "Draw a stratified sample of the mined pairs for a person to label GOOD or BAD, or label it from a known alignment.",
        doc_details(__doc__),
        examples=[
            "python -m filters sample --pairs cds/scored.parquet --output sample/",
            "python -m filters sample --pairs cds/scored.parquet --planted gold.tsv --output sample/",
        ],
    )
    p.add_argument(
        "--pairs",
        required=True,
        metavar="PAIRS.parquet",
        help="the mined (and scored) pairs to sample from: Parquet with src, trg and "
        "ideally src_lang, trg_lang, margin",
    )
    add_output_option(p, "output folder (sample.tsv, sample.parquet, source.json, stats.json)")
    add_overwrite_option(p)
    p.add_argument("--n", type=int, help="pairs to draw (default combine.sample_size)")
    p.add_argument(
        "--planted",
        metavar="PAIRS",
        help="the true translation pairs (TSV src<TAB>trg or Parquet src, trg): label "
        "the sample from them and draw only from --half",
    )
    p.add_argument(
        "--half",
        type=int,
        choices=(0, 1),
        default=0,
        help="with --planted: the half of the source sentences used for calibration "
        "(default 0); the other half is left for the final evaluation",
    )
    add_config_options(p, "combine", example="sample_size=500")
    add_log_level_option(p)
    return p


def _planted(path: str) -> set[tuple[str, str]]:
    table = read_pairs(path, StageCounter(), flag="--planted")
    pairs = set(zip(table.column("src").to_pylist(), table.column("trg").to_pylist()))
    if not pairs:
        raise InputError(path, "no pairs", "--planted")
    return pairs


def run(args: argparse.Namespace) -> dict:
    cfg = load_config("combine", args, {"sample_size": args.n})
    # Claimed first: a second run into the same folder stops at once (exit 2); whatever
    # fails later leaves nothing behind.
    with claim_output(args.output, args.overwrite) as out:
        table = read_parquet(args.pairs, flag="--pairs", required=("src", "trg"))
        if table.num_rows == 0:
            raise InputError(args.pairs, "no pairs to sample from", "--pairs")
        for c in ("src", "trg"):
            check_text_column(args.pairs, c, table.schema.field(c).type, "--pairs")
        if "margin" in table.column_names:  # the strata are margin buckets
            check_numeric_column(
                table.schema,
                "margin",
                args.pairs,
                "--pairs",
                "the mined pairs' margin scores are numbers (as mining writes them)",
            )
        counter = StageCounter()
        counter.add_in("pairs", table.num_rows)
        pool, ids = table, np.arange(table.num_rows)
        planted = _planted(args.planted) if args.planted else None
        if planted is not None:
            half = split_halves(table.column("src").to_pylist())
            ids = np.flatnonzero(half == args.half)
            counter.add_dropped("pairs", "other_half", table.num_rows - len(ids))
            pool = table.take(pa.array(ids))
            if pool.num_rows == 0:
                raise UsageError(
                    f"--pairs {args.pairs}: no pair has its source in half {args.half}"
                )
        sample = draw_sample(
            pool, cfg.sample_size, margin_buckets=cfg.margin_buckets, seed=cfg.seed
        )
        # sample_id indexes the --pairs table, not the half it was drawn from.
        sid = sample.column_names.index("sample_id")
        sample = sample.set_column(
            sid, "sample_id", pa.array(ids[sample.column("sample_id").to_numpy()])
        )
        if planted is not None:
            sample = auto_label(sample, planted)
        # The rows a person labels first must already be a stratified sample.
        sample = in_labelling_order(sample, cfg.seed)
        counter.add_out("pairs", sample.num_rows)
        counter.add_dropped("pairs", "not_sampled", pool.num_rows - sample.num_rows)
        write_for_labelling(sample, os.path.join(out.tmp, "sample.tsv"))
        pq.write_table(sample, os.path.join(out.tmp, "sample.parquet"))
        source = {
            "pairs": os.path.abspath(args.pairs),
            "rows": table.num_rows,
            "bytes": os.path.getsize(args.pairs),
            "planted": bool(planted),
            "half": args.half if planted else None,
        }
        with open(os.path.join(out.tmp, "source.json"), "w", encoding="utf-8") as f:
            json.dump(source, f, indent=2)
        report = to_report(STAGE, counter.counts, config=to_dict(cfg))
        write_report(os.path.join(out.tmp, "stats.json"), report)
    good = sum(v == "GOOD" for v in sample.column("label").to_pylist()) if planted else None
    log.info(
        "sampled %d of %d pairs -> %s%s",
        sample.num_rows,
        pool.num_rows,
        args.output,
        f" ({good} GOOD by the planted alignment)"
        if planted
        else "; fill the label column of sample.tsv with GOOD or BAD",
    )
    return report


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(args, lambda: run(args) and 0, log, "sample")
