"""torch.distributed helpers: process-group set-up and an all-gather that carries gradients.

The gather is what makes every accelerator's sentences negatives for all the others: each rank
scores its local rows against the gathered global columns, and the backward pass sums, for each
rank's own embeddings, the gradients that every rank's loss sent to them.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def choose_backend() -> str:
    """NCCL where GPUs are, gloo on CPU."""
    return "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"


def init_from_env() -> DistInfo:
    """Join the process group torchrun described in the environment (or run alone)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo()
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    backend = os.environ.get("LABSE_DIST_BACKEND") or choose_backend()
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        # A dead peer must end the job (and let the elastic agent restart it) in minutes,
        # not after the 30-minute default.
        timeout = timedelta(seconds=float(os.environ.get("LABSE_DIST_TIMEOUT_S", "600")))
        dist.init_process_group(backend=backend, timeout=timeout)
    log.info("rank %d/%d joined the %s process group", rank, world, backend)
    return DistInfo(rank, world, local_rank, backend)


def shutdown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


class _GatherTimer:
    """Wall time spent inside the gather collectives (forward and backward), for metrics."""

    def __init__(self) -> None:
        self.total = 0.0

    def reset(self) -> None:
        self.total = 0.0

    def add(self, t0: float, device: torch.device) -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # collectives are async on GPU
        self.total += time.perf_counter() - t0


gather_timer = _GatherTimer()


class _GatherWithGrad(torch.autograd.Function):
    """all_gather whose backward returns this rank's slice of the summed gradient."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        world = dist.get_world_size()
        ctx.rank = dist.get_rank()
        ctx.rows = x.shape[0]
        t0 = time.perf_counter()
        parts = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(parts, x.contiguous())
        out = torch.cat(parts, dim=0)
        gather_timer.add(t0, x.device)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        t0 = time.perf_counter()
        # A copy: the in-place all_reduce must not write into autograd's buffer.
        grad = grad.contiguous().clone()
        if dist.get_backend() == "nccl":
            # reduce_scatter moves 1/world of what all_reduce moves; gloo lacks it.
            out = torch.empty((ctx.rows, *grad.shape[1:]), dtype=grad.dtype, device=grad.device)
            dist.reduce_scatter_tensor(out, grad, op=dist.ReduceOp.SUM)
        else:
            dist.all_reduce(grad, op=dist.ReduceOp.SUM)
            start = ctx.rank * ctx.rows
            out = grad[start : start + ctx.rows]
        gather_timer.add(t0, grad.device)
        return out


def gather_with_grad(x: torch.Tensor) -> torch.Tensor:
    """Concatenate ``x`` from every rank along dim 0 (rank order), differentiably.

    Every rank must pass the same number of rows (the data loader guarantees it).
    """
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return x
    return _GatherWithGrad.apply(x)


def barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def all_reduce_mean(value: float, device: torch.device) -> float:
    """Average a Python float over ranks (for logging the global loss)."""
    if not (dist.is_available() and dist.is_initialized()):
        return value
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return float(t.item()) / dist.get_world_size()
