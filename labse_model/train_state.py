"""The training state and its resumption: :class:`TrainState` (the model, its optimizer, the step,
the data position, the stacking stage, the run-wide event counts), the seeds and RNG state of
each rank, and a run continued from its newest valid checkpoint (:func:`find_resume`,
:func:`restore_state`: a checkpoint of other data or batching is refused). Saved by
:mod:`labse_model.loop` with :mod:`labse_model.checkpoint`.
"""

from __future__ import annotations

import logging
import os
import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from labse_model import checkpoint as ckpt
from labse_model.distributed import DistInfo, barrier

log = logging.getLogger(__name__)


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def rng_state() -> dict:
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@dataclass
class TrainState:
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    step: int = 0
    micro: int = 0  # micro-batches consumed (the data position of the lanes' batch grid)
    cursors: dict[str, dict[int, int]] = field(default_factory=dict)  # stream -> lane -> record
    stage: int = 0
    events: dict[str, int] = field(default_factory=dict)  # run-wide counts up to ``step``
    extra: dict[str, Any] = field(default_factory=dict)

    def trainer_state(self) -> dict:
        return {
            "step": self.step,
            "micro": self.micro,
            "cursors": self.cursors,
            "stage": self.stage,
            "events": self.events,
            "extra": self.extra,
            "optimizer": self.optimizer.state_dict(),
        }


def read_trainer_state(path: str) -> dict:
    return torch.load(
        os.path.join(path, ckpt.TRAINER_STATE), map_location="cpu", weights_only=False
    )


def find_resume(ckpt_root: str, info: DistInfo) -> str | None:
    """The newest valid checkpoint (corrupt ones reported and skipped), or None for a new run."""
    if info.is_main:
        ckpt.clean_tmp(ckpt_root)
    barrier()
    resume = ckpt.latest_valid(
        ckpt_root, on_corrupt=lambda p, e: log.error("corrupt checkpoint kept but skipped: %s", e)
    )
    if resume is None and ckpt.list_checkpoints(ckpt_root):
        raise RuntimeError(
            f"every checkpoint under {ckpt_root} is corrupt; move them away to start over"
        )
    return resume


def restore_rng(resume: str, info: DistInfo, seed: int, step: int) -> None:
    rng_path = os.path.join(resume, f"rng-rank{info.rank}.pt")
    if os.path.exists(rng_path):
        set_rng_state(torch.load(rng_path, map_location="cpu", weights_only=False))
    else:
        log.warning("no RNG state for rank %d (world size changed?): reseeding", info.rank)
        set_seed(seed + info.rank + step)


def restore_state(
    state: TrainState, resume: str, fingerprint: dict, info: DistInfo, seed: int
) -> None:
    """Continue ``state`` from the checkpoint ``resume``: its optimizer, step, data position,
    events and RNG. A checkpoint of other data or batching (``fingerprint``), or of another
    stacking stage than its model's depth, is refused: resuming it would silently mix runs."""
    saved = read_trainer_state(resume)
    was = saved.get("extra", {}).get("data", {})
    if was != fingerprint:
        raise RuntimeError(
            f"{resume} was trained on different data or batching ({was}); now {fingerprint}: not the same run"
        )
    if int(saved.get("stage", 0)) != state.stage:
        raise RuntimeError(
            f"{resume}: stage {saved['stage']} but its model has the depth of stage {state.stage}"
        )
    state.optimizer.load_state_dict(saved["optimizer"])
    state.step, state.micro = int(saved["step"]), int(saved["micro"])
    state.cursors, state.events = saved["cursors"], saved["events"]
    restore_rng(resume, info, seed, state.step)


def quiet_workers(info: DistInfo) -> None:
    """In a distributed run rank 0 speaks; the others only warn."""
    if info.enabled:
        logging.getLogger().setLevel(logging.INFO if info.is_main else logging.WARNING)
