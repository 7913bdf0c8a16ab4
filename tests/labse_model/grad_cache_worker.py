"""One rank of test_grad_cache (forked with torchrun's environment): the gradient-cached step
under DDP (gloo, CPU).

Every rank builds the same small encoder and the same global batch, takes its rows of it, runs
``cached_forward_backward`` through DDP and, on rank 0, saves the averaged parameter gradients
for the test to compare with the plain large batch computed in one process.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from labse_model.grad_cache import cached_forward_backward
from labse_model.loss import AdditiveMarginRankingLoss
from tests.labse_model.test_grad_cache import global_batch, local_rows, small_encoder


def main(out: str, chunk: int) -> None:
    torch.set_num_threads(1)
    # A peer that dies must fail the test in a minute, not hang it for the 30-minute default.
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    model = DDP(small_encoder(dropout=0.0))
    ids, mask = global_batch()
    local_ids, local_mask = local_rows(ids, mask, rank, world)
    loss_fn = AdditiveMarginRankingLoss(20.0, 0.3)

    def fn(emb: torch.Tensor):
        b = emb.shape[0] // 2
        o = loss_fn(emb[:b], emb[b:])
        return o.loss, {}

    cached_forward_backward(model, local_ids, local_mask, fn, chunk)
    if rank == 0:
        grads = {
            n: p.grad.clone() for n, p in model.module.named_parameters() if p.grad is not None
        }
        torch.save(grads, os.path.join(out, "grads.pt"))
    # No destroy_process_group: after rank 0 (the store's host) leaves, a peer's teardown can
    # wait on the store; the barrier is the last collective and exit frees the rest.
    dist.barrier()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
