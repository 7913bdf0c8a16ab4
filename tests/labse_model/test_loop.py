"""The optimizer's parameter groups: decay, no-decay and the word embeddings' own learning rate."""

from __future__ import annotations

import torch

from labse_model.mlm import MaskedLM
from labse_model.model import build_config, new_encoder
from labse_model.optimizer import make_optimizer


def _model() -> MaskedLM:
    cfg = build_config(
        300,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=32,
    )
    return MaskedLM(new_encoder(cfg, seed=0))


def test_embedding_group_gets_its_multiplier_and_nothing_else_does():
    model = _model()
    opt = make_optimizer(model, 1e-3, 0.01, 1e-6, torch.device("cpu"), embedding_lr_scale=30.0)
    emb = model.bert.embeddings.word_embeddings.weight
    by_param = {id(p): g for g in opt.param_groups for p in g["params"]}
    assert by_param[id(emb)]["lr"] == 30.0 * 1e-3 and by_param[id(emb)]["lr_mult"] == 30.0
    others = [g for g in opt.param_groups if not any(p is emb for p in g["params"])]
    assert others and all(g["lr"] == 1e-3 and g["lr_mult"] == 1.0 for g in others)
    # Tied: the MLM output projection is the same tensor, listed once.
    assert model.head.predictions.decoder.weight is emb
    n = sum(len(g["params"]) for g in opt.param_groups)
    assert n == len([p for p in model.parameters() if p.requires_grad])
    # No decay on LayerNorm and biases, decay on matrices.
    decay = {id(p) for g in opt.param_groups if g["weight_decay"] > 0 for p in g["params"]}
    for name, p in model.named_parameters():
        if p.requires_grad:
            assert (id(p) in decay) == (p.ndim >= 2 and "LayerNorm" not in name), name


def test_default_scale_keeps_one_rate():
    opt = make_optimizer(_model(), 5e-4, 0.01, 1e-6, torch.device("cpu"))
    assert {g["lr"] for g in opt.param_groups} == {5e-4}
