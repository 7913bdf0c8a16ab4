"""``python -m filters cds-score``: add ``cds_score`` (and friends) to every pair."""

from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from filters.bitext.cds.cliutil import add_config_args, load_config, run_cli
from filters.bitext.pair_io import PairFileError, iter_pair_batches
from labse_common.stats import StageCounter, check_balanced, write_report

log = logging.getLogger("filters.cds_score")
STAGE = "cds_score"
UNIT = "pairs"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m filters cds-score",
        description=(
            "Score pairs with a CDS model directory (python -m filters cds-train): cds_score = "
            "[log p(y|x; clean) - log p(y|x; noisy)] / |y|, higher = more like the trusted data. "
            "Writes SCORED.parquet with every input column (src and trg exactly as given) plus "
            "cds_score and xent_clean (and, for a bidirectional model, cds_score_bwd, "
            "xent_clean_bwd and dual_xent), and stats.json in the same directory."
        ),
    )
    p.add_argument("--model", required=True, metavar="MODEL_DIR", help="CDS model directory")
    p.add_argument("--pairs", required=True, metavar="PAIRS",
                   help="mining/rules output (Parquet, TSV.gz) or any TSV src<TAB>trg")  # fmt: skip
    p.add_argument("--output", required=True, metavar="SCORED.parquet", help="Parquet file to write")
    p.add_argument("--batch-size", type=int, help="pairs per model batch (default cds.score_batch_size)")
    p.add_argument("--batch-rows", type=int, default=20000,
                   help="pairs read and written per chunk (default 20000)")  # fmt: skip
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], help="default cds.device (auto = GPU when present)")
    p.add_argument("--threads", type=int, help="torch CPU threads (default cds.threads)")
    p.add_argument("--layout", choices=["auto", "src-trg", "scored"], default="auto",
                   help="TSV columns: src<TAB>trg..., margin<TAB>src<TAB>trg... (mining), or auto")  # fmt: skip
    add_config_args(p)
    return p


def with_scores(batch: pa.RecordBatch, scores: dict) -> pa.RecordBatch:
    """``batch`` plus the score columns (replacing same-named ones from an earlier run)."""
    names = [n for n in batch.schema.names if n not in scores]
    cols = [batch.column(batch.schema.names.index(n)) for n in names]
    for name, values in scores.items():
        names.append(name)
        cols.append(pa.array(values, pa.float32()))
    return pa.RecordBatch.from_arrays(cols, names=names)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def body() -> int:
        import torch

        from filters.bitext.cds.score import CdsScorer

        cfg = load_config(args, {"device": args.device, "threads": args.threads,
                                 "score_batch_size": args.batch_size})  # fmt: skip
        if args.batch_rows < 1:
            raise ValueError("--batch-rows must be >= 1")
        if not os.path.isdir(args.model):
            raise FileNotFoundError(f"--model directory not found: {args.model}")
        if not Path(args.pairs).exists():
            raise FileNotFoundError(f"--pairs file not found: {args.pairs}")
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        t0 = time.perf_counter()
        scorer = CdsScorer.load(args.model, device=cfg.device, batch_size=cfg.score_batch_size,
                                progress=False)  # fmt: skip
        counter = StageCounter()
        out = Path(args.output)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        writer = None
        try:
            with tqdm(unit=" pairs", desc="cds-score", disable=not cfg.progress) as bar:
                for batch in iter_pair_batches(args.pairs, counter, args.batch_rows, args.layout):
                    src = batch.column(0).to_pylist()
                    trg = batch.column(1).to_pylist()
                    scored = with_scores(batch, scorer.score_all(src, trg))
                    if writer is None:
                        writer = pq.ParquetWriter(tmp, scored.schema)
                    writer.write_batch(scored)
                    counter.add_in(UNIT, batch.num_rows)
                    counter.add_out(UNIT, batch.num_rows)
                    bar.update(batch.num_rows)
            if writer is None:
                raise PairFileError(f"{args.pairs}: no readable pair (expected Parquet with src/trg or TSV src<TAB>trg)")
            writer.close()
            os.replace(tmp, out)
        except BaseException:
            if writer is not None:
                writer.close()
            tmp.unlink(missing_ok=True)
            raise
        counter.add_event(UNIT, "truncated_sides", scorer.truncated)
        report = counter.to_report(
            STAGE, pairs_file=args.pairs, model=args.model, output=str(out),
            bidirectional=scorer.bidirectional, device=str(scorer.device),
            seconds=round(time.perf_counter() - t0, 3),
        )
        problems = check_balanced(report)
        if problems:
            raise RuntimeError("unbalanced counts: " + "; ".join(problems))
        write_report(str(out.parent / "stats.json"), report)
        n = report["counts"][UNIT]["out"]
        print(f"cds-score: {n} pairs scored -> {out} ({report['seconds']:.1f}s)")
        return 0

    return run_cli("cds-score", body, models=True)
