"""The optimiser of the training loop (:mod:`labse_model.loop`): AdamW with BERT's parameter
groups (:func:`param_groups`) and the learning-rate schedule, linear warmup then linear decay
(:func:`linear_schedule`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def linear_schedule(warmup: int, total: int) -> Callable[[int], float]:
    """LR multiplier: linear warmup to 1, then linear decay to 0 at ``total``."""

    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / max(1, warmup)
        return max(0.0, (total - step) / max(1, total - warmup))

    return f


WORD_EMBEDDINGS = "embeddings.word_embeddings.weight"


def param_groups(
    model: torch.nn.Module, weight_decay: float, embedding_lr_scale: float = 1.0
) -> list[dict]:
    """AdamW groups; each carries ``lr_mult``, its learning rate relative to the schedule's.

    BERT convention: no decay on biases and LayerNorm weights. The word-embedding matrix (tied
    to the MLM output projection) has its own group: a row only gets a gradient when its token
    occurs, so on small data rare tokens barely move at the body's learning rate
    (bench/README.md measures ``embedding_lr_scale``).
    """
    decay, no_decay, emb = [], [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if name.endswith(WORD_EMBEDDINGS):
            emb.append(p)
        else:
            (no_decay if p.ndim < 2 or "LayerNorm" in name else decay).append(p)
    groups = [
        {"params": decay, "weight_decay": weight_decay, "lr_mult": 1.0},
        {"params": no_decay, "weight_decay": 0.0, "lr_mult": 1.0},
    ]
    if emb:
        groups.append(
            {"params": emb, "weight_decay": weight_decay, "lr_mult": float(embedding_lr_scale)}
        )
    return groups


def make_optimizer(
    model: torch.nn.Module,
    lr: float,
    weight_decay: float,
    eps: float,
    device: torch.device,
    embedding_lr_scale: float = 1.0,
) -> torch.optim.Optimizer:
    # foreach on CPU too: one kernel per op over all tensors instead of a Python loop.
    cuda = device.type == "cuda"
    groups = param_groups(model, weight_decay, embedding_lr_scale)
    for g in groups:
        g["lr"] = lr * g["lr_mult"]
    return torch.optim.AdamW(groups, lr=lr, eps=eps, fused=cuda, foreach=not cuda)
