"""The paper's ablation in miniature on ../shared/data/tatoeba: held-out MLM loss falls during a
short CPU pretraining, `train --init OUTPUT/model` starts from it, and both inits are fine-tuned
the same way and scored on dev retrieval (the figures are printed; see the note at the end)."""

from __future__ import annotations

import json
import os

import pytest
import torch

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


@pytest.fixture(autouse=True)
def _threads():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.mark.slow
def test_pretraining_then_fine_tuning_against_random_init(tmp_path):
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
    assert evals[-1]["eval_mlm_loss"] < evals[0]["eval_mlm_loss"] - 1.0, evals
    assert evals[-1]["eval_tlm_accuracy"] > evals[0]["eval_tlm_accuracy"]
    report = read_report(str(pre / "stats.json"))
    assert check_balanced(report) == []
    assert report["counts"]["languages"]["out"] == 17

    tcfg = load(
        "train",
        "demo",
        flags=dict(batch_size=32, progress=False, tensorboard=False, threads=1, save_every=1000),
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
    # Both fine-tunings learn retrieval (chance is 0.01) ...
    assert min(acc.values()) > 0.03, acc
    # ... and `train --init` really started from the pretrained encoder: its word embeddings
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
    # The paper's ablation (pretrained > random after the same fine-tuning) does NOT hold at
    # this test's scale (300 CPU pretraining steps reach ~10% MLM accuracy: no semantic features
    # yet); bench/pretrain_bench.py ablation measures it at the demo preset's size.
