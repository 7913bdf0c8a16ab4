"""alias of `combine --features COLUMN`: a single-score threshold (threshold.json, for apply)

``python -m filters calibrate --scored SCORED.parquet --labels LABELLED --output DIR``

An alias kept for existing scripts: the final filter is ``python -m filters combine``, and this is
its special case with one feature. It runs the same fit and threshold rule
(:func:`filters.bitext.combine.fit_combined`) with ``combine.features=[--score-column]`` and
``combine.per_pair=false``; every setting and default is the ``combine:`` section's (--target,
--bootstrap, --confidence and --seed set combine.target, .bootstrap, .confidence, .seed). The
same as ``filters combine --features cds_score``, except that the labels are any labelled pairs
(matched to --scored by exact (src, trg) text) rather than a ``filters sample`` sample.

It chooses the lowest threshold t such that the labelled pairs scoring >= t are at least the
target GOOD (with one feature the combined score is a monotone map of it, so t is reported in the
feature's own units, and ``direction`` says whether higher or lower is kept). Writes, into the
claimed folder DIR (committed at the end): DIR/threshold.json (threshold, direction, precision,
retained share, their bootstrap intervals, ROC AUC, and the fitted one-feature model),
DIR/calibration.png and DIR/stats.json. A sample that is too small, all one label, or whose best
pairs never reach the target is refused (exit 2), as is a score column stored as text.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import time

import numpy as np
import pyarrow as pa

from filters.bitext.calibrate import Calibration, CalibrationError, parse_label, plot_calibration
from filters.bitext.cli_combine import fit_labelled, in_pair_order
from filters.bitext.cliutil import (
    add_common_options,
    check_score_type,
    run_command,
    score_values,
    section_config,
    write_stats,
)
from filters.bitext.combine import in_feature_units
from filters.bitext.label_match import key_of, unique_labels
from filters.bitext.pair_io import read_pairs, utf8_column
from labse_common.cli import command_parser, doc_details
from labse_common.datafiles import parquet_file, read_parquet
from labse_common.errors import InputError
from labse_common.output_dir import claim_output
from labse_common.sections.combine import CombineConfig
from labse_common.stats import StageCounter

log = logging.getLogger("filters.bitext.calibrate")
STAGE = "calibrate"
UNIT = "labelled_pairs"


def build_parser() -> argparse.ArgumentParser:
    p = command_parser(
        "python -m filters calibrate",
        "Choose a single-score threshold on labelled pairs, written to threshold.json for apply (an alias of 'combine --features COLUMN' kept for existing scripts).",
        doc_details(__doc__),
        examples=[
            "python -m filters calibrate --scored cds/labelled.parquet --labels labels.tsv --output calibrate/",
        ],
    )
    p.add_argument("--scored", required=True, metavar="SCORED.parquet", help="cds-score output")
    p.add_argument(
        "--labels",
        required=True,
        metavar="LABELLED",
        help="TSV src<TAB>trg<TAB>GOOD|BAD (.gz ok; a header line src trg label is "
        "allowed) or Parquet with src, trg, label",
    )
    p.add_argument("--target", type=float, help="GOOD share to reach (default combine.target)")
    p.add_argument("--bootstrap", type=int, help="bootstrap resamples (default combine.bootstrap)")
    p.add_argument("--confidence", type=float, help="interval level (default combine.confidence)")
    p.add_argument(
        "--score-column",
        default="cds_score",
        help="the one feature: the score column of SCORED to threshold (default cds_score; "
        "e.g. dual_xent or cds_score_bwd); combine.features=[this]",
    )
    p.add_argument("--seed", type=int, help="bootstrap seed (default combine.seed)")
    add_common_options(
        p,
        "combine",
        "output folder (threshold.json, calibration.png, stats.json)",
        "min_labelled=50",
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


def _scored_lookup(
    path: str, col: str
) -> tuple[dict[tuple[str, str], tuple[int, float]], np.ndarray]:
    """``{(src, trg): (row, score)}`` of --scored (the first row of a repeated pair), and every
    score."""
    # Damage anywhere in --scored, a missing or textual score column: one line, exit 2.
    check_score_type(parquet_file(path, "--scored").schema_arrow, col, path, "--scored")
    scored = read_parquet(path, ["src", "trg", col], "--scored", required=["src", "trg"])
    all_scores = score_values(scored.column(col))
    lookup: dict[tuple[str, str], tuple[int, float]] = {}
    src_col, trg_col = (
        utf8_column(scored.column(c).combine_chunks(), c, path, "--scored") for c in ("src", "trg")
    )
    for i, (s, t, v) in enumerate(zip(src_col.to_pylist(), trg_col.to_pylist(), all_scores)):
        lookup.setdefault((s, t), (i, float(v)))
    return lookup, all_scores


def _labelled_scores(
    args: argparse.Namespace,
    lookup: dict[tuple[str, str], tuple[int, float]],
    counter: StageCounter,
) -> tuple[np.ndarray, np.ndarray]:
    """The score and label of each labelled pair that --scored scored (the rest counted), in
    ``combine``'s order (:func:`~filters.bitext.cli_combine.in_pair_order`, by row of
    --scored), not the file's: a file in labelling order gives combine's threshold."""
    src, trg, good = read_labels(args.labels, counter)
    counter.add_in(UNIT, len(src))
    # A pair labelled twice counts once, and one labelled both ways is left out (or the file
    # refused): the rule every reader of labels applies, so the scores are not blamed for it.
    used = unique_labels(
        [key_of(s, t) for s, t in zip(src, trg)], good, counter, UNIT, args.labels, "--labels"
    )
    rows, scores, labels = [], [], []
    for i in used:
        row, v = lookup.get((src[i], trg[i]), (-1, None))
        if v is None:
            counter.add_dropped(UNIT, "not_in_scored")
        elif not math.isfinite(v):
            counter.add_dropped(UNIT, "no_score")
        else:
            counter.add_out(UNIT)
            rows.append(row)
            scores.append(v)
            labels.append(good[i])
    if len(scores) < len(used):
        log.warning(
            "%d of %d labelled pairs have no score in %s (counted in stats.json)",
            len(used) - len(scores),
            len(used),
            args.scored,
        )
    order = in_pair_order(rows)
    return np.array(scores, dtype=np.float64)[order], np.array(labels, dtype=bool)[order]


def _calibrate(args: argparse.Namespace, cfg: CombineConfig) -> tuple:
    """The calibration (in the feature's units), threshold.json's content and the stats."""
    t0 = time.perf_counter()
    col = cfg.features[0]
    lookup, all_scores = _scored_lookup(args.scored, col)
    counter = StageCounter()
    scores, good = _labelled_scores(args, lookup, counter)
    # The combined path itself: a one-feature fit, its threshold read back in the feature's units.
    fit = fit_labelled(pa.table({col: scores}), good, cfg, args.labels)
    if fit.calibration is None:  # the alias always stops here (combine.on_unreachable=stop)
        raise CalibrationError(f"--labels {args.labels}: {fit.unreachable}")
    cal, direction = in_feature_units(fit, fit.calibration, scores)
    finite = all_scores[np.isfinite(all_scores)]
    kept = finite >= cal.threshold if direction == "higher" else finite <= cal.threshold
    cal.scored_pairs = int(len(all_scores))
    cal.retained_share_scored = float(kept.sum() / max(1, len(all_scores)))
    doc = {
        **cal.to_json(),
        "direction": direction,
        "combined_threshold": fit.calibration.threshold,
        "model": fit.scorer.to_json(),
        "scored": args.scored,
        "labels": args.labels,
        "plot": "calibration.png",
    }
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
            "target": args.target,
            "bootstrap": args.bootstrap,
            "confidence": args.confidence,
            "seed": args.seed,
            "features": [args.score_column],
            "per_pair": False,
        }
        cfg = section_config("combine", args, flags)
        # Claimed first: a second run into the same folder stops at once (exit 2).
        with claim_output(args.output, args.overwrite) as out:
            cal, doc, report = _calibrate(args, cfg)
            plot_calibration(cal, os.path.join(out.tmp, "calibration.png"))
            with open(os.path.join(out.tmp, "threshold.json"), "w", encoding="utf-8") as f:
                f.write(json.dumps(doc, indent=2) + "\n")
            write_stats(out.tmp, report)
        _print_summary(cal, doc["direction"], os.path.join(args.output, "threshold.json"))
        return 0

    return run_command(args, body, log, "calibrate")


def _print_summary(cal: Calibration, direction: str, path: str) -> None:
    lo, hi = cal.precision_ci
    rlo, rhi = cal.retained_share_ci
    tlo, thi = cal.threshold_ci
    pct = f"{cal.confidence:.0%}"
    keeps = ">=" if direction == "higher" else "<="
    print(
        f"calibrate: threshold {cal.threshold:.4f} ({pct} interval {tlo:.4f}..{thi:.4f}; keeps "
        f"{cal.score_column} {keeps} it) on {cal.labelled} labelled pairs ({cal.good} GOOD, "
        f"{cal.bad} BAD, ROC AUC {cal.roc_auc:.3f})"
    )
    print(
        f"  precision {cal.precision:.3f} ({lo:.3f}..{hi:.3f}), retained {cal.retained_share:.3f} "
        f"({rlo:.3f}..{rhi:.3f}); {cal.retained_share_scored:.3f} of {cal.scored_pairs} scored pairs "
        f"-> {path}"
    )
