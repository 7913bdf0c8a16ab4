"""How the runner's configuration shapes the plan, without running a stage: model.init, the
launch and beam sections, mining.pairs of any languages, who labels the sample, and `extends:`."""

from __future__ import annotations

from pathlib import Path

import pytest

from labse_common.config import ConfigError, read_preset
from labse_model.tiny import make_tiny_checkpoint
from pipelines.run.bitext_stages import CDS_TRAIN, COMBINE, EVAL, SAMPLE
from pipelines.run.config import effective_config
from pipelines.run.corpus_stages import COMMONCRAWL, COMMONCRAWL_Q, INPUTS, WIKIPEDIA
from pipelines.run.declare import Context
from pipelines.run.model_stages import EMBED, MINE, PRETRAIN, TRAIN, VOCAB
from pipelines.run.plan import Plan, make_plan
from pipelines.run.validate import validate_sources


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return Path(
        make_tiny_checkpoint(str(tmp_path_factory.mktemp("m") / "labse"), hidden=16, layers=1)
    )


def plan(tmp_path: Path, *sets: str) -> tuple[Context, dict[str, Plan]]:
    out = tmp_path / "run"
    ctx = Context(
        out=out,
        base=out / "synthetic",
        synthetic=True,
        config_file=out / "_config.yaml",
        cfg=effective_config("demo", list(sets)),
    )
    validate_sources(ctx)
    return ctx, {p.stage.name: p for p in make_plan(ctx)}


def test_model_init_skips_vocab_pretrain_and_train_unless_steps(tmp_path: Path, model: Path):
    ctx, p = plan(tmp_path, f"model.init={model}", "train.steps=0")
    assert [p[s].action for s in ("vocab", "pretrain", "train")] == ["off"] * 3
    assert "model.init" in p["vocab"].reason and "train.steps is 0" in p["train"].reason
    embed = EMBED.commands(ctx)[0]
    assert embed[embed.index("--model") + 1] == str(model)
    cds = CDS_TRAIN.commands(ctx)[0]
    assert cds[cds.index("--vocab") + 1] == str(model)  # the encoder's own tokenizer
    ctx, p = plan(tmp_path, f"model.init={model}", "train.steps=5")
    assert p["train"].action == "run" and p["vocab"].action == p["pretrain"].action == "off"
    train = TRAIN.commands(ctx)[0]
    assert train[train.index("--init") + 1] == str(model) and "--vocab" not in train
    embed = EMBED.commands(ctx)[0]
    assert embed[embed.index("--model") + 1] == str(ctx.out / "train" / "model")


def test_model_init_must_be_an_encoder_folder(tmp_path: Path):
    (tmp_path / "empty").mkdir()
    for bad in (tmp_path / "absent", tmp_path / "empty"):
        with pytest.raises(Exception, match="model.init"):
            plan(tmp_path, f"model.init={bad}")


def test_launch_reaches_the_training_stages_and_beam_the_beam_stages(tmp_path: Path):
    ctx, _ = plan(
        tmp_path,
        "launch.nproc_per_node=2",
        "launch.rdzv_endpoint=10.0.0.1:29400",
        "beam.runner=FlinkRunner",
        "beam.options={flink_master: 'h:8081', parallelism: 4}",
    )
    for stage in (PRETRAIN, TRAIN):
        cmd = " ".join(stage.commands(ctx)[0])
        assert "--nproc-per-node 2" in cmd and "--rdzv-endpoint 10.0.0.1:29400" in cmd
        assert "--runner" not in cmd
    for stage in (WIKIPEDIA, COMMONCRAWL, COMMONCRAWL_Q, VOCAB):
        cmd = stage.commands(ctx)[0]
        assert {"--runner=FlinkRunner", "--flink_master=h:8081", "--parallelism=4"} <= set(cmd)
    for cmd in EMBED.commands(ctx):  # one Beam job per language on the runner
        assert {"--runner=FlinkRunner", "--flink_master=h:8081", "--parallelism=4"} <= set(cmd)
    # Every data-parallel stage is a Beam job on the runner (one per pair for mine); the small
    # stages stay on the runner's machine.
    assert {"--runner=FlinkRunner", "--flink_master=h:8081"} <= set(MINE.commands(ctx)[0])
    for stage in (INPUTS, SAMPLE, COMBINE):
        assert not any(a.startswith("--runner") for a in stage.commands(ctx)[0])


def test_mining_pairs_of_any_languages_are_normalised_once(tmp_path: Path):
    ctx, p = plan(tmp_path, "mining.pairs=[deu-eng, fra-en, es-en, DE-fr, cmn_Hani-jpn]")
    assert ctx.pairs == ["de-en", "fr-en", "es-en", "de-fr", "zh-ja"]
    assert ctx.langs == ["de", "en", "fr", "es", "zh", "ja"]
    assert MINE.commands(ctx)[0][4:9] == ["--pairs", *ctx.pairs[:4]]
    assert set(EMBED.outputs(ctx)) == {"de", "en", "fr", "es", "zh", "ja", "stats.json"}
    for bad, msg in (
        ("[de-de]", "mining.pairs"),
        ("[de-xx]", "mining.pairs"),
        ("[]", "empty"),
        ("[de-en]", "not mined"),
    ):
        with pytest.raises(ConfigError, match=msg):
            plan(tmp_path, f"mining.pairs={bad}")


def test_who_labels_the_sample(tmp_path: Path):
    ctx, p = plan(tmp_path)  # the demo: half 0 of the planted alignment
    assert p["labels"].action == "off" and "--planted" in SAMPLE.commands(ctx)[0]
    assert str(ctx.out / "sample" / "sample.tsv") in COMBINE.commands(ctx)[0]
    ctx, p = plan(tmp_path, "sources.label_from=person")
    assert p["labels"].action == "run" and "--planted" not in SAMPLE.commands(ctx)[0]
    assert str(ctx.out / "labels" / "labels.tsv") in COMBINE.commands(ctx)[0]
    assert "--every-pair" in EVAL.commands(ctx)[-1]


def test_extends_merges_a_users_file_over_the_preset(tmp_path: Path):
    user = tmp_path / "mine.yaml"
    user.write_text(
        "extends: demo\nmining: {pairs: [de-fr]}\nsources: {demo: null, pairs: ['p/{src}-{trg}.tsv']}\n"
    )
    cfg = read_preset(user)
    demo = read_preset("demo")
    assert cfg["mining"]["pairs"] == ["de-fr"] and cfg["mining"]["k"] == demo["mining"]["k"]
    assert (
        cfg["sources"]["demo"] is None
        and cfg["sources"]["wikipedia"] == demo["sources"]["wikipedia"]
    )
    assert cfg["model"] == demo["model"] and "extends" not in cfg
    loop = tmp_path / "loop.yaml"
    loop.write_text(f"extends: {loop.name}\n")
    with pytest.raises(ConfigError, match="itself"):
        read_preset(loop)


def test_a_shortened_flag_is_refused_not_taken_as_a_prefix():
    """docs/configuration.md promises exit 2 for a shortened flag: the runner too."""
    from pipelines.run.cli import main

    for argv in (["--conf", "demo", "--dry-run"], ["--out", "x", "--dry-run"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2, argv
