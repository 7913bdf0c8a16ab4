"""The run report: ``report.md`` and a self-contained ``report.html`` (plots inlined as PNG).

    python -m pipelines.report --run RUN_DIR --output RUN_DIR/report

Reads what the stages left in a run folder of ``python -m pipelines.run``: the plan
(``_run.json``), every stage's manifest (time, peak memory) and ``stats.json`` (records in, out
and dropped per reason), the vocabulary statistics, the training metrics, the mined margins, the
CDS calibration, the evaluation reports and the final bitext. A stage that did not run gets a
section saying so and why.
"""

from __future__ import annotations

import argparse
import base64
import html
import io
import json
import logging
import time
from pathlib import Path

from labse_common.cli import add_log_level_option, run_main
from labse_common.datafiles import read_json, read_parquet, read_text
from labse_common.errors import InputError
from labse_common.logs import setup_logging
from pipelines.run.bitext_stages import BITEXT, COMBINE, EVAL, LABELS, REPORT, SAMPLE
from pipelines.run.corpus_stages import SENTENCES
from pipelines.run.declare import Stage, manifest_path
from pipelines.run.model_stages import MINE, PRETRAIN, TRAIN, VOCAB

log = logging.getLogger("pipelines.report")

Block = tuple  # ("h1"|"h2"|"p"|"pre", text) | ("table", header, rows) | ("img", name, png, alt)


def _read_json(p: Path) -> dict | None:
    """A JSON object the report can use, or None: a missing or damaged file leaves its section
    saying so instead of failing the report."""
    if not p.is_file():
        return None
    try:
        return read_json(p)
    except InputError as e:
        log.warning("%s", e)
        return None


def _metrics(p: Path) -> list[dict]:
    if not p.is_file():
        return []
    try:
        text = read_text(p)
    except InputError as e:
        log.warning("%s", e)
        return []
    rows = []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:  # a line cut by a killed writer
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def _checked_counts(report: dict, path: Path) -> dict:
    """``report`` when every unit of its counts has numbers in and out and a mapping of dropped
    reasons to numbers (what every stage writes); else an InputError naming the file and the
    unit, instead of a KeyError deep in a table of the report."""
    counts = report.get("counts", {})
    if not isinstance(counts, dict):
        raise InputError(path, f"'counts' is {type(counts).__name__}, not a mapping of units")
    for unit, c in counts.items():
        problem = None
        if not isinstance(c, dict):
            problem = f"is {type(c).__name__}, not a mapping of in, out and dropped"
        else:
            lacking = [k for k in ("in", "out", "dropped") if k not in c]
            if lacking:
                problem = f"has no {', '.join(map(repr, lacking))} (a unit counts in, out and dropped per reason)"
            elif not all(_count(c[k]) for k in ("in", "out")):
                problem = "has in/out that are not counts"
            elif not (isinstance(c["dropped"], dict) and all(map(_count, c["dropped"].values()))):
                problem = "has 'dropped' that is not a mapping of reasons to counts"
        if problem:
            raise InputError(path, f"unit {unit!r} {problem}")
    return report


def _count(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def stage_stats(stage_dir: Path) -> dict | None:
    """A stage's stats.json; a stage that writes one per part (mining: one per language pair)
    gets their counts summed."""
    top = _read_json(stage_dir / "stats.json")
    if top is not None:
        return _checked_counts(top, stage_dir / "stats.json")
    parts = [
        _checked_counts(r, p)
        for p in sorted(stage_dir.glob("*/stats.json"))
        if (r := _read_json(p))
    ]
    if not parts:
        return None
    units: dict[str, dict] = {}
    for r in parts:
        for unit, c in r.get("counts", {}).items():
            u = units.setdefault(unit, {"in": 0, "out": 0, "dropped": {}})
            u["in"] += c["in"]
            u["out"] += c["out"]
            for k, v in c["dropped"].items():
                u["dropped"][k] = u["dropped"].get(k, 0) + v
    return {"stage": stage_dir.name, "counts": units, "parts": len(parts)}


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buf.getvalue()


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


class Report:
    def __init__(self, run: Path) -> None:
        self.run = run
        self.blocks: list[Block] = []
        self.plan = {p["stage"]: p for p in (_read_json(run / "_run.json") or {}).get("plan", [])}
        self.manifests = {s: _read_json(manifest_path(run, s)) for s in self.plan}

    def add(self, *block) -> None:
        self.blocks.append(block)

    def dir(self, stage: Stage) -> Path:
        return self.run / stage.name

    def status(self, stage: Stage | str) -> tuple[bool, str]:
        """(has output, sentence for the report)."""
        stage = stage.name if isinstance(stage, Stage) else stage
        p = self.plan.get(stage)
        if self.manifests.get(stage):
            return True, ""
        if p is None:
            return False, f"Stage `{stage}` is not part of this run."
        return False, f"Stage `{stage}` did not run: {p['reason']}."

    # --- sections ----------------------------------------------------------------------------

    def header(self) -> None:
        info = _read_json(self.run / "_run.json") or {}
        synthetic = info.get("data") == "synthetic"
        self.add("h1", "LaBSE bitext mining run")
        self.add(
            "p", f"Run folder `{self.run}`, report written {time.strftime('%Y-%m-%d %H:%M:%S')}."
        )
        if synthetic:
            self.add(
                "p",
                "**Data: SYNTHETIC.** No `--data` was given, so every stage ran on the embedded "
                "synthetic sample written by `pipelines/synthetic.py` (template sentences in "
                "English, German, French and Spanish; synthetic WET/WARC pages and Wikipedia dumps). "
                "The figures below describe that sample, not real web text.",
            )
        else:
            self.add("p", f"Data: `{info.get('data')}` (real inputs).")
        b = self.dir(BITEXT)
        if (b / "bitext.tsv.gz").is_file():
            st = _read_json(b / "stats.json") or {}
            n = st.get("counts", {}).get("pairs", {}).get("out", 0)
            self.add(
                "p",
                f"Final bitext: **{n} pairs** in `{b / 'bitext.tsv.gz'}` (also `bitext.parquet` "
                f"and Moses files `bitext.SRC-TRG.LANG`); selection: {st.get('source', '?')}.",
            )

    def stages(self) -> None:
        self.add("h2", "Stages: time, peak memory, records")
        rows = []
        for stage, p in self.plan.items():
            m = self.manifests.get(stage)
            st = stage_stats(self.run / stage) if m else None
            io_ = "; ".join(
                f"{u} {c['in']}→{c['out']}" for u, c in (st or {}).get("counts", {}).items()
            )
            if m:
                state = (
                    "ran"
                    if stage in (_read_json(self.run / "_run.json") or {}).get("ran", [])
                    else "cached"
                )
                rows.append(
                    [stage, state, f"{m['seconds']:.1f}", f"{m['peak_rss_mb']:.0f}", io_ or "–"]
                )
            elif stage == REPORT.name:
                rows.append([stage, "running", "–", "–", "this report"])
            else:
                rows.append([stage, p["action"], "–", "–", p["reason"]])
        self.add("table", ["stage", "status", "seconds", "peak RSS (MB)", "in → out / note"], rows)
        done = [(s, m) for s, m in self.manifests.items() if m]
        if done:
            plt = _plt()
            fig, ax = plt.subplots(1, 2, figsize=(10, 0.35 * len(done) + 1.2))
            names = [s for s, _ in done]
            ax[0].barh(names, [m["seconds"] for _, m in done], color="#4c72b0")
            ax[0].set_xlabel("seconds")
            ax[1].barh(names, [m["peak_rss_mb"] for _, m in done], color="#dd8452")
            ax[1].set_xlabel("peak RSS of the stage's processes (MB)")
            for a in ax:
                a.invert_yaxis()
            self.add("img", "stages_time_memory", _png(fig), "time and peak memory per stage")

    def drops(self) -> None:
        self.add("h2", "Records in, out and dropped (with reasons)")
        bars, rows = [], []
        for stage in self.plan:
            st = stage_stats(self.run / stage) if self.manifests.get(stage) else None
            for unit, c in (st or {}).get("counts", {}).items():
                reasons = ", ".join(
                    f"{k} {v}" for k, v in sorted(c["dropped"].items(), key=lambda kv: -kv[1])
                )
                ok = c["in"] == c["out"] + sum(c["dropped"].values())
                rows.append(
                    [stage, unit, c["in"], c["out"], reasons or "–", "yes" if ok else "**NO**"]
                )
                if c["in"]:
                    bars.append((f"{stage}: {unit}", c))
        self.add(
            "table", ["stage", "unit", "in", "out", "dropped (reason count)", "balanced"], rows
        )
        if bars:
            plt = _plt()
            fig, ax = plt.subplots(figsize=(10, 0.32 * len(bars) + 1.5))
            reasons = sorted({r for _, c in bars for r in c["dropped"]})
            cmap = plt.get_cmap("tab20")
            labels = [b[0] for b in bars]
            left = [c["out"] / c["in"] for _, c in bars]
            ax.barh(labels, left, color="#55a868", label="out")
            for i, r in enumerate(reasons):
                w = [c["dropped"].get(r, 0) / c["in"] for _, c in bars]
                ax.barh(labels, w, left=left, color=cmap(i % 20), label=r)
                left = [a + b for a, b in zip(left, w)]
            ax.set_xlabel("share of the records that came in")
            ax.invert_yaxis()
            ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
            self.add("img", "drops", _png(fig), "out and dropped share per stage and unit")

    def languages(self) -> None:
        self.add("h2", "Sentences per language")
        st = _read_json(self.dir(SENTENCES) / "stats.json")
        if not st:
            self.add("p", self.status(SENTENCES)[1])
            return
        mine, voc = st.get("sentences_per_language", {}), st.get("vocab_sentences_per_language", {})
        langs = sorted(set(mine) | set(voc), key=lambda k: -voc.get(k, mine.get(k, 0)))
        self.add(
            "table",
            ["language", "cleaned (mined)", "+ training sentences (vocabulary)"],
            [[lang, mine.get(lang, 0), voc.get(lang, 0)] for lang in langs],
        )
        plt = _plt()
        top = langs[:30]
        fig, ax = plt.subplots(figsize=(10, 3))
        ax.bar(top, [mine.get(k, 0) for k in top], label="cleaned corpus (mined)")
        ax.set_yscale("log")
        ax.set_ylabel("sentences")
        ax.legend()
        self.add("img", "languages", _png(fig), "sentences per language")

    def vocab(self) -> None:
        self.add("h2", "Vocabulary")
        vs = _read_json(self.dir(VOCAB) / "vocab_stats.json")
        if not vs:
            self.add("p", self.status(VOCAB)[1])
            return
        self.add(
            "p",
            f"{vs.get('vocab_size')} wordpieces learned (requested {vs.get('requested_vocab_size')}); "
            f"language smoothing α = {vs.get('smoothing')}, frequency threshold {vs.get('threshold')}.",
        )
        rows = []
        for lang, v in sorted(
            vs.get("languages", {}).items(), key=lambda kv: -kv[1].get("sentences", 0)
        ):
            h = v.get("heldout") or {}
            rows.append(
                [
                    lang,
                    v.get("sentences"),
                    v.get("word_types"),
                    f"{v.get('raw_share', 0):.3f}",
                    f"{v.get('smoothed_share', 0):.3f}",
                    f"{h.get('unk_rate', 0):.4f}",
                    f"{h.get('wordpieces_per_word', 0):.2f}",
                ]
            )
        self.add(
            "table",
            [
                "language",
                "sentences",
                "word types",
                "raw share",
                "smoothed share",
                "held-out unk rate",
                "wordpieces/word",
            ],
            rows,
        )

    def curves(self, stage: Stage, title: str) -> None:
        self.add("h2", title)
        rows = _metrics(self.dir(stage) / "metrics.jsonl")
        has, why = self.status(stage)
        if not has:
            self.add("p", why)
            return
        rows = [r for r in rows if "step" in r and "loss" in r]
        if not rows:
            self.add("p", f"`{stage.name}` wrote no metrics.jsonl with step/loss rows.")
            return
        keys = [
            k
            for k in ("loss", "accuracy", "mlm_loss", "tlm_loss", "lr")
            if any(k in r for r in rows)
        ]
        plt = _plt()
        fig, axes = plt.subplots(1, len(keys), figsize=(3.4 * len(keys), 2.8))
        for ax, k in zip(axes if len(keys) > 1 else [axes], keys):
            pts = [(r["step"], r[k]) for r in rows if k in r]
            ax.plot([p[0] for p in pts], [p[1] for p in pts])
            ax.set_title(k)
            ax.set_xlabel("step")
        self.add("img", f"{stage.name}_curves", _png(fig), f"{stage.name} curves")
        last = rows[-1]
        self.add(
            "p",
            f"Last logged step {last['step']}: "
            + ", ".join(f"{k} {last[k]:.4g}" for k in keys if isinstance(last.get(k), (int, float)))
            + ".",
        )

    def margins(self) -> None:
        self.add("h2", "Mining: margin scores")
        mined = (
            sorted(self.dir(MINE).glob("*/mined.parquet")) if self.manifests.get(MINE.name) else []
        )
        if not mined:
            self.add("p", self.status(MINE)[1])
            return
        cfg = _read_json(self.dir(BITEXT) / "stats.json") or {}
        plt = _plt()
        fig, ax = plt.subplots(figsize=(8, 3))
        rows = []
        for f in mined:
            m = read_parquet(f, ["margin"], required=["margin"]).column("margin").to_pylist()
            ax.hist(m, bins=40, histtype="step", label=f.parent.name)
            st = (_read_json(f.parent / "stats.json") or {}).get("counts", {})
            cand = st.get("candidates", {})
            rows.append(
                [
                    f.parent.name,
                    len(m),
                    f"{min(m):.3f}" if m else "–",
                    f"{max(m):.3f}" if m else "–",
                    ", ".join(f"{k} {v}" for k, v in cand.get("dropped", {}).items()) or "–",
                ]
            )
        src = str(cfg.get("source", ""))
        if "margin >=" in src:
            ax.axvline(float(src.split(">=")[1]), color="k", ls="--", label=src.split(" + ")[-1])
        ax.set_xlabel("margin")
        ax.set_ylabel("pairs")
        ax.legend(fontsize=8)
        self.add("img", "margins", _png(fig), "margin histogram")
        self.add(
            "table", ["pair", "mined pairs", "min margin", "max margin", "candidates dropped"], rows
        )

    def final_filter(self) -> None:
        self.add(
            "h2",
            "Final filter: combined pair score, calibrated on a labelled sample of the mined pairs",
        )
        has, why = self.status(COMBINE)
        if not has:
            src = (_read_json(self.dir(BITEXT) / "stats.json") or {}).get(
                "source", "the mining margin"
            )
            self.add("p", f"{why} The final bitext was selected by: {src}.")
            return
        d = self.dir(COMBINE)
        summ = _read_json(d / "combined.json") or {}
        cal, reach = summ.get("calibration"), summ.get("reachable") or {}
        target = summ.get("target", 0.8)
        if not summ.get("target_reached", cal is not None):
            self.add(
                "p",
                f"**TARGET NOT REACHED.** {summ.get('message', '')} The run went on "
                "(combine.on_unreachable=continue) and the bitext holds the pairs at that best "
                "threshold: expect their GOOD share below the target.",
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
        self._per_pair(summ, prec, ci)
        self._eval_vs_interval(ci)

    def _labelled(self, scored: Path, sample: Path) -> tuple[list, list, list[dict]]:
        t = read_parquet(scored, required=["combined_score"])
        person = self.dir(LABELS) / "labels.tsv"
        if person.is_file():  # a person labelled the sample: rows matched to the pairs by text
            from filters.bitext.sample import read_labels

            smp = read_labels(person)[0].select(["sample_id", "label"]).to_pylist()
        else:
            smp = read_parquet(
                sample, ["sample_id", "label"], required=["sample_id", "label"]
            ).to_pylist()
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
        plt = _plt()
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
            _png(fig),
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

    def _per_pair(self, summ: dict, prec, ci) -> None:
        counts = (_read_json(self.dir(BITEXT) / "stats.json") or {}).get(
            "pairs_per_language_pair", {}
        )
        per = summ.get("per_pair") or {}
        rows = []
        for pair, n in sorted(counts.items()):
            own = per.get(pair.split("-")[0]) or {}
            if "precision" in own:
                est = f"{own['precision']:.1%} [{own['precision_ci'][0]:.1%}, {own['precision_ci'][1]:.1%}] (own threshold {own['threshold']:.3f})"
            else:
                why = f"; own: {own['unreachable']}" if own.get("unreachable") else ""
                est = (
                    "–"
                    if prec is None
                    else f"{prec:.1%} [{ci[0]:.1%}, {ci[1]:.1%}] (global threshold{why})"
                )
            rows.append([pair, n, est])
        if rows:
            self.add(
                "p",
                "Per language pair: pairs kept and their estimated GOOD share (labelled sample, interval):",
            )
            self.add("table", ["pair", "kept", "estimated GOOD share"], rows)

    def _eval_vs_interval(self, ci) -> None:
        pr = _read_json(self.dir(EVAL) / "mined_pr.json") or {}
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
        pr = _read_json(self.dir(EVAL) / "mined_pr.json") or {}
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
        for md in sorted((self.dir(EVAL) / "tatoeba").glob("*.md")):
            self.add(
                "p", "Retrieval on the held-out pairs (Tatoeba-style accuracy, both directions):"
            )
            self.add("raw_md", md.read_text(encoding="utf-8"))

    def examples(self, n: int) -> None:
        self.add("h2", "First kept and first rejected pairs")
        b = self.dir(BITEXT)
        if not self.manifests.get(BITEXT.name):
            self.add("p", self.status(BITEXT)[1])
            return
        kept = read_parquet(b / "bitext.parquet").slice(0, n).to_pylist()
        rej = read_parquet(b / "rejected.parquet").slice(0, n).to_pylist()

        def cds(r: dict) -> str:
            v = r.get("cds_score")
            return "–" if v is None else f"{v:.3f}"

        self.add(
            "table",
            ["kept: margin", "CDS score", "source", "target"],
            [[f"{r['margin']:.3f}", cds(r), r["src"], r["trg"]] for r in kept if r.get("src")],
        )
        self.add(
            "table",
            ["rejected: margin", "CDS score", "reason", "source", "target"],
            [
                [
                    f"{r.get('margin', 0):.3f}",
                    cds(r),
                    r.get("reason", ""),
                    r.get("src", ""),
                    r.get("trg", ""),
                ]
                for r in rej
            ],
        )

    def build(self, n_examples: int) -> None:
        self.header()
        self.stages()
        self.drops()
        self.languages()
        self.vocab()
        self.curves(PRETRAIN, "Pretraining (MLM + TLM)")
        self.curves(TRAIN, "Dual-encoder training")
        self.margins()
        self.final_filter()
        self.evaluation()
        self.examples(n_examples)

    # --- rendering -----------------------------------------------------------------------------

    def markdown(self, img_dir: Path) -> str:
        out = []
        for b in self.blocks:
            kind = b[0]
            if kind in ("h1", "h2"):
                out.append(("# " if kind == "h1" else "## ") + b[1])
            elif kind == "p":
                out.append(b[1])
            elif kind == "pre":
                out.append("```\n" + b[1] + "\n```")
            elif kind == "raw_md":
                out.append(b[1].strip())
            elif kind == "table":
                rows = [_md_row(b[1]), "|" + "---|" * len(b[1]), *[_md_row(r) for r in b[2]]]
                out.append("\n".join(rows))
            elif kind == "img":
                img_dir.mkdir(parents=True, exist_ok=True)
                (img_dir / f"{b[1]}.png").write_bytes(b[2])
                out.append(f"![{b[3]}]({img_dir.name}/{b[1]}.png)")
        return "\n\n".join(out) + "\n"

    def html(self) -> str:
        import re

        def inline(t: str) -> str:
            t = html.escape(t)
            t = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", t)
            return re.sub(r"`(.+?)`", r"<code>\1</code>", t)

        parts = []
        for b in self.blocks:
            kind = b[0]
            if kind in ("h1", "h2"):
                parts.append(f"<{kind}>{inline(b[1])}</{kind}>")
            elif kind == "p":
                parts.append(f"<p>{inline(b[1])}</p>")
            elif kind == "pre":
                parts.append(f"<pre>{html.escape(b[1])}</pre>")
            elif kind == "raw_md":
                parts.append(_md_table_html(b[1], inline))
            elif kind == "table":
                head = "".join(f"<th>{inline(str(c))}</th>" for c in b[1])
                body = "".join(
                    "<tr>" + "".join(f"<td>{inline(str(c))}</td>" for c in r) + "</tr>"
                    for r in b[2]
                )
                parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
            elif kind == "img":
                data = base64.b64encode(b[2]).decode()
                parts.append(f'<img alt="{html.escape(b[3])}" src="data:image/png;base64,{data}">')
        style = (
            "body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
            "table{border-collapse:collapse;margin:1em 0;font-size:13px}"
            "td,th{border:1px solid #ccc;padding:3px 7px;text-align:left}th{background:#f3f3f3}"
            "img{max-width:100%}code{background:#f3f3f3;padding:0 3px}"
        )
        return (
            f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>LaBSE run report</title>'
            f"<style>{style}</style></head><body>{''.join(parts)}</body></html>\n"
        )


def _md_row(cells: list) -> str:
    return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |"


def _md_table_html(md: str, inline) -> str:
    """Markdown from the evaluation CLI: its tables become HTML tables, other lines paragraphs."""
    out, table = [], []
    for line in md.splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(set(c) <= set("-: ") for c in cells):
                table.append(cells)
            continue
        if table:
            head = "".join(f"<th>{inline(c)}</th>" for c in table[0])
            body = "".join(
                "<tr>" + "".join(f"<td>{inline(c)}</td>" for c in r) + "</tr>" for r in table[1:]
            )
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
            table = []
        if line.strip():
            out.append(f"<p>{inline(line.lstrip('# '))}</p>")
    return "".join(out)


def write(run: Path, out: Path, n_examples: int = 5) -> tuple[Path, Path]:
    rep = Report(run)
    rep.build(n_examples)
    out.mkdir(parents=True, exist_ok=True)
    md = out / "report.md"
    md.write_text(rep.markdown(out / "figures"), encoding="utf-8")
    page = out / "report.html"
    page.write_text(rep.html(), encoding="utf-8")
    return md, page


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m pipelines.report",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--run", required=True, help="run folder of python -m pipelines.run")
    ap.add_argument("--output", required=True, help="folder for report.md, report.html, figures/")
    ap.add_argument("--examples", type=int, default=5, help="kept and rejected pairs shown (5)")
    add_log_level_option(ap)
    args = ap.parse_args(argv)
    setup_logging(args.log_level)

    def body() -> int:
        run = Path(args.run)
        if not (run / "_run.json").is_file():
            raise InputError(
                run, "not a run folder of python -m pipelines.run (no _run.json)", "--run"
            )
        # The plan is what every section reads: an empty or damaged one is a wrong --run, not a
        # report of stages that "are not part of this run".
        read_json(run / "_run.json", "--run")
        md, page = write(run, Path(args.output), args.examples)
        log.info("report: %s, %s", md, page)
        return 0

    return run_main(body, log)


if __name__ == "__main__":
    raise SystemExit(main())
