"""The run report's sections on the final filter (the combined score, its calibration, the
precision against the threshold, per language pair) and on the evaluation."""

from __future__ import annotations

from pathlib import Path

from labse_common.datafiles import read_parquet
from pipelines.report_data import ReportBase, png, pyplot, read_json_or_none
from pipelines.run.bitext_stages import BITEXT, COMBINE, EVAL, LABELS, SAMPLE


class FilterSections(ReportBase):
    """The final filter's and the evaluation's sections of :class:`pipelines.report.Report`."""

    def final_filter(self) -> None:
        self.add(
            "h2",
            "Final filter: combined pair score, calibrated on a labelled sample of the mined pairs",
        )
        has, why = self.status(COMBINE)
        if not has:
            src = (read_json_or_none(self.dir(BITEXT) / "stats.json") or {}).get(
                "source", "the mining margin"
            )
            self.add("p", f"{why} The final bitext was selected by: {src}.")
            return
        d = self.dir(COMBINE)
        summ = read_json_or_none(d / "combined.json") or {}
        cal, reach = summ.get("calibration"), summ.get("reachable") or {}
        target = summ.get("target", 0.8)
        if not summ.get("target_reached", cal is not None):
            # The verdict itself is in the summary box at the top; here, the detail.
            self.add(
                "p",
                f"The target was not reached (see the summary): {summ.get('message', '')} The "
                "bitext holds the pairs at that best threshold.",
            )
            thr, prec, ci = (
                reach.get("threshold"),
                reach.get("precision"),
                reach.get("precision_ci") or [None, None],
            )
        else:
            thr, prec, ci = cal["threshold"], cal["precision"], cal["precision_ci"]
            self.add(
                "p",
                f"Threshold {thr:.3f} on the combined score keeps pairs that are {prec:.1%} GOOD on the "
                f"labelled sample ({cal.get('confidence', 0.9):.0%} bootstrap interval {ci[0]:.1%}–{ci[1]:.1%}; "
                f"target {target:.0%}), retaining {cal['retained_share']:.1%} of the sampled pairs; "
                f"{cal['labelled']} labelled ({cal['good']} GOOD, {cal['bad']} BAD).",
            )
        self.add(
            "p",
            f"Combined score: out-of-fold ROC AUC {summ.get('oof_auc', float('nan')):.3f}, "
            f"Brier {summ.get('oof_brier', float('nan')):.3f}. Each feature alone and its weight "
            "(standardised logistic regression):",
        )
        self.add(
            "table",
            ["feature", "ROC AUC alone", "weight"],
            [
                [f["name"], f"{f['auc']:.3f}", f"{f['weight']:+.3f}"]
                for f in summ.get("features", [])
            ],
        )
        scored = d / "scored.parquet"
        sample = self.dir(SAMPLE) / "sample.parquet"
        if scored.is_file() and sample.is_file() and thr is not None:
            self._filter_curve(scored, sample, float(thr), target)
        self._eval_vs_interval(ci)

    def sample_labels(self, sample: Path) -> list[dict]:
        """``sample_id`` and ``label`` of every sampled pair: a person's labels when the labels
        stage has them (rows matched to the pairs by text), else the sample's own."""
        person = self.dir(LABELS) / "labels.tsv"
        if person.is_file():
            from filters.bitext.sample import read_labels

            return read_labels(person)[0].select(["sample_id", "label"]).to_pylist()
        return read_parquet(
            sample, ["sample_id", "label"], required=["sample_id", "label"]
        ).to_pylist()

    def _labelled(self, scored: Path, sample: Path) -> tuple[list, list, list[dict]]:
        t = read_parquet(scored, required=["combined_score"])
        smp = self.sample_labels(sample)
        score = t.column("combined_score").to_pylist()
        labelled = [
            (score[int(r["sample_id"])], r["label"] == "GOOD")
            for r in smp
            if r["label"] in ("GOOD", "BAD")
        ]
        rows = t.select(
            [c for c in ("src", "trg", "src_lang", "combined_score") if c in t.column_names]
        ).to_pylist()
        lab = {int(r["sample_id"]): r["label"] for r in smp}
        for i, r in enumerate(rows):
            r["label"] = lab.get(i, "")
        return [s for s, _ in labelled], [g for _, g in labelled], rows

    def _filter_curve(self, scored: Path, sample: Path, thr: float, target: float) -> None:
        import numpy as np

        s, g, rows = self._labelled(scored, sample)
        if len(s) < 2:
            return
        s, g = np.asarray(s, float), np.asarray(g, bool)
        grid = np.quantile(s, np.linspace(0, 0.98, 60))
        rng = np.random.default_rng(0)
        boot = []
        for _ in range(300):  # pointwise band: labelled pairs resampled, thresholds fixed
            j = rng.integers(0, len(s), len(s))
            boot.append([g[j][s[j] >= v].mean() if (s[j] >= v).any() else np.nan for v in grid])
        boot = np.asarray(boot)
        prec = [g[s >= v].mean() for v in grid]
        kept = [(s >= v).mean() for v in grid]
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(8, 3.2))
        ax.fill_between(
            grid,
            np.nanquantile(boot, 0.05, axis=0),
            np.nanquantile(boot, 0.95, axis=0),
            alpha=0.25,
            label="precision, 90% bootstrap band",
        )
        ax.plot(grid, prec, label="precision (labelled sample)")
        ax.plot(grid, kept, label="retained share of the sample")
        ax.axhline(target, color="grey", ls=":", label=f"target {target:.0%}")
        ax.axvline(thr, color="k", ls="--", label=f"threshold {thr:.3f}")
        ax.set_xlabel("combined score (P(GOOD))")
        ax.set_ylim(0, 1.02)
        ax.legend(fontsize=7, loc="lower left")
        self.add(
            "img",
            "filter_precision_retention",
            png(fig),
            "precision and retention against the threshold",
        )
        near = sorted(rows, key=lambda r: abs(r["combined_score"] - thr))[:40]
        above = sorted(
            [r for r in near if r["combined_score"] >= thr], key=lambda r: r["combined_score"]
        )[:5]
        below = sorted(
            [r for r in near if r["combined_score"] < thr], key=lambda r: -r["combined_score"]
        )[:5]
        self.add(
            "p",
            "Pairs just above and just below the threshold (label: from the labelled sample, blank if not sampled):",
        )
        self.add(
            "table",
            ["side", "score", "label", "lang", "source", "target"],
            [
                [
                    side,
                    f"{r['combined_score']:.3f}",
                    r["label"],
                    r.get("src_lang", ""),
                    r["src"],
                    r["trg"],
                ]
                for side, group in (("above", above), ("below", below))
                for r in group
            ],
        )

    def _eval_vs_interval(self, ci) -> None:
        pr = read_json_or_none(self.dir(EVAL) / "mined_pr.json") or {}
        a = pr.get("all")
        if not a or not ci or ci[0] is None:
            return
        inside = ci[0] <= a["precision"] <= ci[1]
        self.add(
            "p",
            f"Measured on the evaluation half (pairs never used to fit or calibrate the filter): precision "
            f"{a['precision']:.3f} ({a['correct']}/{a['judged']} judged pairs), "
            f"{'inside' if inside else 'OUTSIDE'} the calibration interval [{ci[0]:.3f}, {ci[1]:.3f}].",
        )

    def evaluation(self) -> None:
        self.add("h2", "Evaluation")
        has, why = self.status(EVAL)
        if not has:
            self.add("p", why)
            return
        pr = read_json_or_none(self.dir(EVAL) / "mined_pr.json") or {}
        if pr:
            scope = (
                f"only the pairs whose source sentence is in evaluation half {pr['half']} of the stable split "
                "(the filter's labelled sample came from the other half)"
                if "half" in pr
                else "every pair"
            )
            self.add(
                "p",
                "Precision and recall of the final bitext against the known alignment of the pairs "
                f"hidden, shuffled, in the web text; scope: {scope}. Precision is over the kept pairs "
                "that touch a planted sentence (strict: over every kept pair); `reachable` = both "
                "sides survived the corpus cleaning.",
            )
            table = {k: v for k, v in pr.items() if isinstance(v, dict)}
            self.add(
                "table",
                [
                    "pair",
                    "gold",
                    "reachable",
                    "kept",
                    "judged",
                    "correct",
                    "precision",
                    "precision (strict)",
                    "recall",
                    "recall (reachable)",
                ],
                [
                    [
                        k,
                        r["gold"],
                        r["reachable"],
                        r["kept"],
                        r["judged"],
                        r["correct"],
                        f"{r['precision']:.3f}",
                        f"{r.get('precision_strict', float('nan')):.3f}",
                        f"{r['recall']:.3f}",
                        f"{r['recall_reachable']:.3f}",
                    ]
                    for k, r in table.items()
                ],
            )
        miner = (read_json_or_none(self.dir(EVAL) / "miner_pr.json") or {}).get("all")
        if miner:
            self.add(
                "p",
                f"Before any filter, the miner's pairs hold {miner['correct']} of the "
                f"{miner['gold']} planted pairs (recall {miner['recall']:.3f}; "
                f"{miner['recall_reachable']:.3f} of the {miner['reachable']} whose two sides "
                f"survived the cleaning), among {miner['kept']} mined pairs: the most the filter "
                "can keep.",
            )
        for md in sorted((self.dir(EVAL) / "tatoeba").glob("*.md")):
            self.add(
                "p", "Retrieval on the held-out pairs (Tatoeba-style accuracy, both directions):"
            )
            self.add("raw_md", md.read_text(encoding="utf-8"))
