"""The stages from the mined pairs to the bitext: the filters (rules, CDS, the labelled sample,
the combined score), the export, its evaluation and the report."""

from __future__ import annotations

from pathlib import Path

from labse_common.cli import EXIT_NEEDS_LABELS
from pipelines import demo_data
from pipelines.run.corpus_stages import DEMO, INPUTS, SENTENCES, has_source
from pipelines.run.declare import Command, Context, keys, stage
from pipelines.run.model_stages import MINE, TRAIN, VOCAB, encoder


@stage(
    "bitext hard rules on the mined pairs (kept, dropped with reasons; a Beam job per pair with "
    "beam.runner)",
    # Not "beam": its options reach the commands only on the engine, as arguments (a changed
    # command reruns the stage), and a local run does not depend on them.
    reads=keys("pair_rules"),
    inputs=(MINE,),
    outputs=lambda c: [f"{p}/kept.parquet" for p in c.pairs] + ["kept_all.parquet"],
    optional=True,
    resumable=True,  # one command per language pair: a rerun keeps the pairs already done
    engine=True,
)
def RULES(c: Context) -> list[Command]:
    def pair_args(p: str) -> list[object]:
        src, trg = p.split("-")
        return ["--src-lang", src, "--trg-lang", trg, "--output", c.d(RULES) / p, "--write-dropped"]

    mined = [c.d(MINE) / p / "mined.parquet" for p in c.pairs]
    kept = [c.d(RULES) / p / "kept.parquet" for p in c.pairs]
    if c.engine:
        # filters rules' folder per pair, row for row (pipelines.filter_pairs --same-as rules);
        # the concat reads and writes the run folder through Beam's file systems.
        return [
            *(
                c.py(
                    "pipelines.filter_pairs",
                    "--input",
                    m,
                    *pair_args(p),
                    "--same-as",
                    "rules",
                    *c.config_args,
                    "--overwrite",
                    *c.beam_args,
                )
                for p, m in zip(c.pairs, mined)
            ),
            c.py(
                "pipelines.pair_assembly",
                "concat",
                *kept,
                "--output",
                c.d(RULES) / "kept_all.parquet",
                "--overwrite",
                *c.beam_args,
            ),
        ]
    per_pair = [
        c.py("filters", "rules", "--pairs", m, *pair_args(p), *c.config_args)
        for p, m in zip(c.pairs, mined)
    ]
    # The CDS commands take one pair file.
    concat = c.py(
        "pipelines.e2e_tasks", "concat", *kept, "--output", c.d(RULES) / "kept_all.parquet"
    )
    return [*per_pair, concat]


def _cds_off(c: Context) -> str | None:
    if not has_source(c, "pairs"):
        return "no training pairs (sources.pairs) to be the CDS scorer's trusted side"
    return None


@stage(
    "CDS scorer: noisy candidates vs trusted pairs",
    reads=keys("cds", but=("calibrate",)),
    inputs=(RULES, INPUTS),
    optional_inputs=(VOCAB,),
    outputs=("stats.json",),
    optional=True,
    off=_cds_off,
)
def CDS_TRAIN(c: Context) -> list[Command]:
    vocab = c.d(VOCAB) if c.on.get(VOCAB.name) else c.init
    return [
        c.py(
            "filters",
            "cds-train",
            "--noisy",
            c.d(RULES) / "kept_all.parquet",
            "--trusted",
            c.d(INPUTS) / "trusted_pairs.tsv",
            "--vocab",
            vocab,
            "--output",
            c.d(CDS_TRAIN),
            "--overwrite",
            *c.config_args,
        )
    ]


@stage(
    "CDS scores of the rule-filtered pairs, one command per language pair (a Beam job per pair "
    "with beam.runner), then scored.parquet in the pairs' order",
    reads=("cds.device", "cds.threads", "cds.score_batch_size"),  # the rest: from the model
    inputs=(RULES, CDS_TRAIN),
    outputs=("scored.parquet", "stats.json"),
    optional=True,
    resumable=True,  # one command per language pair: a rerun keeps the pairs already scored
    engine=True,
)
def CDS_SCORE(c: Context) -> list[Command]:
    model = c.d(CDS_TRAIN)

    def pair_args(p: str) -> list[object]:
        return ["--output", c.d(CDS_SCORE) / p, "--overwrite", *c.config_args]

    kept = {p: c.d(RULES) / p / "kept.parquet" for p in c.pairs}
    if c.engine:  # filters cds-score's folder per pair, the same rows, columns and scores
        per_pair = [
            c.py(
                "pipelines.filter_pairs",
                "--input",
                kept[p],
                "--same-as",
                "cds-score",
                "--cds-model",
                model,
                "--allow-empty",  # as the local command: a pair the rules kept nothing of
                *pair_args(p),
                *c.beam_args,
            )
            for p in c.pairs
        ]
    else:
        per_pair = [
            # --allow-empty: a pair the rules kept nothing of scores as an empty file.
            c.py(
                "filters",
                "cds-score",
                "--model",
                model,
                "--pairs",
                kept[p],
                "--allow-empty",
                *pair_args(p),
            )
            for p in c.pairs
        ]
    # The pairs' scored files as one, in the rules' kept_all order, and the summed stats.json
    # (no --output: it always runs, never kept as a finished unit).
    beam = c.beam_args if c.engine else []  # its S3/GCS options, for a remote run folder
    return [
        *per_pair,
        c.py("pipelines.pair_assembly", "scored", c.d(CDS_SCORE), "--pairs", *c.pairs, *beam),
    ]


def _candidates(c: Context) -> Path:
    """The pairs the final filter judges: scored by CDS when it ran, else as the rules kept them."""
    if c.on.get(CDS_SCORE.name):
        return c.d(CDS_SCORE) / "scored.parquet"
    return c.d(RULES) / "kept_all.parquet"


def _label_from_eval(c: Context) -> bool:
    return c.sources["label_from"] == "eval"


@stage(
    "sample of the MINED pairs to label (language pair x margin strata); with "
    "sources.label_from=eval labelled from half 0 of the eval alignment",
    reads=("combine.sample_size", "combine.margin_buckets", "combine.seed", "sources.label_from"),
    inputs=(RULES, INPUTS),
    optional_inputs=(CDS_SCORE,),
    outputs=("sample.tsv", "sample.parquet", "stats.json"),
)
def SAMPLE(c: Context) -> list[Command]:
    # Half 0 of a stable split of the source sentences labels the sample; EVAL measures half 1.
    planted = ["--planted", c.d(INPUTS) / "gold.tsv", "--half", 0] if _label_from_eval(c) else []
    return [
        c.py(
            "filters",
            "sample",
            "--pairs",
            _candidates(c),
            *planted,
            "--output",
            c.d(SAMPLE),
            "--overwrite",
            *c.config_args,
        )
    ]


def person_labels(out: Path) -> Path:
    """The file a person labels (``python -m filters label``); the run waits for it."""
    return out / "labels.tsv"


def _earlier_labels(c: Context, copy: bool = False) -> str | None:
    """combine.labels, made absolute; on object storage its URL (the labels stage reads it
    there), or with ``copy`` this machine's copy of it (what the cache key fingerprints)."""
    from labse_common.filesystems import is_remote
    from labse_common.remote_cache import local_file

    earlier = c.values["combine"]["labels"]
    if not earlier or not is_remote(earlier):
        return str(Path(earlier).resolve()) if earlier else None
    return str(local_file(earlier, "combine.labels")) if copy else earlier


def _label_files(c: Context) -> list[str]:
    files = [str(person_labels(c.out))] if person_labels(c.out).is_file() else []
    earlier = _earlier_labels(c, copy=True)
    return files + ([earlier] if earlier else [])


@stage(
    "the person's labels (OUTPUT/labels.tsv, prefilled from combine.labels): the run stops "
    f"with exit status {EXIT_NEEDS_LABELS} until enough pairs are labelled",
    reads=("combine.labels", "combine.min_labelled", "combine.min_per_label"),
    inputs=(SAMPLE, RULES),
    optional_inputs=(CDS_SCORE,),
    files=_label_files,
    outputs=("labels.tsv", "stats.json"),
    off=lambda c: (
        "sources.label_from is eval (labelled from the alignment)" if _label_from_eval(c) else None
    ),
)
def LABELS(c: Context) -> list[Command]:
    earlier = _earlier_labels(c)
    comb = c.values["combine"]
    return [
        c.py(
            "pipelines.e2e_tasks",
            "labels",
            "--sample",
            c.d(SAMPLE) / "sample.parquet",
            "--candidates",
            _candidates(c),
            "--file",
            person_labels(c.out),
            *(["--earlier", earlier] if earlier else []),
            "--min-labelled",
            comb["min_labelled"],
            "--min-per-label",
            comb["min_per_label"],
            "--output",
            c.d(LABELS),
        )
    ]


@stage(
    "combined pair score fitted on the labelled sample; threshold for combine.target GOOD with its interval",
    reads=keys("combine", but=("sample_size", "margin_buckets", "labels", "label_guideline")),
    inputs=(SAMPLE, RULES),
    optional_inputs=(CDS_SCORE, LABELS),
    outputs=("scored.parquet", "model.json", "combined.json", "stats.json"),
)
def COMBINE(c: Context) -> list[Command]:
    # Not optional: an unreachable target stops the run here under combine.on_unreachable=stop.
    labels = c.d(SAMPLE) / "sample.tsv" if _label_from_eval(c) else c.d(LABELS) / "labels.tsv"
    return [
        c.py(
            "filters",
            "combine",
            "--pairs",
            _candidates(c),
            "--labels",
            labels,
            "--output",
            c.d(COMBINE),
            "--overwrite",
            *c.config_args,
        )
    ]


@stage(
    "the final NMT-ready bitext (Parquet, TSV.gz, Moses, Hugging Face folder), every dropped pair "
    "with its reason: one export per language pair (a Beam job per pair with beam.runner), then "
    "the pairs' parts as one folder",
    reads=("run.min_margin",),
    inputs=(MINE,),
    optional_inputs=(RULES, COMBINE),
    outputs=("bitext.parquet", "bitext.tsv.gz", "rejected.parquet", "stats.json", "hf/README.md"),
    resumable=True,  # one command per language pair: a rerun keeps the pairs already exported
    engine=True,
)
def BITEXT(c: Context) -> list[Command]:
    combined = ["--combined", c.d(COMBINE)] if c.on.get(COMBINE.name) else []
    rules = ["--rules", c.d(RULES)] if c.on.get(RULES.name) else []
    args = ["--mined", c.d(MINE), *combined, *rules, "--min-margin", c.cfg["run"]["min_margin"]]

    def pair_args(p: str) -> list[object]:
        return ["--pair", p, "--output", c.d(BITEXT) / "_parts" / p, "--overwrite"]

    if c.engine:  # the same part per pair, its mined file decided by a Beam worker
        per_pair = [c.py("pipelines.export", *args, *pair_args(p), *c.beam_args) for p in c.pairs]
    else:
        per_pair = [c.py("filters", "export", *args, *pair_args(p)) for p in c.pairs]
    # The parts as the folder filters export writes, the parts removed (no --output: it always
    # runs, never kept as a finished unit).
    beam = c.beam_args if c.engine else []  # its S3/GCS options, for a remote run folder
    return [
        *per_pair,
        c.py("pipelines.pair_assembly", "bitext", c.d(BITEXT), "--pairs", *c.pairs, *beam),
    ]


def _eval_off(c: Context) -> str | None:
    if not has_source(c, "eval"):
        return "no known alignment (sources.eval is empty)"
    return None


@stage(
    "precision/recall of the bitext against sources.eval; the demo's retrieval on held-out pairs",
    reads=("eval.scoring", "eval.k", "eval.langs", "sources.label_from"),
    inputs=(INPUTS, MINE, BITEXT, SENTENCES),
    optional_inputs=(TRAIN, DEMO),
    outputs=("mined_pr.json", "miner_pr.json"),
    off=_eval_off,
)
def EVAL(c: Context) -> list[Command]:
    half = ["--half", 1] if _label_from_eval(c) else ["--every-pair"]
    cmds = [
        c.py(
            "pipelines.e2e_tasks",
            "score",
            "--bitext",
            c.d(BITEXT),
            "--gold",
            c.d(INPUTS) / "gold.tsv",
            "--sentences",
            c.d(SENTENCES) / "mine",
            "--mined",
            c.d(MINE),
            *half,
            "--output",
            c.d(EVAL),
        )
    ]
    if c.demo is not None:  # the demo's held-out pairs: Tatoeba-style retrieval accuracy
        cmds.insert(
            0,
            c.py(
                "mining",
                "eval",
                "tatoeba",
                "--model",
                encoder(c),
                "--data",
                c.d(DEMO) / demo_data.HELDOUT,
                "--prefix",
                "heldout",
                "--output",
                c.d(EVAL) / "tatoeba",
                *c.config_args,
            ),
        )
    return cmds


# Every stage before it reaches EVAL or BITEXT: a stage that reruns reruns the report too.
@stage(
    "report.md + self-contained report.html",
    reads=("run.report_examples",),
    inputs=(BITEXT,),
    optional_inputs=(EVAL,),
    outputs=("report.md", "report.html"),
)
def REPORT(c: Context) -> list[Command]:
    return [
        c.py(
            "pipelines.report",
            "--run",
            c.out,
            "--output",
            c.d(REPORT),
            "--examples",
            c.cfg["run"]["report_examples"],
        )
    ]
