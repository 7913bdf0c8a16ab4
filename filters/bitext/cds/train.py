"""Training θ_noisy and θ_clean: one teacher-forced cross-entropy loop used twice.

θ_noisy learns translation from the candidate pairs (noise included); θ_clean is a copy of
θ_noisy fine-tuned on the trusted pairs, so the two differ mostly in what the noise taught.
That difference is what the CDS score measures (Wang et al. 2018, "Denoising NMT training with
trusted data and online data selection").
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, get_linear_schedule_with_warmup

from filters.bitext.cds.model import collate, length_batches

log = logging.getLogger(__name__)


@dataclass
class TrainSettings:
    epochs: float
    batch_size: int
    lr: float
    warmup_steps: int = 0
    weight_decay: float = 0.01
    clip_norm: float = 1.0
    seed: int = 0
    progress: bool = True


def train_seq2seq(
    model: PreTrainedModel,
    inputs: Sequence[list[int]],
    targets: Sequence[list[int]],
    settings: TrainSettings,
    device: torch.device,
    desc: str = "train",
) -> dict:
    """Train ``model`` in place on (inputs -> targets); returns loss figures for the report.

    Batches are length-bucketed (sorted within shuffled chunks); a fractional ``epochs`` runs
    that share of the last pass. Linear warm-up and decay, AdamW, gradient clipping.
    """
    n = len(inputs)
    if n == 0:
        raise ValueError("no pairs to train on")
    rng = np.random.default_rng(settings.seed)
    lengths = np.array([len(a) + len(b) for a, b in zip(inputs, targets)])
    steps_per_epoch = math.ceil(n / settings.batch_size)
    total = max(1, round(settings.epochs * steps_per_epoch))
    pad = model.config.pad_token_id
    model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    sched = get_linear_schedule_with_warmup(opt, min(settings.warmup_steps, total // 2), total)
    torch.manual_seed(settings.seed)
    losses: list[float] = []
    epoch_losses: list[float] = []
    step = 0
    bar = tqdm(total=total, desc=desc, unit="step", disable=not settings.progress, leave=False)
    while step < total:
        run = []
        for idx in length_batches(lengths, settings.batch_size, rng):
            if step >= total:
                break
            batch = collate([inputs[i] for i in idx], [targets[i] for i in idx], pad, device)
            loss = model(**batch).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if settings.clip_norm > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), settings.clip_norm)
            opt.step()
            sched.step()
            step += 1
            value = float(loss.detach())
            if not math.isfinite(value):
                raise FloatingPointError(f"{desc}: loss became {value} at step {step}")
            run.append(value)
            losses.append(value)
            bar.update(1)
            bar.set_postfix(loss=f"{value:.3f}")
        epoch_losses.append(float(np.mean(run)))
        log.info("%s: pass %d, mean loss %.4f", desc, len(epoch_losses), epoch_losses[-1])
    bar.close()
    model.eval()
    return {
        "steps": total,
        "pairs": n,
        "epoch_loss": epoch_losses,
        "first_loss": losses[0],
        "last_loss": float(np.mean(losses[-10:])),
    }


def fine_tune_copy(
    model: PreTrainedModel,
    inputs: Sequence[list[int]],
    targets: Sequence[list[int]],
    settings: TrainSettings,
    device: torch.device,
    desc: str = "clean",
) -> tuple[PreTrainedModel, dict]:
    """θ_clean: a deep copy of θ_noisy trained further on the trusted pairs."""
    clean = copy.deepcopy(model)
    metrics = train_seq2seq(clean, inputs, targets, settings, device, desc=desc)
    return clean, metrics
