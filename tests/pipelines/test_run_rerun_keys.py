"""A changed config key reruns exactly the stages that read it and those downstream of them.

The runner's planning functions on a run folder whose every stage has a manifest (as a finished
run leaves them; no stage is executed): one key of every config section is changed, and the
plan must rerun the stages named here, no other, with the stages that read the key saying the
config changed and the others that an input changed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from labse_common.config import section_names
from pipelines.run.config import effective_config
from pipelines.run.declare import STATE, Context, manifest_path
from pipelines.run.plan import Plan, config_value, make_plan
from pipelines.run.stages import NAMES, STAGES

MINE_ON = [
    "mine",
    "rules",
    "cds_train",
    "cds_score",
    "sample",
    "combine",
    "bitext",
    "eval",
    "report",
]
TRAIN_ON = ["train", "embed", *MINE_ON]
PRETRAIN_ON = ["pretrain", *TRAIN_ON]
VOCAB_ON = ["vocab", *PRETRAIN_ON]
SENTENCES_ON = ["sentences", *VOCAB_ON]
CORPUS_JOBS = ["wikipedia", "commoncrawl", "quality", "commoncrawl_q"]
RULES_ON = MINE_ON[1:]

# (override, the stages that read the key, every stage that must rerun)
CASES = [
    (
        "corpus.min_chars=12",
        {"wikipedia", "commoncrawl", "commoncrawl_q"},
        CORPUS_JOBS + SENTENCES_ON,
    ),
    ("vocab.smoothing=0.5", {"vocab"}, VOCAB_ON),
    ("model.hidden_size=64", {"pretrain", "train"}, PRETRAIN_ON),
    ("pretrain.lr=0.001", {"pretrain"}, PRETRAIN_ON),
    ("train.lr=0.0001", {"train"}, TRAIN_ON),
    ("mining.k=3", {"mine"}, MINE_ON),
    ("pair_rules.max_ratio=2.5", {"rules"}, RULES_ON),
    ("pair_rules.length_buckets=[0,10,100]", {"rules"}, RULES_ON),
    (
        "cds.lr=0.0005",
        {"cds_train"},
        ["cds_train", "cds_score", "sample", "combine", "bitext", "eval", "report"],
    ),
    (
        "cds.model.d_model=64",
        {"cds_train"},
        ["cds_train", "cds_score", "sample", "combine", "bitext", "eval", "report"],
    ),
    ("lexicon.iterations=3", {"lexicon"}, ["lexicon", *MINE_ON]),
    ("combine.sample_size=200", {"sample"}, ["sample", "combine", "bitext", "eval", "report"]),
    ("combine.target=0.6", {"combine"}, ["combine", "bitext", "eval", "report"]),
    (
        "sources.demo.pud_planted=50",
        {"demo"},
        ["demo", "inputs", "commoncrawl", "quality", "commoncrawl_q", "lexicon", *SENTENCES_ON],
    ),
    (
        "sources.commoncrawl_prefix=s3://x/",
        {"commoncrawl", "commoncrawl_q"},
        ["commoncrawl", "quality", "commoncrawl_q", *SENTENCES_ON],
    ),
    (
        "beam.options={direct_num_workers: 1}",
        {"wikipedia", "commoncrawl", "commoncrawl_q", "vocab", "embed"},
        CORPUS_JOBS + SENTENCES_ON,
    ),
    ("launch.max_restarts=1", {"pretrain", "train"}, PRETRAIN_ON),
    ("eval.k=3", {"eval"}, ["eval", "report"]),
    ("run.min_margin=1.1", {"bitext"}, ["bitext", "eval", "report"]),
    ("run.report_examples=3", {"report"}, ["report"]),
    ("run.embed_batch_size=32", {"embed"}, ["embed", *MINE_ON]),
    (
        "sources.demo.doc_sentences=4",
        {"demo"},
        ["demo", "inputs", "commoncrawl", "quality", "commoncrawl_q", "lexicon", *SENTENCES_ON],
    ),
    ("sources.demo.synthetic_seed=1", {"synthetic"}, [n for n in NAMES if n != "labels"]),
    # Read by no stage's output: a progress bar, the BUCC-only evaluation keys.
    ("cds.progress=false", set(), []),
    ("lexicon.progress=false", set(), []),
    ("train.progress=false", set(), []),
    ("eval.bucc_pairs=[de-en]", set(), []),
    # The value it already has: nothing changed.
    ("mining.k=4", set(), []),
]


def context(out: Path, *sets: str) -> Context:
    return Context(
        out=out,
        base=out / "synthetic",
        synthetic=True,
        config_file=out / "_config.yaml",
        cfg=effective_config("demo", list(sets)),
    )


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A run folder with a manifest for every stage of the demo plan (no outputs to check)."""
    out = tmp_path_factory.mktemp("run")
    (out / STATE).mkdir()
    for p in make_plan(context(out)):
        if p.stage.name == "labels":  # the demo labels its sample from the planted alignment
            assert p.action == "off", p.reason
            continue
        assert p.action == "run", (p.stage.name, p.action, p.reason)
        manifest = {"stage": p.stage.name, "key": p.key, "parts": p.parts, "outputs": []}
        manifest_path(out, p.stage.name).write_text(json.dumps(manifest), encoding="utf-8")
    return out


def plan(out: Path, *sets: str) -> dict[str, Plan]:
    return {p.stage.name: p for p in make_plan(context(out, *sets))}


def test_a_finished_run_is_up_to_date(finished: Path):
    assert {p.action for n, p in plan(finished).items() if n != "labels"} == {"skip"}


@pytest.mark.parametrize("override, readers, expected", CASES, ids=[c[0] for c in CASES])
def test_changed_key_reruns_its_readers_and_downstream_only(
    finished: Path, override, readers, expected
):
    plans = plan(finished, override)
    rerun = [name for name, p in plans.items() if p.action == "run"]
    assert rerun == [n for n in NAMES if n in expected], override
    assert all(p.action == "skip" for n, p in plans.items() if n not in expected and n != "labels")
    for name in rerun:
        reason = plans[name].reason
        assert reason.startswith("changed:"), (name, reason)
        # A reader sees its own config change; a stage downstream only that an input changed.
        assert ("config" in reason) == (name in readers), (name, reason)


# Sections no runner stage reads: each one a deliberate decision, so a new section fails here.
NOT_RUN: set[str] = set()


def test_every_section_is_checked():
    checked = {c[0].split(".")[0] for c in CASES if c[2]}
    assert checked == set(section_names()) - NOT_RUN
    assert not {k.split(".")[0] for s in STAGES for k in s.reads(None)} & NOT_RUN


def _leaves(node: object, prefix: str = "") -> list[str]:
    if isinstance(node, dict):
        return [
            k
            for name, v in node.items()
            for k in _leaves(v, f"{prefix}.{name}" if prefix else name)
        ]
    return [prefix]


def test_declared_keys_exist_and_unread_keys_are_deliberate(tmp_path: Path):
    ctx = context(tmp_path)
    read = {key for s in STAGES for key in s.reads(ctx)}
    for key in read:
        config_value(ctx.values, key)  # KeyError for a key no section has
    unread = {
        k
        for k in _leaves(ctx.values)
        if k.split(".")[0] not in NOT_RUN and not any(k == r or k.startswith(r + ".") for r in read)
    }
    # Display only (progress bars); given as a flag instead (eval.prefix); the BUCC evaluation,
    # which the runner does not run; and the shape of the plan (quality stages on or off), which
    # reruns what it changes through the stages' inputs.
    progress = {f"{s}.progress" for s in section_names() if f"{s}.progress" in _leaves(ctx.values)}
    # cds.calibrate: the `filters calibrate` command's (a CDS-only threshold); the runner's final
    # filter is `filters combine`, calibrated on a sample of the mined pairs.
    calibrate = {k for k in _leaves(ctx.values) if k.startswith("cds.calibrate.")}
    assert unread == progress | calibrate | {
        "combine.label_guideline",  # shown on the labelling page only: changes no output
        "eval.prefix",
        "eval.tune_split",
        "eval.eval_split",
        "eval.bucc_pairs",
        "run.quality_bootstrap",
    }


def test_switching_the_quality_stages_off_reruns_what_read_them(finished: Path):
    plans = plan(finished, "run.quality_bootstrap=false")
    assert plans["quality"].action == plans["commoncrawl_q"].action == "off"
    assert "run.quality_bootstrap is false" in plans["quality"].reason
    assert [n for n, p in plans.items() if p.action == "run"] == SENTENCES_ON
    assert "input commoncrawl_q" in plans["sentences"].reason


def test_an_unreadable_manifest_reruns_its_stage_and_says_why(
    finished: Path, tmp_path: Path, caplog
):
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(finished, out)
    manifest_path(out, "eval").write_text("[]", encoding="utf-8")
    manifest_path(out, "mine").write_text('{"key": "x", "outputs": 3}', encoding="utf-8")
    with caplog.at_level("WARNING"):
        plans = plan(out)
    assert plans["eval"].action == "run" and "manifest unreadable" in plans["eval"].reason
    assert plans["mine"].action == "run" and "manifest unreadable" in plans["mine"].reason
    assert "eval: rerun: manifest unreadable" in caplog.text
    assert [n for n, p in plans.items() if p.action == "run"] == MINE_ON
