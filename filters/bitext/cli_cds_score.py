"""score pairs with a trained CDS scorer

``python -m filters cds-score --model MODEL_DIR --pairs PAIRS --output DIR [--labelled PAIRS]``

cds_score = [log p(y|x; clean) - log p(y|x; noisy)] / |y|, higher = more like the trusted data
(a model folder from ``python -m filters cds-train``). Writes, into the claimed folder DIR
(committed at the end):

* ``DIR/scored.parquet``: every column of --pairs (src and trg exactly as given) plus
  cds_score and xent_clean (and, for a bidirectional model, cds_score_bwd, xent_clean_bwd and
  dual_xent);
* with ``--labelled``: ``DIR/labelled.parquet``, the same for a labelled sample (what
  ``filters calibrate --scored`` reads), so one run scores both with one model load;
* ``DIR/stats.json`` counting both: units ``pairs`` and ``labelled_pairs``, and the reader's
  line counts of each TSV input.

``--output`` is a folder; the old form ``--output FILE.parquet`` is refused (exit 2).
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path

from filters.bitext.cliutil import (
    add_common_options,
    add_layout_option,
    positive,
    run_command,
    section_config,
    write_stats,
)
from filters.bitext.score_file import score_pairs_file
from labse_common.cli import command_parser, doc_details
from labse_common.errors import UsageError
from labse_common.output_dir import claim_output
from labse_common.stats import StageCounter

log = logging.getLogger("filters.cds_score")
STAGE = "cds_score"
#: (flag, stats unit, output file) of each input.
INPUTS = (
    ("--pairs", "pairs", "scored.parquet"),
    ("--labelled", "labelled_pairs", "labelled.parquet"),
)


def build_parser() -> argparse.ArgumentParser:
    p = command_parser(
        "python -m filters cds-score",
        "Score pairs with a trained CDS scorer: how much more a pair looks like the trusted pairs than like the candidates.",
        doc_details(__doc__),
        examples=[
            "python -m filters cds-score --model cds_model/ --pairs mined/mined.parquet --output cds/",
            "python -m filters cds-score --model cds_model/ --pairs mined/mined.parquet --labelled labels.tsv --output cds/",
        ],
    )
    p.add_argument("--model", required=True, metavar="MODEL_DIR", help="CDS model directory")
    p.add_argument(
        "--pairs",
        required=True,
        metavar="PAIRS",
        help="mining/rules output (Parquet, TSV.gz) or any TSV src<TAB>trg",
    )
    p.add_argument(
        "--labelled",
        metavar="PAIRS",
        help="also score these pairs (a labelled sample, same formats) into DIR/labelled.parquet",
    )
    p.add_argument(
        "--batch-size", type=int, help="pairs per model batch (default cds.score_batch_size)"
    )
    # 4,096: the scale ladder's 10x peak was 841 MiB at 4,096 and 997 at 20,000, at the same
    # cost per pair (a chunk's tokenised pairs and texts live until it is written).
    p.add_argument(
        "--batch-rows",
        type=int,
        default=4096,
        help="pairs read, scored and written per chunk (default 4096)",
    )
    p.add_argument(
        "--device",
        choices=["auto", "cpu", "cuda"],
        help="default cds.device (auto = GPU when present)",
    )
    p.add_argument("--threads", type=int, help="torch CPU threads (default cds.threads)")
    p.add_argument(
        "--allow-empty",
        action="store_true",
        help="a --pairs Parquet file with no row gives an empty scored.parquet (its columns plus "
        "the score columns) instead of an error (the runner scores each language pair alone)",
    )
    add_layout_option(p, "--pairs and --labelled")
    add_common_options(
        p,
        "cds",
        "output folder (scored.parquet, labelled.parquet, stats.json)",
        "score_batch_size=32",
    )
    return p


def check_model_dir(path: str) -> None:
    """A cds-train output folder, checked before any work (see the shared check)."""
    from filters.bitext.cds.score import check_model_dir as check

    check(path, "--model")


def _check_output(output: str) -> None:
    if output.endswith((".parquet", ".tsv.gz")) and not os.path.isdir(output):
        parent = os.path.dirname(output.rstrip("/")) or "."
        raise UsageError(
            f"--output {output}: --output is a folder now (DIR/scored.parquet and "
            f"DIR/stats.json are written); e.g. --output {parent}"
        )


def _no_rows(path: str) -> bool:
    """A Parquet file that opens and holds no row (a language pair the rules kept nothing of)."""
    import pyarrow.parquet as pq

    try:
        return path.endswith(".parquet") and pq.ParquetFile(path).metadata.num_rows == 0
    except (OSError, ValueError):  # unreadable: the reader's own error says why
        return False


def _write_empty(scorer, path: str, dest: Path, counter: StageCounter) -> None:
    """An empty scored.parquet with the columns a non-empty one has."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from filters.bitext.score_file import with_scores

    schema = pq.read_schema(path)
    empty = pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)
    pq.write_table(pa.Table.from_batches([with_scores(empty, scorer.score_all([], []))]), dest)
    counter.add_in("files")
    counter.add_out("files")
    counter.add_in("pairs", 0)
    counter.add_out("pairs", 0)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def body() -> int:
        _check_output(args.output)
        cfg = section_config(
            "cds",
            args,
            {"device": args.device, "threads": args.threads, "score_batch_size": args.batch_size},
        )
        positive(args.batch_rows, "--batch-rows")
        check_model_dir(args.model)
        import torch

        from filters.bitext.cds.score import CdsScorer
        from labse_common.threads import size_threads

        if cfg.device == "cuda" and not torch.cuda.is_available():
            raise UsageError("--device cuda (cds.device): no GPU is visible")
        size_threads(cfg.threads)  # null: the CPUs this process may use (affinity, quota)
        t0 = time.perf_counter()
        counter = StageCounter()
        with claim_output(args.output, args.overwrite) as out:
            scorer = CdsScorer.load(
                args.model, device=cfg.device, batch_size=cfg.score_batch_size, progress=False
            )
            for flag, unit, name in INPUTS:
                path = getattr(args, flag[2:])
                if flag == "--pairs" and args.allow_empty and _no_rows(path):
                    _write_empty(scorer, path, Path(out.tmp) / name, counter)
                elif path is not None:
                    score_pairs_file(
                        scorer.score_all,
                        path,
                        flag,
                        unit,
                        Path(out.tmp) / name,
                        counter,
                        args.batch_rows,
                        args.layout,
                        cfg.progress,
                        "cds-score",
                    )
            counter.add_event("pairs", "truncated_sides", scorer.truncated)
            report = counter.to_report(
                STAGE,
                pairs_file=args.pairs,
                labelled_file=args.labelled,
                model=args.model,
                outputs=[name for flag, _, name in INPUTS if getattr(args, flag[2:]) is not None],
                bidirectional=scorer.bidirectional,
                device=str(scorer.device),
                seconds=round(time.perf_counter() - t0, 3),
            )
            write_stats(out.tmp, report)
        c = report["counts"]
        extra = f" and {c['labelled_pairs']['out']} labelled" if "labelled_pairs" in c else ""
        print(
            f"cds-score: {c['pairs']['out']} pairs{extra} scored -> {args.output} "
            f"({report['seconds']:.1f}s)"
        )
        return 0

    return run_command(args, body, log, "cds-score", models=True)
