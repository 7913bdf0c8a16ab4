"""The run report: ``report.md`` and a self-contained ``report.html`` (plots inlined as PNG).

    python -m pipelines.report --run RUN_DIR --output RUN_DIR/report

Reads what the stages left in a run folder of ``python -m pipelines.run``: the plan
(``_run.json``), every stage's manifest (time, peak memory) and ``stats.json`` (records in, out
and dropped per reason), the vocabulary statistics, the training metrics, the mined margins, the
CDS calibration, the evaluation reports and the final bitext. A stage that did not run gets a
section saying so and why.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from labse_common.cli import add_log_level_option, command_parser, doc_details, exit_with, run_main
from labse_common.datafiles import read_json, read_parquet
from labse_common.errors import InputError
from labse_common.logs import setup_logging
from pipelines.report_data import png, pyplot, read_json_or_none, read_metrics, stage_stats
from pipelines.report_render import html_page, markdown
from pipelines.report_summary import SummarySections
from pipelines.run.bitext_stages import BITEXT, REPORT
from pipelines.run.corpus_stages import SENTENCES
from pipelines.run.declare import Stage
from pipelines.run.model_stages import MINE, PRETRAIN, TRAIN, VOCAB

log = logging.getLogger("pipelines.report")


class Report(SummarySections):
    """The report's sections, in order (:meth:`build`), as blocks to render."""

    def header(self) -> None:
        self.add("h1", "LaBSE bitext mining run")
        self.add(
            "p", f"Run folder `{self.run}`, report written {time.strftime('%Y-%m-%d %H:%M:%S')}."
        )

    def data_notes(self) -> None:
        self.add("h2", "Data and outputs")
        info = read_json_or_none(self.run / "_run.json") or {}
        if info.get("data") == "synthetic":
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
            st = read_json_or_none(b / "stats.json") or {}
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
                    if stage in (read_json_or_none(self.run / "_run.json") or {}).get("ran", [])
                    else "cached"
                )
                if m.get("resumed_shards"):  # shards an earlier, killed attempt finished
                    state += f" ({m['resumed_shards']} shards resumed)"
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
            plt = pyplot()
            fig, ax = plt.subplots(1, 2, figsize=(10, 0.35 * len(done) + 1.2))
            names = [s for s, _ in done]
            ax[0].barh(names, [m["seconds"] for _, m in done], color="#4c72b0")
            ax[0].set_xlabel("seconds")
            ax[1].barh(names, [m["peak_rss_mb"] for _, m in done], color="#dd8452")
            ax[1].set_xlabel("peak RSS of the stage's processes (MB)")
            for a in ax:
                a.invert_yaxis()
            self.add("img", "stages_time_memory", png(fig), "time and peak memory per stage")

    def drops(self) -> None:
        # The funnel at the top pictures the path to the bitext; this is every unit in detail.
        self.add("h2", "Records in, out and dropped per stage and unit (with reasons)")
        rows = []
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
        self.add(
            "table", ["stage", "unit", "in", "out", "dropped (reason count)", "balanced"], rows
        )

    def languages(self) -> None:
        self.add("h2", "Sentences per language")
        st = read_json_or_none(self.dir(SENTENCES) / "stats.json")
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
        plt = pyplot()
        top = langs[:30]
        fig, ax = plt.subplots(figsize=(10, 3))
        ax.bar(top, [mine.get(k, 0) for k in top], label="cleaned corpus (mined)")
        ax.set_yscale("log")
        ax.set_ylabel("sentences")
        ax.legend()
        self.add("img", "languages", png(fig), "sentences per language")

    def vocab(self) -> None:
        self.add("h2", "Vocabulary")
        vs = read_json_or_none(self.dir(VOCAB) / "vocab_stats.json")
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
        rows = read_metrics(self.dir(stage) / "metrics.jsonl")
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
        plt = pyplot()
        fig, axes = plt.subplots(1, len(keys), figsize=(3.4 * len(keys), 2.8))
        for ax, k in zip(axes if len(keys) > 1 else [axes], keys):
            pts = [(r["step"], r[k]) for r in rows if k in r]
            ax.plot([p[0] for p in pts], [p[1] for p in pts])
            ax.set_title(k)
            ax.set_xlabel("step")
        self.add("img", f"{stage.name}_curves", png(fig), f"{stage.name} curves")
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
        cfg = read_json_or_none(self.dir(BITEXT) / "stats.json") or {}
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(8, 3))
        rows = []
        for f in mined:
            m = read_parquet(f, ["margin"], required=["margin"]).column("margin").to_pylist()
            ax.hist(m, bins=40, histtype="step", label=f.parent.name)
            st = (read_json_or_none(f.parent / "stats.json") or {}).get("counts", {})
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
        self.add("img", "margins", png(fig), "margin histogram")
        self.add(
            "table", ["pair", "mined pairs", "min margin", "max margin", "candidates dropped"], rows
        )

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
        self.answer_first()
        self.data_notes()
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


def write(run: Path, out: Path, n_examples: int = 5) -> tuple[Path, Path]:
    rep = Report(run)
    rep.build(n_examples)
    out.mkdir(parents=True, exist_ok=True)
    md = out / "report.md"
    md.write_text(markdown(rep.blocks, out / "figures"), encoding="utf-8")
    page = out / "report.html"
    page.write_text(html_page(rep.blocks), encoding="utf-8")
    return md, page


def main(argv: list[str] | None = None) -> int:
    ap = command_parser(
        "python -m pipelines.report",
        "Write the report of a run folder: report.md and a self-contained report.html with its plots.",
        doc_details(__doc__),
        examples=[
            "python -m pipelines.report --run runs/demo --output runs/demo/report",
        ],
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
    exit_with(main)
