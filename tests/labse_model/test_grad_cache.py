"""Gradient caching gives the plain large batch's parameter gradients: alone, with dropout,
under DDP with two ranks (gloo), and through the training loop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from labse_model import grad_cache
from labse_model.grad_cache import cached_forward_backward, chunk_plan
from labse_model.loss import AdditiveMarginRankingLoss
from labse_model.model import SentenceEncoder, build_config, new_encoder

REPO = Path(__file__).resolve().parents[2]
VOCAB = 60
PAIRS = 12  # global batch of the DDP case: 6 pairs (12 rows) per rank


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def small_encoder(dropout: float, seed: int = 0) -> SentenceEncoder:
    cfg = build_config(
        VOCAB,
        0,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
        dropout=dropout,
    )
    return new_encoder(cfg, seed=seed)


def global_batch(pairs: int = PAIRS, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Sources then targets, right-padded, of varied lengths (so chunks pad differently)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, 17, (2 * pairs,), generator=g)
    ids = torch.zeros((2 * pairs, 16), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, n in enumerate(lengths.tolist()):
        ids[i, :n] = torch.randint(5, VOCAB, (n,), generator=g)
        ids[i, 0], ids[i, n - 1] = 2, 3  # [CLS] ... [SEP]
        mask[i, :n] = 1
    return ids, mask


def local_rows(
    ids: torch.Tensor, mask: torch.Tensor, rank: int, world: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's share of the global batch, as the loader gives it: its sources then its targets."""
    pairs = ids.shape[0] // 2
    per = pairs // world
    rows = torch.cat(
        [
            torch.arange(rank * per, (rank + 1) * per),
            pairs + torch.arange(rank * per, (rank + 1) * per),
        ]
    )
    return ids[rows], mask[rows]


LOSS = AdditiveMarginRankingLoss(20.0, 0.3)


def _loss(emb: torch.Tensor):
    b = emb.shape[0] // 2
    out = LOSS(emb[:b], emb[b:])
    return out.loss, {"accuracy": out.accuracy}


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _assert_same(got: dict, want: dict, atol: float = 1e-5) -> None:
    assert got.keys() == want.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=atol, rtol=0, msg=name)


def _plain(ids, mask) -> tuple[float, dict]:
    model = small_encoder(0.0)
    loss, _ = _loss(model(ids, mask))
    loss.backward()
    return float(loss.detach()), _grads(model)


def _cached(
    ids, mask, dropout: float, chunk: int, seed: int = 7, scale: float = 1.0
) -> tuple[float, dict]:
    model = small_encoder(dropout)
    torch.manual_seed(seed)
    loss, parts = cached_forward_backward(model, ids, mask, _loss, chunk, loss_scale=scale)
    assert not loss.requires_grad and "accuracy" in parts
    return float(loss), _grads(model)


@pytest.mark.parametrize("chunk", [1, 5, 8, 24])
def test_cached_gradients_equal_the_plain_batch(chunk):
    ids, mask = global_batch()
    loss, want = _plain(ids, mask)
    got_loss, got = _cached(ids, mask, 0.0, chunk)
    assert got_loss == pytest.approx(loss, abs=1e-5)
    _assert_same(got, want)


def test_loss_scale_scales_the_gradients():
    ids, mask = global_batch()
    _, want = _plain(ids, mask)
    _, got = _cached(ids, mask, 0.0, 5, scale=0.25)
    _assert_same(got, {k: v * 0.25 for k, v in want.items()})


def _chunkwise_with_grad(ids, mask, dropout: float, chunk: int, seed: int = 7) -> dict:
    """The plain large batch with dropout: the same chunks in the same order, all kept with
    their graphs (the memory of the whole batch), one backward of the loss."""
    model = small_encoder(dropout)
    torch.manual_seed(seed)
    plan = chunk_plan(mask, chunk)
    emb = torch.empty((ids.shape[0], 32))
    for rows in plan:
        m = mask[rows]
        w = int(m.sum(1).max())
        emb = emb.index_put((rows,), model(ids[rows, :w], m[:, :w]))
    _loss(emb)[0].backward()
    return _grads(model)


def test_dropout_is_replayed_identically(monkeypatch):
    ids, mask = global_batch()
    want = _chunkwise_with_grad(ids, mask, 0.2, 5)
    _, got = _cached(ids, mask, 0.2, 5)
    _assert_same(got, want)
    # Dropout is really on: another seed draws other masks and other gradients ...
    other = _chunkwise_with_grad(ids, mask, 0.2, 5, seed=8)
    assert max(float((other[k] - want[k]).abs().max()) for k in want) > 1e-3
    # ... and without restoring the RNG state the re-run would draw other masks too.
    monkeypatch.setattr(grad_cache, "_set_rng_state", lambda state, device: None)
    _, unreplayed = _cached(ids, mask, 0.2, 5)
    assert max(float((unreplayed[k] - want[k]).abs().max()) for k in want) > 1e-3


def _rank(rank: int, out: str) -> None:
    """One forked rank (torchrun's environment set by run_forked_ranks): the worker."""
    from tests.labse_model.grad_cache_worker import main

    main(out, 5)


def test_two_gloo_ranks_give_the_global_batch_gradients(tmp_path):
    # The two ranks are forked from this process with torchrun's environment (torch imported
    # already: a torchrun launcher and two workers spent ~20 s importing it); the launcher
    # itself is test_launcher's and test_two_node_*'s.
    from tests.support.two_node_util import run_forked_ranks

    run_forked_ranks(_rank, (str(tmp_path),), nprocs=2, timeout=180)
    got = torch.load(tmp_path / "grads.pt")
    # The plain global batch in one process: rank 0's pairs then rank 1's, every target a
    # negative of every source.
    ids, mask = global_batch()
    _, want = _plain(ids, mask)
    _assert_same(got, want)


def test_training_loop_with_chunks_follows_the_plain_loss_curve(tmp_path):
    from labse_common.config import load
    from labse_model.train import train
    from tests.support.two_node_util import synthetic_pairs, write_vocab

    pairs = tmp_path / "pairs.tsv"
    pairs.write_text(synthetic_pairs(64), encoding="utf-8")
    vocab = write_vocab(tmp_path / "vocab")
    model = load(
        "model",
        None,
        flags={
            "hidden_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "intermediate_size": 64,
            "max_position_embeddings": 32,
            "dropout": 0.0,
        },
    )
    curves = []
    for name, chunk in (("plain", None), ("cached", 6)):
        cfg = load(
            "train",
            "demo",
            flags={
                "progress": False,
                "threads": 1,
                "tensorboard": False,
                "batch_size": 16,
                "log_every": 1,
                "save_every": 100,
                "vocab": vocab,
                "chunk_size": chunk,
            },
        )
        train(model, cfg, [str(pairs)], str(tmp_path / name), max_steps=4)
        curves.append(
            [json.loads(line)["loss"] for line in open(tmp_path / name / "metrics.jsonl")]
        )
    assert len(curves[0]) == 4
    assert curves[1] == pytest.approx(curves[0], abs=1e-4)
