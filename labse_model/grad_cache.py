"""Gradient caching: a contrastive batch as large as wanted with the memory of one chunk.

Gao et al. 2021, "Scaling Deep Contrastive Learning Batch Size under Memory Limited Setup".
The in-batch softmax couples every row with every other, so the batch cannot simply be split
into accumulated micro-batches (each would see only its own negatives). Instead:

1. embed the whole batch WITHOUT gradients, chunk by chunk (only the embeddings are kept);
2. compute the loss on those cached embeddings and its gradient with respect to them (this is
   where the cross-rank gather happens, so the negatives are still the global batch);
3. re-run each chunk WITH gradients and backpropagate its slice of the cached gradient
   (``emb.backward(grad)``): by the chain rule the parameter gradients are those of the plain
   large batch.

Dropout must draw the same masks in the re-run as in step 1, so the RNG state (CPU and the
device's) is saved before each chunk's first pass and restored before its re-run.

Under DDP only the last re-run may all-reduce: the others run under ``model.no_sync()`` and
their gradients accumulate locally, exactly as gradient accumulation does. The first pass runs
on the unwrapped module: without gradients DDP has nothing to reduce, and skipping its wrapper
saves a buffer broadcast per chunk.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

LossFn = Callable[[torch.Tensor], tuple[torch.Tensor, dict[str, torch.Tensor]]]


def chunk_plan(mask: torch.Tensor, chunk_size: int) -> list[torch.Tensor]:
    """Row indices of each forward chunk: rows sorted by length, ``chunk_size`` per chunk.

    Sorting first means each chunk is padded only to its own longest row, not the batch's:
    on a CPU the padding is most of the cost of short sentences.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be at least 1, got {chunk_size}")
    lengths = mask.sum(dim=1)
    order = torch.argsort(lengths, stable=True)
    return list(torch.split(order, chunk_size))


def _trimmed(
    ids: torch.Tensor, mask: torch.Tensor, rows: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The chunk's rows, cut to its longest row (right padding only)."""
    m = mask[rows]
    width = max(1, int(m.sum(dim=1).max()))
    return ids[rows, :width], m[:, :width]


def _rng_state(device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return torch.get_rng_state(), cuda


def _set_rng_state(state: tuple[torch.Tensor, torch.Tensor | None], device: torch.device) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


def cached_forward_backward(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    loss_fn: LossFn,
    chunk_size: int,
    loss_scale: float = 1.0,
    autocast: Callable[[], AbstractContextManager] = nullcontext,
    sync: bool = True,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Embed ``input_ids`` in chunks, score them with ``loss_fn`` and backpropagate
    ``loss * loss_scale`` into the parameters of ``model``; returns ``(loss, parts)`` detached.

    ``loss_fn`` takes the embeddings of all rows in their original order. ``sync=False`` keeps
    every chunk under ``no_sync`` (a micro-batch of gradient accumulation that is not the last);
    with ``sync=True`` the last chunk's backward all-reduces the accumulated gradients.
    """
    module = model.module if isinstance(model, DDP) else model
    device = input_ids.device
    plan = chunk_plan(attention_mask, chunk_size)
    states = []
    pieces = []
    with torch.no_grad():
        for rows in plan:
            states.append(_rng_state(device))
            ids, mask = _trimmed(input_ids, attention_mask, rows)
            with autocast():
                pieces.append(module(ids, mask))
    order = torch.cat(plan)
    cached = torch.empty(
        (input_ids.shape[0], *pieces[0].shape[1:]), dtype=pieces[0].dtype, device=device
    )
    cached[order] = torch.cat(pieces)
    del pieces
    cached.requires_grad_(True)
    # Outside autocast: the logits of a large batch want float32 (a bf16 logit blurs the margin).
    loss, parts = loss_fn(cached)
    (loss * loss_scale).backward()
    grad = cached.grad
    after = _rng_state(device)
    for i, rows in enumerate(plan):
        last = i == len(plan) - 1
        reduce_now = sync and last and isinstance(model, DDP)
        ctx = model.no_sync() if isinstance(model, DDP) and not reduce_now else nullcontext()
        _set_rng_state(states[i], device)  # the same dropout masks as the first pass
        ids, mask = _trimmed(input_ids, attention_mask, rows)
        with ctx:
            with autocast():
                emb = model(ids, mask)
            emb.backward(grad[rows].to(emb.dtype))
    _set_rng_state(after, device)
    return loss.detach(), {k: v.detach() for k, v in parts.items()}
