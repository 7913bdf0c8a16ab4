"""fit the combined pair score on a labelled sample of the mined pairs and choose its threshold

``python -m filters combine --pairs SCORED.parquet --labels DIR/sample.tsv --output OUT``

Every score column the pairs have (margin, cosine, CDS both ways, dual cross-entropy; language-ID
confidences and ``rule_*`` flag columns where a table carries them: the runner's pairs do not,
its rules stage drops failing pairs before), and the derived text features are combined by a
logistic regression fitted on the labelled sample (``filters sample``); the threshold for
``combine.target`` GOOD is chosen on out-of-fold probabilities with bootstrap intervals, globally
or (``per_pair``) per source language where its labelled pairs allow it
(:mod:`filters.bitext.combine`). This is the one final filter: a single-score threshold is its
special case with one feature (``--features cds_score`` for CDS alone); ``filters calibrate``
and ``filters apply`` are aliases of that case. Writes:

* ``OUT/scored.parquet``: every pair with ``combined_score``, ``combined_threshold`` and ``keep``;
* ``OUT/model.json``: the fitted model (features, means, scales, weights, intercept);
* ``OUT/combined.json``: per-feature ROC AUC and weight, out-of-fold AUC and Brier score, the
  global and per-pair calibration (threshold, precision and retained share with intervals),
  or why the target is unreachable and the best precision that was reachable;
* ``OUT/calibration.png`` and ``OUT/stats.json``.

When no threshold reaches the target: ``combine.on_unreachable=stop`` (the default) ends with one
line naming the best reachable precision, its interval and threshold, and exit 2, writing
nothing; ``continue`` keeps the pairs at that best threshold (below the target) and says so in
the log and in ``combined.json`` (``target_reached: false``, ``reachable``, ``message``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from filters.bitext.calibrate import (
    Calibration,
    CalibrationError,
    plot_calibration,
    precision_curve,
)
from filters.bitext.cliutil import run_command
from filters.bitext.combine import CombinedFit, fit_combined, thresholds_for
from filters.bitext.sample import labels_bool, read_labels, tsv_cell
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
from labse_common.datafiles import read_parquet
from labse_common.errors import InputError, UsageError
from labse_common.output_dir import claim_output
from labse_common.sections.combine import CombineConfig
from labse_common.stats import StageCounter, check_balanced, to_report, write_report

log = logging.getLogger("filters.bitext.combine")
STAGE = "combine"


def build_parser() -> argparse.ArgumentParser:
    p = command_parser(
        "python -m filters combine",
        "Fit the combined pair score on a labelled sample of the mined pairs and choose the threshold that keeps the target share of GOOD pairs: the final filter.",
        doc_details(__doc__),
        examples=[
            "python -m filters combine --pairs cds/scored.parquet --labels sample/sample.tsv --output combined/",
            "python -m filters combine --pairs cds/scored.parquet --labels sample/sample.tsv --features cds_score --output combined/",
        ],
    )
    p.add_argument(
        "--pairs",
        required=True,
        metavar="PAIRS.parquet",
        help="the pairs table the sample was drawn from (its sample_id column indexes "
        "this table's rows); every pair of it is scored",
    )
    p.add_argument(
        "--labels",
        required=True,
        metavar="SAMPLE.tsv",
        help="the labelled sample (`filters sample` output with the label column filled)",
    )
    add_output_option(p, "output folder (scored.parquet, model.json, combined.json, stats.json)")
    add_overwrite_option(p)
    p.add_argument("--target", type=float, help="GOOD share to reach (default combine.target)")
    p.add_argument(
        "--features",
        metavar="NAME[,NAME...]",
        help="the features to combine (default combine.features: every one the pairs have); "
        "one name is a single-score threshold, e.g. --features cds_score for CDS alone",
    )
    add_config_options(p, "combine", example="on_unreachable=continue")
    add_log_level_option(p)
    return p


def labelled_rows(table: pa.Table, labels: pa.Table, path: str) -> np.ndarray:
    """Row indices into ``table`` of the labelled pairs; their texts must match."""
    if "sample_id" not in labels.column_names:
        raise InputError(
            path,
            "no sample_id column: label the sample.tsv written by `filters sample`",
            "--labels",
        )
    try:
        ids = np.asarray([int(v) for v in labels.column("sample_id").to_pylist()], dtype=np.int64)
    except ValueError:
        raise InputError(path, "sample_id values must be row numbers", "--labels") from None
    if len(ids) and (ids.min() < 0 or ids.max() >= table.num_rows):
        raise InputError(
            path,
            f"sample_id out of range for a pairs table of {table.num_rows} rows: "
            "was the sample drawn from another --pairs file?",
            "--labels",
        )
    src, trg = table.column("src").to_pylist(), table.column("trg").to_pylist()
    lsrc, ltrg = labels.column("src").to_pylist(), labels.column("trg").to_pylist()
    for k, i in enumerate(ids):
        # The TSV replaced tabs and newlines by spaces; compare on the same footing.
        if tsv_cell(src[i]) != lsrc[k] or tsv_cell(trg[i]) != ltrg[k]:
            raise InputError(
                path,
                f"sample_id {i}: its pair differs from row {i} of --pairs: was "
                "the sample drawn from another file?",
                "--labels",
            )
    return ids


def _reachable(
    scores: np.ndarray,
    good: np.ndarray,
    min_kept: int,
    bootstrap: int,
    confidence: float,
    seed: int,
) -> dict:
    """The best precision a threshold keeping at least ``min_kept`` labelled pairs reaches: the
    threshold, the precision with its bootstrap interval (labelled pairs resampled, the threshold
    fixed), and the retained share there."""
    thr, prec, kept = precision_curve(scores, good)
    ok = kept * len(scores) >= min_kept
    if not ok.any():
        return {
            "threshold": float("nan"),
            "precision": float("nan"),
            "precision_ci": [float("nan")] * 2,
            "retained_share": float("nan"),
        }
    i = int(np.flatnonzero(ok)[np.argmax(prec[ok])])
    rng = np.random.default_rng(seed)
    boot = []
    for _ in range(bootstrap):
        j = rng.integers(0, len(scores), len(scores))
        sel = scores[j] >= thr[i]
        if sel.any():
            boot.append(good[j][sel].mean())
    a = (1 - confidence) / 2
    ci = (
        [float(np.quantile(boot, a)), float(np.quantile(boot, 1 - a))]
        if boot
        else [float("nan")] * 2
    )
    return {
        "threshold": float(thr[i]),
        "precision": float(prec[i]),
        "precision_ci": ci,
        "retained_share": float(kept[i]),
    }


def run(args: argparse.Namespace) -> dict:
    features = [f.strip() for f in args.features.split(",")] if args.features else None
    cfg = load_config("combine", args, {"target": args.target, "features": features})
    # Claimed first: a second run into the same folder stops at once (exit 2); whatever
    # fails later leaves nothing behind.
    with claim_output(args.output, args.overwrite) as out:
        table = read_parquet(args.pairs, flag="--pairs", required=("src", "trg"))
        counter = StageCounter()
        sample, good = _labelled_sample(table, args.labels, counter)
        fit = fit_labelled(sample, good, cfg, args.labels)
        summary, best = _summary(fit, good, cfg, args.labels)
        scores, thr, keep = decide(fit, table, best)
        report = _report(counter, cfg, fit, thr, keep)
        _two_rounds(args.labels, cfg, summary, report)
        _write(out.tmp, table, scores, thr, keep, fit, summary, report)
    log.info(
        "kept %d of %d pairs (%s) -> %s",
        int(keep.sum()),
        table.num_rows,
        threshold_note(fit, cfg, best),
        args.output,
    )
    return report


def _two_rounds(labels: str, cfg: CombineConfig, summary: dict, report: dict) -> None:
    """Labels with the page's near-threshold round (:mod:`filters.bitext.round_marks`): its
    two-round estimate, the page's own code, in combined.json and stats.json. The estimate
    above counts round two's labels as a plain sample; this one is unbiased."""
    from filters.bitext.round_marks import two_round_of

    est = two_round_of(labels, cfg.confidence)
    if est is None:
        return
    summary["two_round_estimate"] = report["two_round_estimate"] = est
    if est["ok"]:
        lo, hi = est["interval"]
        log.info(
            "two-round estimate at %.4g: %.1f%% GOOD [%.1f%%, %.1f%%] (%d round-two labels)",
            est["threshold"],
            100 * est["share"],
            100 * lo,
            100 * hi,
            est["labelled"],
        )
    else:
        log.warning("no two-round estimate: %s", est["why"])


def threshold_note(fit: CombinedFit, cfg: CombineConfig, best: dict | None) -> str:
    """The threshold(s) :func:`decide` applied and how each was chosen, for the closing line
    (it said "threshold none" when the best reachable one was applied)."""
    if best is not None and np.isfinite(best["threshold"]):
        return (
            f"combined_score >= {best['threshold']:.3f}, the best reachable threshold: "
            f"{best['precision']:.1%} GOOD on the labelled sample, BELOW the target "
            f"{cfg.target:.0%} (combine.on_unreachable=continue)"
        )
    cal = fit.calibration
    if cal is not None:
        note = (
            f"combined_score >= {cal.threshold:.3f}, the lowest threshold whose kept labelled "
            f"pairs reach the target {cfg.target:.0%} GOOD ({cal.precision:.1%} there)"
        )
    else:
        note = (
            f"no global threshold: none keeps >= {cfg.min_kept} labelled pairs, so no pair "
            "is kept by it"
        )
    own = {k: v.threshold for k, v in fit.per_pair.items() if isinstance(v, Calibration)}
    if own:
        each = ", ".join(f"{k} >= {t:.3f}" for k, t in own.items())
        rest = "the global one" if cal is not None else "none"
        note += f"; own thresholds per src_lang (combine.per_pair): {each}; the others: {rest}"
    return note


def _labelled_sample(
    table: pa.Table, path: str, counter: StageCounter
) -> tuple[pa.Table, np.ndarray]:
    """The rows of ``table`` that ``path`` labels, and whether each is GOOD."""
    labels, blank = read_labels(path, counter, "labelled_pairs")
    if labels.num_rows == 0:
        raise InputError(path, f"no labelled pair ({blank} blank labels)", "--labels")
    ids = labelled_rows(table, labels, path)
    order = in_pair_order(ids)
    return table.take(pa.array(ids[order])), labels_bool(labels)[order]


def in_pair_order(rows: np.ndarray | list[int]) -> np.ndarray:
    """The order in which every fit sees labelled pairs (``combine`` and ``calibrate``): by
    each pair's row of the pairs table, as the runner's labels stage writes them. The fit (its
    folds, its bootstrap) must not depend on the order a file was labelled in (``filters
    sample`` serves it in :func:`~filters.bitext.sample.labelling_order`)."""
    return np.argsort(np.asarray(rows, dtype=np.int64), kind="stable")


def fit_labelled(
    sample: pa.Table, good: np.ndarray, cfg: CombineConfig, labels: str
) -> CombinedFit:
    """:func:`fit_combined`, with a sample that cannot be fitted (all one label, no features)
    reported as one line naming the labels file."""
    try:
        fit = fit_combined(sample, good, cfg)
    except CalibrationError as e:
        raise UsageError(f"--labels {labels}: {e}") from e
    for f in fit.features:
        log.info("feature %-18s AUC %.3f  weight %+.3f", f.name, f.auc, f.weight)
    log.info("combined score: out-of-fold AUC %.3f, Brier %.3f", fit.oof_auc, fit.oof_brier)
    return fit


def _summary(
    fit: CombinedFit, good: np.ndarray, cfg: CombineConfig, labels: str
) -> tuple[dict, dict | None]:
    """combined.json's content, and the best reachable threshold when the target is not
    reached (``combine.on_unreachable=stop`` ends the command there, one line, exit 2)."""
    summary = fit.to_json()
    summary["target"] = cfg.target
    summary["target_reached"] = fit.calibration is not None
    if fit.calibration is not None:
        return summary, None
    best = _reachable(fit.oof_scores, good, cfg.min_kept, cfg.bootstrap, cfg.confidence, cfg.seed)
    summary["reachable"] = best
    lo, hi = best["precision_ci"]
    msg = (
        f"target {cfg.target:.0%} GOOD is not reachable on the labelled sample: the best "
        f"threshold keeping >= {cfg.min_kept} labelled pairs reaches {best['precision']:.1%} "
        f"GOOD [{lo:.1%}, {hi:.1%}] at {best['threshold']:.3f}, retaining "
        f"{best['retained_share']:.1%} of the sample; {fit.unreachable}"
    )
    summary["message"] = msg
    if cfg.on_unreachable == "stop":
        raise UsageError(
            f"--labels {labels}: {msg} (combine.on_unreachable=stop; set "
            "it to continue to keep the pairs at that best threshold)"
        )
    log.warning(
        "%s; combine.on_unreachable=continue: the pairs at or above that threshold "
        "are kept, BELOW the target",
        msg,
    )
    return summary, best


def decide(
    fit: CombinedFit, table: pa.Table, best: dict | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The keep decision for every pair of ``table``: its combined score, the threshold it
    faces (its language pair's own, else the global one; the best reachable one when the
    target was not reached and the run continues) and whether it is kept."""
    scores = fit.scorer.score(table)
    keys = (
        table.column("src_lang").to_pylist()
        if "src_lang" in table.column_names
        else [None] * table.num_rows
    )
    thr = thresholds_for(fit, keys)
    if best is not None and np.isfinite(best["threshold"]):
        thr = np.full(table.num_rows, best["threshold"])
    keep = np.isfinite(thr) & (scores >= np.nan_to_num(thr, nan=np.inf))
    return scores, thr, keep


def _report(
    counter: StageCounter, cfg: CombineConfig, fit: CombinedFit, thr: np.ndarray, keep: np.ndarray
) -> dict:
    counter.add_in("pairs", len(keep))
    counter.add_out("pairs", int(keep.sum()))
    counter.add_dropped("pairs", "below_threshold", int((np.isfinite(thr) & ~keep).sum()))
    counter.add_dropped("pairs", "target_unreachable", int((~np.isfinite(thr)).sum()))
    report = to_report(
        STAGE,
        counter.counts,
        config=to_dict(cfg),
        oof_auc=fit.oof_auc,
        features={f.name: {"auc": f.auc, "weight": f.weight} for f in fit.features},
    )
    problems = check_balanced(report)
    if problems:  # a bug here, not the user's input
        raise RuntimeError(f"combine: unbalanced counts {problems}")
    return report


def _write(
    tmp: str,
    table: pa.Table,
    scores: np.ndarray,
    thr: np.ndarray,
    keep: np.ndarray,
    fit: CombinedFit,
    summary: dict,
    report: dict,
) -> None:
    out_table = (
        table.append_column("combined_score", pa.array(scores.astype(np.float32)))
        .append_column("combined_threshold", pa.array(thr.astype(np.float32)))
        .append_column("keep", pa.array(keep))
    )
    pq.write_table(out_table, os.path.join(tmp, "scored.parquet"))
    write_json(os.path.join(tmp, "model.json"), fit.scorer.to_json())
    write_json(os.path.join(tmp, "combined.json"), summary)
    if isinstance(fit.calibration, Calibration):
        plot_calibration(fit.calibration, os.path.join(tmp, "calibration.png"))
    write_report(os.path.join(tmp, "stats.json"), report)


def write_json(path: str, doc: dict) -> None:
    """``doc`` as indented JSON; numpy numbers and arrays as plain ones."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2, default=_json_default)
        f.write("\n")


def _json_default(v: object) -> object:
    if isinstance(v, (np.floating, np.integer)):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    raise TypeError(type(v).__name__)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(args, lambda: run(args) and 0, log, "combine")
