"""choose the threshold that keeps ~80% GOOD on a labelled sample

``python -m filters calibrate --scored SCORED.parquet --labels LABELLED --output DIR``

Chooses the lowest score threshold t such that the labelled pairs scoring >= t are at least
--target GOOD. Labelled pairs get their score from --scored by exact (src, trg) match (score the
labelled sample with ``cds-score --labelled`` first if it is not part of the scored set). Writes,
into the claimed folder DIR (committed at the end): DIR/threshold.json (threshold, precision,
retained share, their bootstrap intervals, ROC AUC), DIR/calibration.png (precision and
retention against the threshold) and DIR/stats.json. A sample that is too small, all one label,
or whose best pairs never reach the target is refused (exit 2), as is a score column stored as
text.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import time

import numpy as np

from filters.bitext.calibrate import CalibrationError, calibrate, parse_label, plot_calibration
from filters.bitext.cliutil import (
    add_common_options,
    check_score_type,
    run_command,
    score_values,
    section_config,
    write_stats,
)
from filters.bitext.label_match import key_of, unique_labels
from filters.bitext.pair_io import read_pairs, utf8_column
from labse_common.config import to_dict
from labse_common.datafiles import parquet_file, read_parquet
from labse_common.errors import InputError
from labse_common.output_dir import OutputDir
from labse_common.stats import StageCounter

log = logging.getLogger("filters.bitext.calibrate")
STAGE = "calibrate"
UNIT = "labelled_pairs"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m filters calibrate",
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--scored", required=True, metavar="SCORED.parquet", help="cds-score output")
    p.add_argument(
        "--labels",
        required=True,
        metavar="LABELLED",
        help="TSV src<TAB>trg<TAB>GOOD|BAD (.gz ok; a header line src trg label is "
        "allowed) or Parquet with src, trg, label",
    )
    p.add_argument(
        "--target",
        type=float,
        help="GOOD share the kept set must reach (default cds.calibrate.target, 0.8)",
    )
    p.add_argument(
        "--bootstrap", type=int, help="bootstrap resamples (default cds.calibrate.bootstrap)"
    )
    p.add_argument(
        "--confidence", type=float, help="interval level (default cds.calibrate.confidence, 0.95)"
    )
    p.add_argument(
        "--score-column",
        help="score column of SCORED to threshold (default cds_score; "
        "e.g. dual_xent or cds_score_bwd)",
    )
    p.add_argument("--seed", type=int, help="bootstrap seed (default cds.calibrate.seed)")
    add_common_options(
        p,
        "cds",
        "output folder (threshold.json, calibration.png, stats.json)",
        "calibrate.target=0.8",
    )
    return p


def read_labels(path: str, counter: StageCounter) -> tuple[list[str], list[str], list[bool]]:
    """(src, trg, is_good) of a labelled sample; a label other than GOOD/BAD is an error."""
    reader = StageCounter()
    table = read_pairs(path, reader, flag="--labels")
    for key, n in reader.counts.items():
        counter.counts[f"label_file_{key}"] += n
    names = table.column_names
    col = "label" if "label" in names else ("col2" if "col2" in names else None)
    if col is None:
        raise InputError(
            path,
            "no label column (TSV src<TAB>trg<TAB>GOOD|BAD or Parquet with 'label')",
            "--labels",
        )
    is_tsv = col == "col2"
    good = []
    for i, v in enumerate(table.column(col).to_pylist()):
        where = f"{path}: {'data line' if is_tsv else 'row'} {i + 1}"
        good.append(parse_label(v, where))
    return table.column("src").to_pylist(), table.column("trg").to_pylist(), good


def _calibrate(args: argparse.Namespace, cc) -> tuple:
    """The calibration, threshold.json's content and the stats report."""
    t0 = time.perf_counter()
    # Damage anywhere in --scored, a missing or textual score column: one line, exit 2.
    check_score_type(
        parquet_file(args.scored, "--scored").schema_arrow, cc.score_column, args.scored, "--scored"
    )
    scored = read_parquet(
        args.scored, ["src", "trg", cc.score_column], "--scored", required=["src", "trg"]
    )
    all_scores = score_values(scored.column(cc.score_column))
    lookup: dict[tuple[str, str], float] = {}
    src_col, trg_col = (
        utf8_column(scored.column(c).combine_chunks(), c, args.scored, "--scored")
        for c in ("src", "trg")
    )
    for s, t, v in zip(src_col.to_pylist(), trg_col.to_pylist(), all_scores):
        lookup.setdefault((s, t), float(v))
    counter = StageCounter()
    src, trg, good = read_labels(args.labels, counter)
    counter.add_in(UNIT, len(src))
    # A pair labelled twice counts once, and one labelled both ways is left out (or the file
    # refused): the rule every reader of labels applies, so the scores are not blamed for it.
    used = unique_labels(
        [key_of(s, t) for s, t in zip(src, trg)], good, counter, UNIT, args.labels, "--labels"
    )
    src, trg, good = [src[i] for i in used], [trg[i] for i in used], [good[i] for i in used]
    scores, labels = [], []
    for s, t, g in zip(src, trg, good):
        v = lookup.get((s, t))
        if v is None:
            counter.add_dropped(UNIT, "not_in_scored")
        elif not math.isfinite(v):
            counter.add_dropped(UNIT, "no_score")
        else:
            counter.add_out(UNIT)
            scores.append(v)
            labels.append(g)
    missing = len(src) - len(scores)
    if missing:
        log.warning(
            "%d of %d labelled pairs have no score in %s (counted in stats.json)",
            missing,
            len(src),
            args.scored,
        )
    try:
        cal = calibrate(
            np.array(scores),
            np.array(labels, dtype=bool),
            target=cc.target,
            bootstrap=cc.bootstrap,
            confidence=cc.confidence,
            min_labelled=cc.min_labelled,
            min_per_label=cc.min_per_label,
            min_kept=cc.min_kept,
            seed=cc.seed,
            score_column=cc.score_column,
        )
    except CalibrationError as e:  # name the sample that cannot support a threshold
        raise CalibrationError(f"--labels {args.labels}: {e}") from e
    finite = all_scores[np.isfinite(all_scores)]
    cal.scored_pairs = int(len(all_scores))
    cal.retained_share_scored = float((finite >= cal.threshold).sum() / max(1, len(all_scores)))
    doc = {**cal.to_json(), "scored": args.scored, "labels": args.labels, "plot": "calibration.png"}
    report = counter.to_report(
        STAGE,
        threshold=cal.threshold,
        target=cal.target,
        outputs=["threshold.json", "calibration.png"],
        seconds=round(time.perf_counter() - t0, 3),
    )
    return cal, doc, report


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def body() -> int:
        flags = {
            k: v
            for k, v in {
                "target": args.target,
                "bootstrap": args.bootstrap,
                "confidence": args.confidence,
                "score_column": args.score_column,
                "seed": args.seed,
            }.items()
            if v is not None
        }
        base = section_config("cds", args).calibrate
        cfg = section_config("cds", args, {"calibrate": {**to_dict(base), **flags}})
        # Claimed first: a second run into the same folder stops at once (exit 2).
        with OutputDir(args.output, args.overwrite).open() as out:
            cal, doc, report = _calibrate(args, cfg.calibrate)
            plot_calibration(cal, os.path.join(out.tmp, "calibration.png"))
            with open(os.path.join(out.tmp, "threshold.json"), "w", encoding="utf-8") as f:
                f.write(json.dumps(doc, indent=2) + "\n")
            write_stats(out.tmp, report)
        lo, hi = cal.precision_ci
        rlo, rhi = cal.retained_share_ci
        tlo, thi = cal.threshold_ci
        pct = f"{cal.confidence:.0%}"
        print(
            f"calibrate: threshold {cal.threshold:.4f} ({pct} interval {tlo:.4f}..{thi:.4f}) on "
            f"{cal.labelled} labelled pairs ({cal.good} GOOD, {cal.bad} BAD, ROC AUC {cal.roc_auc:.3f})"
        )
        print(
            f"  precision {cal.precision:.3f} ({lo:.3f}..{hi:.3f}), retained {cal.retained_share:.3f} "
            f"({rlo:.3f}..{rhi:.3f}); {cal.retained_share_scored:.3f} of {cal.scored_pairs} scored pairs "
            f"-> {os.path.join(args.output, 'threshold.json')}"
        )
        return 0

    return run_command(args, body, log, "calibrate")
