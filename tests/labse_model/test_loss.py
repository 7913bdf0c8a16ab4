"""The additive-margin ranking loss: the formula, and exact cross-rank negatives on gloo."""

from __future__ import annotations

import math
import os
import socket

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
import torch.nn.functional as F

from labse_model.loss import AdditiveMarginRankingLoss

SENTS = [
    "Tom doesn't know where Mary is.",
    "Der Hund schläft.",
    "Where is the station?",
    "Wo ist der Bahnhof?",
    "I like green tea very much.",
    "Ich trinke gern grünen Tee.",
    "It is raining again today in the old town.",
    "Es regnet heute wieder.",
    "Mary bought a new red car yesterday.",
    "Maria hat gestern ein neues rotes Auto gekauft.",
    "We are going home.",
    "Wir gehen nach Hause.",
    "The quick brown fox jumps over the lazy dog.",
    "Le renard brun saute.",
    "Cats sleep a lot.",
    "Katzen schlafen viel.",
]


# Two shared cores: more threads only spin against the other test processes.
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _reference(x: np.ndarray, y: np.ndarray, scale: float, m: float) -> float:
    """The paper's formula written out with loops: L + L', each a mean over rows."""
    n = len(x)
    total = 0.0
    for a, b in ((x, y), (y, x)):
        for i in range(n):
            pos = scale * (a[i] @ b[i] - m)
            negs = [scale * (a[i] @ b[j]) for j in range(n) if j != i]
            total += -(pos - math.log(math.exp(pos) + sum(math.exp(v) for v in negs))) / n
    return total


def test_loss_matches_formula_and_margin_effect():
    g = torch.Generator().manual_seed(0)
    x = F.normalize(torch.randn(6, 8, generator=g), dim=-1)
    y = F.normalize(torch.randn(6, 8, generator=g), dim=-1)
    for m in (0.0, 0.3):
        got = AdditiveMarginRankingLoss(scale=5.0, margin=m)(x, y).loss.item()
        assert got == pytest.approx(_reference(x.numpy(), y.numpy(), 5.0, m), rel=1e-5)
    # The margin lowers only the positive logit: per row the loss rises exactly as the formula says.
    l0 = AdditiveMarginRankingLoss(scale=5.0, margin=0.0, bidirectional=False)(x, y).loss
    l3 = AdditiveMarginRankingLoss(scale=5.0, margin=0.3, bidirectional=False)(x, y).loss
    assert l3.item() > l0.item()
    # sum vs mean, and combining the directions by mean halves the sum.
    s = AdditiveMarginRankingLoss(scale=5.0, margin=0.3, reduction="sum")(x, y).loss
    mean = AdditiveMarginRankingLoss(scale=5.0, margin=0.3)(x, y).loss
    assert s.item() == pytest.approx(6 * mean.item(), rel=1e-6)
    half = AdditiveMarginRankingLoss(scale=5.0, margin=0.3, combine="mean")(x, y).loss
    assert half.item() == pytest.approx(mean.item() / 2, rel=1e-6)
    with pytest.raises(ValueError):
        AdditiveMarginRankingLoss(reduction="max")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _batch(tokenizer, sents):
    from labse_model.batching import SentenceTokenizer, pad_batch

    st = SentenceTokenizer(tokenizer, 32)
    ids, _ = st.encode(sents)
    return pad_batch(ids, st.pad_id)


def _step(model, tokenizer, src, trg, loss_fn):
    input_ids, mask = _batch(tokenizer, src + trg)
    emb = model(input_ids, mask)  # source and target in one forward call
    out = loss_fn(emb[: len(src)], emb[len(src) :])
    out.loss.backward()
    return out.loss.item()


def _worker(rank: int, world: int, init_method: str, ckpt: str, out_dir: str) -> None:
    from datetime import timedelta

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from labse_model.model import load_encoder

    torch.set_num_threads(1)
    # A timeout turns a lost peer into a failure instead of a hung test.
    dist.init_process_group(
        "gloo", init_method=init_method, rank=rank, world_size=world, timeout=timedelta(seconds=60)
    )
    enc, tok, _ = load_encoder(ckpt)
    # Dropout off, and float64 so that rounding (amplified by the near-identical embeddings of a
    # random model) cannot hide a real difference behind a loose tolerance.
    enc.eval().double()
    ddp = DDP(enc)
    src, trg = SENTS[0::2], SENTS[1::2]
    b = len(src) // world
    results = {}
    for reduction in ("mean", "sum"):
        ddp.zero_grad(set_to_none=True)
        loss_fn = AdditiveMarginRankingLoss(scale=10.0, margin=0.3, reduction=reduction)
        loss = _step(
            ddp, tok, src[rank * b : (rank + 1) * b], trg[rank * b : (rank + 1) * b], loss_fn
        )
        t = torch.tensor([loss], dtype=torch.float64)
        dist.all_reduce(t)
        results[reduction] = {
            "loss": t.item() / world,
            "grads": {n: p.grad.clone() for n, p in enc.named_parameters() if p.grad is not None},
        }
    torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    dist.destroy_process_group()


def _spawn_with_deadline(
    ckpt: str, out_dir: str, deadline_s: float = 180.0, tries: int = 2
) -> None:
    """Run the two ranks; a lost rank fails the test after a deadline instead of hanging CI.

    A rendezvous can fail transiently on a loaded machine (a port taken between choosing and
    binding it), so one fresh attempt is allowed before failing.
    """
    import time

    for attempt in range(tries):
        ctx = mp.start_processes(
            _worker,
            args=(2, f"tcp://127.0.0.1:{_free_port()}", ckpt, out_dir),
            nprocs=2,
            join=False,
            # Forked from this process, torch and the encoder already imported: a spawned
            # rank spends ~10 s of CPU importing them again. The ranks run torch on one thread
            # (no OpenMP pool to inherit broken) and leave through os._exit.
            start_method="fork",
        )
        end = time.monotonic() + deadline_s
        try:
            while not ctx.join(timeout=5):
                if time.monotonic() > end:
                    raise TimeoutError(f"gloo ranks did not finish in {deadline_s}s")
            return
        except (TimeoutError, mp.ProcessRaisedException, mp.ProcessExitedException):
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()
            if attempt == tries - 1:
                raise


@pytest.mark.slow
def test_gloo_world_size_2_equals_single_process_global_batch(tmp_path):
    from labse_model.model import load_encoder
    from labse_model.tiny import make_tiny_checkpoint

    ckpt = make_tiny_checkpoint(str(tmp_path / "ckpt"), SENTS, hidden=32, layers=2, heads=2)
    _spawn_with_deadline(ckpt, str(tmp_path))
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]

    enc, tok, _ = load_encoder(ckpt)
    enc.eval().double()
    for reduction in ("mean", "sum"):
        enc.zero_grad(set_to_none=True)
        loss_fn = AdditiveMarginRankingLoss(scale=10.0, margin=0.3, reduction=reduction)
        ref_loss = _step(enc, tok, SENTS[0::2], SENTS[1::2], loss_fn)
        ref = {n: p.grad for n, p in enc.named_parameters() if p.grad is not None}
        for r in ranks:
            got = r[reduction]
            assert got["loss"] == pytest.approx(ref_loss, rel=1e-12)
            assert set(got["grads"]) == set(ref)
            for name, g in ref.items():
                torch.testing.assert_close(got["grads"][name], g, rtol=1e-9, atol=1e-12, msg=name)
                # Scale-free as well (key biases have an exactly-zero true gradient: skip those).
                if g.norm() > 1e-8:
                    rel = (got["grads"][name] - g).norm() / g.norm()
                    assert rel.item() < 1e-9, (name, rel.item())
        assert all(g.norm().item() > 0 for g in ref.values())
