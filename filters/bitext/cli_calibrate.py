"""``python -m filters calibrate``: the threshold that keeps ~80% GOOD on a labelled sample."""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from filters.bitext.calibrate import CalibrationError, calibrate, parse_label, plot_calibration
from filters.bitext.cds.cliutil import add_config_args, load_config, run_cli
from filters.bitext.pair_io import PairFileError, read_pairs
from labse_common.config import to_dict
from labse_common.stats import StageCounter, check_balanced, write_report

log = logging.getLogger("filters.bitext.calibrate")
STAGE = "calibrate"
UNIT = "labelled_pairs"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m filters calibrate",
        description=(
            "Choose the lowest score threshold t such that the labelled pairs scoring >= t are at "
            "least --target GOOD. Labelled pairs get their score from --scored by exact (src, trg) "
            "match (score the labelled sample with cds-score first if it is not part of the "
            "scored set). Writes DIR/threshold.json (threshold, precision, retained share, their "
            "bootstrap intervals, ROC AUC), DIR/calibration.png (precision and retention against "
            "the threshold) and DIR/stats.json. A sample that is too small, all one label, or "
            "whose best pairs never reach the target is refused (exit 2)."
        ),
    )
    p.add_argument("--scored", required=True, metavar="SCORED.parquet", help="cds-score output")
    p.add_argument("--labels", required=True, metavar="LABELLED",
                   help="TSV src<TAB>trg<TAB>GOOD|BAD (.gz ok; a header line src trg label is "
                   "allowed) or Parquet with src, trg, label")  # fmt: skip
    p.add_argument("--output", required=True, metavar="DIR", help="output directory")
    p.add_argument("--target", type=float, help="GOOD share the kept set must reach (default cds.calibrate.target, 0.8)")
    p.add_argument("--bootstrap", type=int, help="bootstrap resamples (default cds.calibrate.bootstrap)")
    p.add_argument("--confidence", type=float, help="interval level (default cds.calibrate.confidence, 0.95)")
    p.add_argument("--score-column", help="score column of SCORED to threshold (default cds_score; "
                   "e.g. dual_xent or cds_score_bwd)")  # fmt: skip
    p.add_argument("--seed", type=int, help="bootstrap seed (default cds.calibrate.seed)")
    add_config_args(p)
    return p


def read_labels(path: str, counter: StageCounter) -> tuple[list[str], list[str], list[bool]]:
    """(src, trg, is_good) of a labelled sample; a label other than GOOD/BAD is an error."""
    reader = StageCounter()
    table = read_pairs(path, reader)
    for key, n in reader.counts.items():
        counter.counts[f"label_file_{key}"] += n
    names = table.column_names
    col = "label" if "label" in names else ("col2" if "col2" in names else None)
    if col is None:
        raise CalibrationError(f"{path}: no label column (TSV src<TAB>trg<TAB>GOOD|BAD or Parquet with 'label')")
    is_tsv = col == "col2"
    good = []
    for i, v in enumerate(table.column(col).to_pylist()):
        where = f"{path}: {'data line' if is_tsv else 'row'} {i + 1}"
        good.append(parse_label(v, where))
    return table.column("src").to_pylist(), table.column("trg").to_pylist(), good


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def body() -> int:
        flags = {k: v for k, v in {"target": args.target, "bootstrap": args.bootstrap,
                                   "confidence": args.confidence, "score_column": args.score_column,
                                   "seed": args.seed}.items() if v is not None}  # fmt: skip
        cfg = load_config(args, {"calibrate": {**to_dict(load_config(args).calibrate), **flags}})
        cc = cfg.calibrate
        for what, path in (("--scored", args.scored), ("--labels", args.labels)):
            if not Path(path).exists():
                raise FileNotFoundError(f"{what} file not found: {path}")
        t0 = time.perf_counter()
        schema = pq.read_schema(args.scored) if Path(args.scored).is_file() else None
        if schema is None or cc.score_column not in schema.names:
            have = ", ".join(schema.names) if schema is not None else "not a Parquet file"
            raise PairFileError(f"--scored {args.scored}: no {cc.score_column!r} column ({have}); "
                                "run python -m filters cds-score first")  # fmt: skip
        scored = pq.read_table(args.scored, columns=["src", "trg", cc.score_column])
        all_scores = scored.column(cc.score_column).to_numpy(zero_copy_only=False).astype(np.float64)
        lookup: dict[tuple[str, str], float] = {}
        for s, t, v in zip(scored.column("src").to_pylist(), scored.column("trg").to_pylist(), all_scores):
            lookup.setdefault((s, t), float(v))
        counter = StageCounter()
        src, trg, good = read_labels(args.labels, counter)
        counter.add_in(UNIT, len(src))
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
            log.warning("%d of %d labelled pairs have no score in %s (counted in stats.json)",
                        missing, len(src), args.scored)  # fmt: skip
        cal = calibrate(np.array(scores), np.array(labels, dtype=bool), target=cc.target,
                        bootstrap=cc.bootstrap, confidence=cc.confidence,
                        min_labelled=cc.min_labelled, min_per_label=cc.min_per_label,
                        min_kept=cc.min_kept,
                        seed=cc.seed, score_column=cc.score_column)  # fmt: skip
        finite = all_scores[np.isfinite(all_scores)]
        cal.scored_pairs = int(len(all_scores))
        cal.retained_share_scored = float((finite >= cal.threshold).sum() / max(1, len(all_scores)))
        out = Path(args.output)
        out.mkdir(parents=True, exist_ok=True)
        plot_calibration(cal, str(out / "calibration.png.tmp"))
        os.replace(out / "calibration.png.tmp", out / "calibration.png")
        doc = {**cal.to_json(), "scored": args.scored, "labels": args.labels, "plot": "calibration.png"}
        tmp = out / "threshold.json.tmp"
        tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, out / "threshold.json")
        report = counter.to_report(STAGE, threshold=cal.threshold, target=cal.target,
                                   seconds=round(time.perf_counter() - t0, 3))  # fmt: skip
        problems = check_balanced(report)
        if problems:
            raise RuntimeError("unbalanced counts: " + "; ".join(problems))
        write_report(str(out / "stats.json"), report)
        lo, hi = cal.precision_ci
        rlo, rhi = cal.retained_share_ci
        tlo, thi = cal.threshold_ci
        pct = f"{cal.confidence:.0%}"
        print(f"calibrate: threshold {cal.threshold:.4f} ({pct} interval {tlo:.4f}..{thi:.4f}) on "
              f"{cal.labelled} labelled pairs ({cal.good} GOOD, {cal.bad} BAD, ROC AUC {cal.roc_auc:.3f})")
        print(f"  precision {cal.precision:.3f} ({lo:.3f}..{hi:.3f}), retained {cal.retained_share:.3f} "
              f"({rlo:.3f}..{rhi:.3f}); {cal.retained_share_scored:.3f} of {cal.scored_pairs} scored pairs "
              f"-> {out / 'threshold.json'}")  # fmt: skip
        return 0

    return run_cli("calibrate", body)
