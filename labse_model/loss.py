"""Bidirectional translation ranking loss with additive margin softmax (LaBSE, section 3).

For a batch of N translation pairs with L2-normalised embeddings x_i, y_i:

    logits_ij = scale * (cos(x_i, y_j) - margin * [i == j])
    L_st = CE(logits, i -> i)        (source ranks its translation among all targets)
    L_ts = CE(logits.T, j -> j)      (target ranks its source among all sources)
    loss = L_st + L_ts               (``combine="sum"``, the paper's  L_bar = L + L')

Options, documented because references differ:

* ``reduction``: ``mean`` over rows (the paper's 1/N) or ``sum``.
* ``combine``: ``sum`` of the two directions (paper) or their ``mean``.
* ``scale``: the paper writes the softmax on raw cosines; implementations multiply the logits
  by a scale (sentence-transformers' ranking loss uses 20). Our presets use ``scale: 20``.

Under data parallelism each rank scores its local rows against the gathered global columns
(labels offset by ``rank * local_batch``). With ``reduction="mean"`` the local loss is the mean
over local rows; DDP then averages gradients over ranks, which gives exactly the gradient of
the global-batch mean. With ``reduction="sum"`` the local sum is multiplied by the world size
so DDP's average again equals the global sum's gradient.

Hard negatives (hard_negatives.py) enter as extra columns of the source->target softmax, gathered
like the targets, with no margin; a column in the row's translation group is masked out.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from labse_model.distributed import gather_with_grad


@dataclass
class LossOutput:
    loss: torch.Tensor
    accuracy: torch.Tensor  # in-batch top-1 source->target, local rows (detached)


def margin_logits(
    src: torch.Tensor, trg: torch.Tensor, scale: float, margin: float, offset: int = 0
) -> torch.Tensor:
    """``scale * (src @ trg.T - margin at (i, offset + i))``, at least in float32."""
    dtype = torch.promote_types(src.dtype, torch.float32)  # bf16 logits would blur the margin
    sim = src.to(dtype) @ trg.to(dtype).t()
    if margin:
        rows = torch.arange(src.shape[0], device=src.device)
        sim = sim.index_put((rows, rows + offset), sim[rows, rows + offset] - margin)
    return sim * scale


class AdditiveMarginRankingLoss(nn.Module):
    """The LaBSE dual-encoder loss; cross-device negatives when a process group is up."""

    def __init__(
        self,
        scale: float = 20.0,
        margin: float = 0.3,
        bidirectional: bool = True,
        reduction: str = "mean",
        combine: str = "sum",
    ) -> None:
        super().__init__()
        if reduction not in ("mean", "sum"):
            raise ValueError(f"reduction must be mean or sum, got {reduction!r}")
        if combine not in ("mean", "sum"):
            raise ValueError(f"combine must be mean or sum, got {combine!r}")
        self.scale = float(scale)
        self.margin = float(margin)
        self.bidirectional = bidirectional
        self.reduction = reduction
        self.combine = combine

    def forward(
        self,
        src: torch.Tensor,
        trg: torch.Tensor,
        extra: torch.Tensor | None = None,
        src_groups: torch.Tensor | None = None,
        extra_groups: torch.Tensor | None = None,
    ) -> LossOutput:
        """``extra``: hard-negative targets, candidate columns of every source (gathered across
        ranks like the targets) in the source->target direction only. ``src_groups`` and
        ``extra_groups`` are translation-group ids (hard_negatives.py): a column in its row's
        group, or with a negative id (an empty slot), is left out of that row's softmax."""
        if src.shape != trg.shape:
            raise ValueError(f"src {tuple(src.shape)} and trg {tuple(trg.shape)} differ")
        distributed = dist.is_available() and dist.is_initialized()
        rank = dist.get_rank() if distributed else 0
        world = dist.get_world_size() if distributed else 1
        b = src.shape[0]
        offset = rank * b
        labels = torch.arange(b, device=src.device) + offset
        all_trg = gather_with_grad(trg)
        logits = margin_logits(src, all_trg, self.scale, self.margin, offset)
        if extra is not None and extra.shape[0]:
            logits = torch.cat(
                [logits, self._extra_logits(src, extra, src_groups, extra_groups)], dim=1
            )
        loss = F.cross_entropy(logits, labels, reduction="sum")
        if self.bidirectional:
            all_src = gather_with_grad(src)
            logits_t = margin_logits(trg, all_src, self.scale, self.margin, offset)
            loss_t = F.cross_entropy(logits_t, labels, reduction="sum")
            loss = loss + loss_t if self.combine == "sum" else (loss + loss_t) / 2
        loss = loss / b if self.reduction == "mean" else loss * world
        with torch.no_grad():
            acc = (logits.argmax(dim=1) == labels).float().mean()
        return LossOutput(loss, acc)

    def _extra_logits(
        self,
        src: torch.Tensor,
        extra: torch.Tensor,
        src_groups: torch.Tensor | None,
        extra_groups: torch.Tensor | None,
    ) -> torch.Tensor:
        all_extra = gather_with_grad(extra)
        dtype = torch.promote_types(src.dtype, torch.float32)
        logits = self.scale * (src.to(dtype) @ all_extra.to(dtype).t())
        if extra_groups is not None:
            all_groups = gather_with_grad(extra_groups)
            drop = all_groups[None, :] < 0
            if src_groups is not None:
                # A translation of the row (same group) must never count as its negative.
                drop = drop | (src_groups[:, None] == all_groups[None, :])
            logits = logits.masked_fill(drop, float("-inf"))
        return logits
