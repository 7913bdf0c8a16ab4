"""The report's first screen: the summary box (what the run produced and whether it is good
enough), the funnel of records through the stages, the per-language-pair table, and the
distribution of each combined-score feature for the GOOD and the BAD labelled pairs."""

from __future__ import annotations

import math

from pipelines.report_data import png, pyplot, read_json_or_none, stage_stats
from pipelines.report_encoder import DEMO_HIDDEN, demo_sources, read_run_config, run_encoder
from pipelines.report_filter import FilterSections
from pipelines.run.bitext_stages import BITEXT, COMBINE, EVAL, RULES, SAMPLE
from pipelines.run.corpus_stages import COMMONCRAWL, COMMONCRAWL_Q, SENTENCES, WIKIPEDIA
from pipelines.run.model_stages import MINE, TRAIN

#: The path of the records from the text to the bitext: (stage, the unit counted there).
FUNNEL = (
    (WIKIPEDIA.name, "sentences"),
    (COMMONCRAWL.name, "sentences"),
    (COMMONCRAWL_Q.name, "sentences"),
    (SENTENCES.name, "sentences"),
    (MINE.name, "candidates"),
    (RULES.name, "pairs"),
    (COMBINE.name, "pairs"),
    (BITEXT.name, "pairs"),
)


def pct(v: object) -> str:
    return f"{v:.1%}" if _num(v) else "–"


def _num(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def interval(ci: object) -> str:
    if isinstance(ci, (list, tuple)) and len(ci) == 2 and all(map(_num, ci)):
        return f"[{ci[0]:.1%}, {ci[1]:.1%}]"
    return "[–]"


class SummarySections(FilterSections):
    """The sections that answer first (:meth:`answer_first`)."""

    def answer_first(self) -> None:
        self.summary_box()
        self.funnel()
        self.per_pair_table()
        self.feature_distributions()

    # --- the summary box -------------------------------------------------------------------

    def summary_box(self) -> None:
        info = read_json_or_none(self.run / "_run.json") or {}
        lines: list[tuple[str, str]] = [self._verdict()]
        two = self._two_round_line()
        if two:
            lines.append(("line", two))
        lines.append(self._bitext_line())
        measured = self._measured_line()
        if measured:
            lines.append(("line", measured))
        lines.extend(self._encoder_lines(info))
        data = "SYNTHETIC sample" if info.get("data") == "synthetic" else f"`{info.get('data')}`"
        lines.append(("line", f"**Data:** {data}."))
        self.add("summary", lines)

    def _verdict(self) -> tuple[str, str]:
        has, why = self.status(COMBINE)
        if not has:
            src = (read_json_or_none(self.dir(BITEXT) / "stats.json") or {}).get("source", "?")
            return (
                "warn",
                f"**No calibrated GOOD estimate:** {why} The bitext was selected by: {src}.",
            )
        summ = read_json_or_none(self.dir(COMBINE) / "combined.json") or {}
        cal = summ.get("calibration")
        target = summ.get("target", 0.8)
        if summ.get("target_reached", cal is not None) and cal:
            conf = cal.get("confidence", 0.9)
            return (
                "good",
                f"**Target reached:** estimated GOOD share {pct(cal.get('precision'))} "
                f"({conf:.0%} interval {interval(cal.get('precision_ci'))}), target "
                f"{pct(target)}; {cal.get('labelled', '?')} labelled pairs.",
            )
        best = summ.get("reachable") or {}
        return (
            "bad",
            f"**TARGET NOT REACHED:** estimated GOOD share {pct(best.get('precision'))} "
            f"(interval {interval(best.get('precision_ci'))}) at the best reachable threshold, "
            f"target {pct(target)}. The run went on (combine.on_unreachable=continue): expect "
            "the bitext's GOOD share below the target; label more pairs or lower the target.",
        )

    def _two_round_line(self) -> str | None:
        """combine's unbiased estimate from the near-threshold labelling round
        (filters/bitext/round_estimate.py), when the labels had one."""
        summ = read_json_or_none(self.dir(COMBINE) / "combined.json") or {}
        est = summ.get("two_round_estimate")
        if not isinstance(est, dict):
            return None
        if not est.get("ok"):
            return f"**Two-round estimate:** none ({est.get('why', 'unavailable')})."
        t, conf = est.get("threshold"), est.get("confidence")
        at = f" at threshold {t:.4g}" if _num(t) else ""
        conf = f"{conf:.0%}" if _num(conf) else "–"
        return (
            f"**Two-round estimate** (from two rounds of labels: the stratified sample and "
            f"{est.get('labelled', '?')} pairs drawn near the threshold): GOOD share "
            f"{pct(est.get('share'))}{at} ({conf} interval {interval(est.get('interval'))})."
        )

    def _bitext_line(self) -> tuple[str, str]:
        st = read_json_or_none(self.dir(BITEXT) / "stats.json")
        if not st:
            return ("warn", f"**Bitext:** none. {self.status(BITEXT)[1]}")
        n = st.get("counts", {}).get("pairs", {}).get("out", 0)
        per = st.get("pairs_per_language_pair") or {}
        each = ", ".join(f"{p} {k}" for p, k in sorted(per.items()))
        return ("line", f"**Bitext:** {n} pairs" + (f" ({each})" if each else "") + ".")

    def _measured_line(self) -> str | None:
        pr = read_json_or_none(self.dir(EVAL) / "mined_pr.json") or {}
        a = pr.get("all")
        if not isinstance(a, dict) or not _num(a.get("precision")):
            return None
        scope = f" (evaluation half {pr['half']})" if "half" in pr else ""
        return (
            f"**Measured against the evaluation alignment{scope}:** precision {a['precision']:.3f} "
            f"({a.get('correct', '?')}/{a.get('judged', '?')} judged pairs), recall "
            f"{a.get('recall', float('nan')):.3f} ({a.get('correct', '?')}/{a.get('gold', '?')} "
            "planted pairs)."
        )

    def _encoder_lines(self, info: dict) -> list[tuple[str, str]]:
        cfg = read_run_config(self.run)
        enc = run_encoder(self.run, cfg, bool(self.manifests.get(TRAIN.name)))
        if enc is None:
            return [("line", "**Encoder:** none (the run neither trained one nor had model.init).")]
        note = "" if enc.from_checkpoint else " (from the run's configuration)"
        out = [("line", f"**Encoder:** {enc.shape()}{note}; {enc.where}.")]
        # Unknown sources (no _config.yaml) give no warning rather than a wrong one.
        if enc.is_demo_shape() and cfg and not demo_sources(cfg, info):
            out.append(
                (
                    "warn",
                    f"**WARNING: the demo's small encoder shape** (hidden {enc.hidden} ≤ "
                    f"{DEMO_HIDDEN}) on your own data: mining quality will be far below LaBSE's. "
                    "Give model.init the released LaBSE (docs/own-data.md).",
                )
            )
        return out

    # --- the funnel --------------------------------------------------------------------------

    def funnel_steps(self) -> list[tuple[str, dict]]:
        """(``stage: unit``, counts) along :data:`FUNNEL`, for the stages that counted it (the
        quality-filtered CommonCrawl replaces the first pass when it ran)."""
        steps = []
        for stage, unit in FUNNEL:
            if stage == COMMONCRAWL.name and self.manifests.get(COMMONCRAWL_Q.name):
                continue
            st = stage_stats(self.run / stage) if self.manifests.get(stage) else None
            c = (st or {}).get("counts", {}).get(unit)
            if c:
                steps.append((f"{stage}: {unit}", c))
        return steps

    def funnel(self) -> None:
        self.add("h2", "Funnel: records in and out of each stage, text to bitext")
        steps = self.funnel_steps()
        if not steps:
            self.add("p", "No stage on the way to the bitext has counted records yet.")
            return
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(10, 0.45 * len(steps) + 1.0))
        y = range(len(steps))
        ins = [max(c["in"], 1) for _, c in steps]
        outs = [max(c["out"], 1) for _, c in steps]
        ax.barh(y, ins, color="#d9d9d9", label="in")
        ax.barh(y, outs, height=0.5, color="#55a868", label="out")
        for i, (_, c) in enumerate(steps):
            top = max(c["dropped"].items(), key=lambda kv: kv[1], default=None)
            why = f"  (−{c['in'] - c['out']}: most {top[0]})" if top and top[1] else ""
            ax.text(ins[i] * 1.15, i, f"{c['in']} → {c['out']}{why}", va="center", fontsize=8)
        ax.set_xscale("log")
        ax.set_xlim(right=max(ins) * 15)  # room for the labels right of the bars
        ax.set_yticks(list(y), [name for name, _ in steps])
        ax.invert_yaxis()
        ax.set_xlabel("records (log scale)")
        ax.legend(fontsize=8, loc="lower right")
        self.add("img", "funnel", png(fig), "funnel: records in and out of each stage")

    # --- per language pair -------------------------------------------------------------------

    def per_pair_table(self) -> None:
        self.add("h2", "Per language pair")
        counts = (read_json_or_none(self.dir(BITEXT) / "stats.json") or {}).get(
            "pairs_per_language_pair"
        ) or {}
        pr = read_json_or_none(self.dir(EVAL) / "mined_pr.json") or {}
        pairs = sorted(
            set(counts)
            | {p.parent.name for p in self.dir(MINE).glob("*/stats.json")}
            | {k for k, v in pr.items() if isinstance(v, dict) and not k.startswith("all")}
        )
        if not pairs:
            self.add("p", "No language pair was mined yet.")
            return
        labels = self._labels_per_pair()
        rows = []
        for p in pairs:
            good, bad = labels.get(p, (0, 0))
            m = pr.get(p) if isinstance(pr.get(p), dict) else {}
            rows.append(
                [
                    p,
                    self._unit_out(MINE.name, p, "candidates"),
                    self._unit_out(RULES.name, p, "pairs"),
                    f"{good} / {bad}",
                    counts.get(p, "–"),
                    self._pair_estimate(p),
                    f"{m['precision']:.3f}" if _num(m.get("precision")) else "–",
                    f"{m['recall']:.3f}" if _num(m.get("recall")) else "–",
                ]
            )
        head = ["pair", "mined", "after rules", "labelled GOOD / BAD", "in bitext"]
        head += ["estimated GOOD share", "measured precision", "measured recall"]
        self.add("table", head, rows)

    def _unit_out(self, stage: str, pair: str, unit: str) -> object:
        st = read_json_or_none(self.run / stage / pair / "stats.json") or {}
        c = st.get("counts", {}).get(unit)
        return c.get("out", "–") if isinstance(c, dict) else "–"

    def _labels_per_pair(self) -> dict[str, tuple[int, int]]:
        t, labels = self.labelled_table()
        if t is None or "src_lang" not in t.column_names or "trg_lang" not in t.column_names:
            return {}
        out: dict[str, list[int]] = {}
        for s, g, lab in zip(
            t.column("src_lang").to_pylist(), t.column("trg_lang").to_pylist(), labels
        ):
            out.setdefault(f"{s}-{g}", [0, 0])[0 if lab else 1] += 1
        return {k: (v[0], v[1]) for k, v in out.items()}

    def _pair_estimate(self, pair: str) -> str:
        summ = (
            read_json_or_none(self.dir(COMBINE) / "combined.json") if self.done(COMBINE) else None
        )
        if not summ:
            return "–"
        own = (summ.get("per_pair") or {}).get(pair.split("-")[0]) or {}
        if _num(own.get("precision")):
            thr = f" {own['threshold']:.3f}" if _num(own.get("threshold")) else ""
            return (
                f"{pct(own['precision'])} {interval(own.get('precision_ci'))} (own threshold{thr})"
            )
        why = f"; own: {own['unreachable']}" if own.get("unreachable") else ""
        g = summ.get("calibration") or summ.get("reachable") or {}
        return (
            f"{pct(g.get('precision'))} {interval(g.get('precision_ci'))} (global threshold{why})"
        )

    def done(self, stage) -> bool:
        return bool(self.manifests.get(stage.name))

    # --- feature distributions ---------------------------------------------------------------

    def labelled_table(self):
        """The scored rows of the labelled pairs and their labels (True: GOOD), or (None, [])."""
        scored = self.dir(COMBINE) / "scored.parquet"
        if not (self.done(COMBINE) and scored.is_file() and self.done(SAMPLE)):
            return None, []
        from labse_common.datafiles import read_parquet

        rows = [
            (int(r["sample_id"]), r["label"] == "GOOD")
            for r in self.sample_labels(self.dir(SAMPLE) / "sample.parquet")
            if r["label"] in ("GOOD", "BAD")
        ]
        t = read_parquet(scored)
        rows = [(i, g) for i, g in rows if 0 <= i < t.num_rows]
        return t.take([i for i, _ in rows]), [g for _, g in rows]

    def feature_distributions(self) -> None:
        self.add("h2", "Combined-score features: GOOD and BAD labelled pairs apart")
        summ = (
            read_json_or_none(self.dir(COMBINE) / "combined.json") if self.done(COMBINE) else None
        )
        names = ((summ or {}).get("model") or {}).get("features") or []
        t, labels = self.labelled_table() if names else (None, [])
        if t is None or not labels:
            self.add("p", "No combined score was fitted on labelled pairs in this run.")
            return
        from filters.bitext.combine import feature_matrix

        try:
            x = feature_matrix(t, names)
        except KeyError as e:  # a scored file written by another version of the filter
            self.add("p", f"The features cannot be recomputed from `combine/scored.parquet`: {e}.")
            return
        auc = {f.get("name"): f.get("auc") for f in (summ or {}).get("features", [])}
        self._feature_grid(x, labels, names, auc)
        n_good = sum(labels)
        self.add(
            "p",
            f"Each feature's values for the {n_good} GOOD (green) and {len(labels) - n_good} BAD "
            "(red) labelled pairs, each histogram scaled to its own total; a feature whose two "
            "colours overlap separates nothing on its own (its ROC AUC alone is in the title).",
        )

    def _feature_grid(self, x, labels: list[bool], names: list[str], auc: dict) -> None:
        import numpy as np

        good = np.asarray(labels, bool)
        cols = 4
        nrows = math.ceil(len(names) / cols)
        plt = pyplot()
        fig, axes = plt.subplots(nrows, cols, figsize=(12, 1.9 * nrows + 0.3), squeeze=False)
        for k, ax in enumerate(axes.flat):
            if k >= len(names):
                ax.axis("off")
                continue
            v = x[:, k]
            fin = np.isfinite(v)
            lo, hi = (float(v[fin].min()), float(v[fin].max())) if fin.any() else (0.0, 1.0)
            bins = np.linspace(lo, hi if hi > lo else lo + 1.0, 21)
            for sel, colour, name in ((good, "#55a868", "GOOD"), (~good, "#c44e52", "BAD")):
                vals = v[sel & fin]
                if len(vals):
                    w = np.full(len(vals), 1.0 / len(vals))
                    ax.hist(vals, bins=bins, weights=w, color=colour, alpha=0.55, label=name)
            if k == 0:
                ax.legend(fontsize=7)
            a = auc.get(names[k])
            ax.set_title(names[k] + (f"  (AUC {a:.2f})" if _num(a) else ""), fontsize=9)
            ax.tick_params(labelsize=7)
            ax.set_yticks([])
        fig.tight_layout()
        self.add("img", "features_good_bad", png(fig), "feature distributions, GOOD and BAD")
