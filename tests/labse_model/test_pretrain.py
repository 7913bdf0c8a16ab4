"""Pretraining at test scale on ../shared/data/tatoeba (300 CPU steps of a 64-wide encoder): the
held-out MLM and TLM losses fall and their accuracies rise, `train --init OUTPUT/model` fine-tunes
the pretrained encoder (not a fresh draw), and the result retrieves well above chance, not far
below a random init fine-tuned the same way.

Not tested here: the paper's ablation (pretrained beats random after the same fine-tuning). At
this scale it does not hold (dev accuracy 0.10 pretrained vs 0.13 random after 150 steps; the
pretrained encoder reaches ~10% MLM accuracy, no semantic features yet); bench/pretrain_bench.py
ablation measures it at the demo preset's size."""

from __future__ import annotations

import json
import os

import pytest

from labse_common.config import load
from labse_common.stats import check_balanced, read_report
from labse_model.pretrain import pretrain
from labse_model.train import train
from tests.support.pretrain_fixtures import DATA, dev_accuracy, write_tatoeba_inputs

# The model: section as the commands load it; the keys not given keep the section's defaults.
MODEL = load(
    "model",
    None,
    flags={
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 128,
        "max_position_embeddings": 64,
        "initializer_range": 0.1,
        "dropout": 0.0,
    },
)
PRE_STEPS = [100, 200]
FT_STEPS = 150


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.slow
def test_pretraining_learns_and_fine_tuning_starts_from_it(tmp_path):
    if not DATA.is_dir():
        pytest.skip(f"Tatoeba data not found under {DATA}")
    inputs = write_tatoeba_inputs(tmp_path / "inputs", vocab_size=8000)
    pcfg = load(
        "pretrain",
        "demo",
        flags=dict(
            mlm_batch_size=16,
            tlm_batch_size=16,
            max_seq_length=32,
            lr=2e-3,
            warmup_steps=30,
            eval_every=50,
            log_every=10,
            save_every=1000,
            progress=False,
            tensorboard=False,
            threads=1,
            stage_steps=PRE_STEPS,
            stages=len(PRE_STEPS),
        ),
    )
    pre = tmp_path / "pre"
    summary = pretrain(
        MODEL,
        pcfg,
        [inputs["sentences"]],
        [inputs["pairs"]],
        str(pre),
        vocab=inputs["vocab"],
    )
    assert summary["stage"] == 1 and summary["model"] == str(pre / "model")
    evals = [r for r in map(json.loads, open(pre / "metrics.jsonl")) if "eval_mlm_loss" in r]
    assert evals[0]["step"] == 0 and evals[-1]["step"] == sum(PRE_STEPS)
    # Measured: MLM loss 9.37 -> 6.80, MLM accuracy 0 -> 0.106, TLM accuracy 0 -> 0.083; a
    # pretraining that does not learn stays near its start (about ln of the vocabulary size).
    assert evals[-1]["eval_mlm_loss"] < evals[0]["eval_mlm_loss"] - 2.0, evals
    assert evals[-1]["eval_mlm_accuracy"] > 0.06, evals
    assert evals[-1]["eval_tlm_accuracy"] > 0.05, evals
    report = read_report(str(pre / "stats.json"))
    assert check_balanced(report) == []
    assert report["counts"]["languages"]["out"] == 17

    tcfg = load(
        "train",
        "demo",
        # embedding_lr_scale pinned at the value the figures below were measured with: the
        # preset's 60 moves the embeddings twice as far and the last check is about the start.
        flags=dict(
            batch_size=32,
            progress=False,
            tensorboard=False,
            threads=1,
            save_every=1000,
            embedding_lr_scale=30.0,
        ),
    )
    acc = {}
    for name, kw in (
        ("pretrained", {"init": str(pre / "model")}),
        ("random", {"vocab": inputs["vocab"]}),
    ):
        out = tmp_path / f"ft-{name}"
        s = train(MODEL, tcfg, [inputs["pairs"]], str(out), max_steps=FT_STEPS, **kw)
        acc[name] = dev_accuracy(s["model"])["average"]
    print("dev accuracy", acc)
    # Measured: 0.10 from the pretrained encoder, 0.13 from a random one (chance is 0.01). The
    # pretrained start must stay a usable one: from the same encoder with diverged weights (all
    # of them x30) the same fine-tuning reaches 0.013, and this fails.
    assert acc["random"] > 0.06, acc
    assert acc["pretrained"] > 0.06 and acc["pretrained"] > 0.5 * acc["random"], acc
    # `train --init` really started from the pretrained encoder: its word embeddings
    # are the pretrained ones moved by 150 fine-tuning steps, not a fresh draw.
    from labse_model.model import load_encoder

    def emb(path):
        return load_encoder(str(path))[0].bert.embeddings.word_embeddings.weight.detach()

    e_pre, e_ft, e_rand = (
        emb(pre / "model"),
        emb(tmp_path / "ft-pretrained" / "model"),
        emb(tmp_path / "ft-random" / "model"),
    )
    assert (e_ft - e_pre).norm() < 0.5 * (e_rand - e_pre).norm()
    assert os.path.exists(pre / "model" / "mlm_head.safetensors")
