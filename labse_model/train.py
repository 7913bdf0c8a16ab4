"""Dual-encoder training loop: AdamW, linear warmup/decay, clipping, accumulation, bf16, DDP.

Runs alone or as one torchrun worker (see ``launcher.py``). Each step: every rank tokenises its
slice of the global micro-batch, encodes source and target in ONE forward call (a DDP module
called twice per step would break its gradient hooks), and the loss gathers embeddings from all
ranks so the in-batch negatives are the global batch.

Outputs under ``--output``: ``checkpoints/step-*/`` (resumable, see checkpoint.py), ``model/``
(final encoder, HF + sentence-transformers layout), ``metrics.jsonl``, ``tb/`` (TensorBoard),
``stats.json`` (pairs read/kept/dropped per reason; truncations as events), ``vocab/`` when the
vocabulary was learned from the pairs (demo only).
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import time
from contextlib import nullcontext
from typing import Any

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from tqdm import tqdm

from labse_common.config import from_dict
from labse_common.sections.train import TrainConfig as _TrainSection
from labse_common.stats import StageCounter, check_balanced, write_report
from labse_model import checkpoint as ckpt
from labse_model.batching import SentenceTokenizer, pad_batch
from labse_model.data import BatchOrder, read_pairs
from labse_model.distributed import DistInfo, all_reduce_mean, barrier, gather_timer, init_from_env
from labse_model.loss import AdditiveMarginRankingLoss
from labse_model.model import (
    SentenceEncoder,
    build_config,
    load_encoder,
    load_tokenizer,
    new_encoder,
    save_encoder,
)

log = logging.getLogger(__name__)

STAGE = "train"


class TrainConfig(_TrainSection):
    """The ``train:`` section (labse_common/sections/train.py), built with the typed loader."""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        return from_dict(cls, d, prefix="train")


def _set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def _rng_state() -> dict:
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def linear_schedule(warmup: int, total: int):
    """LR multiplier: linear warmup to 1, then linear decay to 0 at ``total``."""

    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / max(1, warmup)
        return max(0.0, (total - step) / max(1, total - warmup))

    return f


def _param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    # BERT convention: no decay on biases and LayerNorm weights.
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim < 2 or "LayerNorm" in name else decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


class _Metrics:
    """metrics.jsonl and TensorBoard on the main rank."""

    def __init__(self, output: str, resume_step: int, tensorboard: bool, enabled: bool) -> None:
        self.enabled = enabled
        self.path = os.path.join(output, "metrics.jsonl")
        self.tb = None
        if not enabled:
            return
        # Records past the resumed step belong to the crashed run's lost tail: drop them.
        kept = []
        if os.path.exists(self.path):
            with open(self.path, encoding="utf-8") as f:
                for line in f:
                    try:
                        rec = json.loads(line)
                    except json.JSONDecodeError:
                        continue  # a line cut by the crash
                    if rec.get("step", 0) <= resume_step:
                        kept.append(line if line.endswith("\n") else line + "\n")
        with open(self.path, "w", encoding="utf-8") as f:
            f.writelines(kept)
        self.file = open(self.path, "a", encoding="utf-8")
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(os.path.join(output, "tb"), purge_step=resume_step + 1)
            except ImportError:
                log.warning("tensorboard is not installed: metrics go to metrics.jsonl only")

    def write(self, rec: dict) -> None:
        if not self.enabled:
            return
        self.file.write(json.dumps(rec) + "\n")
        self.file.flush()
        if self.tb is not None:
            for k, v in rec.items():
                if k != "step" and isinstance(v, (int, float)):
                    self.tb.add_scalar(f"train/{k}", v, rec["step"])

    def close(self) -> None:
        if not self.enabled:
            return
        self.file.close()
        if self.tb is not None:
            self.tb.close()


def _build_model(
    cfg: TrainConfig,
    model_cfg: dict,
    output: str,
    pair_texts: list[str],
    vocab: str | None,
    init: str | None,
    info: DistInfo,
) -> tuple[SentenceEncoder, Any]:
    """A fresh encoder: from --init, else random on --vocab (or a vocab learned from the pairs)."""
    if init:
        encoder, tokenizer, _ = load_encoder(init)
        if vocab:
            log.warning("--init given: its own tokenizer is used, --vocab is ignored")
        return encoder, tokenizer
    vocab = vocab or cfg.vocab
    if not vocab:
        if not cfg.learn_vocab:
            raise ValueError(
                "no vocabulary: pass --vocab DIR (e.g. the vocab stage output) or --init "
                "CHECKPOINT (or set learn_vocab=true to learn a small WordPiece from the pairs)"
            )
        vocab = os.path.join(output, "vocab")
        if info.is_main and not os.path.exists(os.path.join(vocab, "tokenizer.json")):
            from labse_model.tiny import train_wordpiece

            log.info(
                "no --vocab: learning a %d-piece cased WordPiece from the pairs", cfg.vocab_size
            )
            train_wordpiece(pair_texts, vocab, vocab_size=cfg.vocab_size)
        barrier()
    tokenizer = load_tokenizer(vocab)
    config = build_config(len(tokenizer), tokenizer.pad_token_id or 0, **model_cfg)
    # Same seed on every rank: identical initial weights even before DDP's broadcast.
    return new_encoder(config, seed=cfg.seed), tokenizer


def train(
    model_cfg: dict[str, Any],
    train_cfg: dict[str, Any],
    pairs: list[str],
    output: str,
    vocab: str | None = None,
    init: str | None = None,
    max_steps: int | None = None,
    stop_at_step: int | None = None,
) -> dict:
    """Train (or resume) a dual encoder; returns a summary dict (final step, last loss, paths).

    ``max_steps`` overrides ``train.steps`` (the schedule length); ``stop_at_step`` halts after
    that step with a checkpoint, as a preempted job slice would, to be resumed later.
    """
    cfg = TrainConfig.from_dict(train_cfg)
    total_steps = int(max_steps or cfg.steps)
    info = init_from_env()
    if cfg.batch_size % info.world_size:
        raise ValueError(
            f"train.batch_size {cfg.batch_size} is not divisible by the world size {info.world_size}"
        )
    if info.enabled:
        # Rank 0 speaks; the others only warn.
        logging.getLogger().setLevel(logging.INFO if info.is_main else logging.WARNING)
    device = (
        torch.device("cuda", info.local_rank) if torch.cuda.is_available() else torch.device("cpu")
    )
    if device.type == "cpu":
        # Workers on one node share its cores; oversubscribed OpenMP threads spin and crawl.
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        torch.set_num_threads(cfg.threads or max(1, (os.cpu_count() or 1) // local_world))
    os.makedirs(output, exist_ok=True)
    ckpt_root = os.path.join(output, "checkpoints")
    os.makedirs(ckpt_root, exist_ok=True)

    counter = StageCounter()
    table = read_pairs(pairs, counter)
    if table.num_rows == 0:
        raise ValueError("no usable pairs in the given files (all empty or malformed)")
    src_col = table["src"]
    trg_col = table["trg"]
    order = BatchOrder(table.num_rows, cfg.batch_size, cfg.seed)
    log.info(
        "%d pairs, %d batches of %d per epoch",
        table.num_rows,
        order.batches_per_epoch,
        cfg.batch_size,
    )

    if info.is_main:
        ckpt.clean_tmp(ckpt_root)
    resume = ckpt.latest_valid(
        ckpt_root, on_corrupt=lambda p, e: log.error("corrupt checkpoint kept but skipped: %s", e)
    )
    if resume:
        log.info("resuming from %s", resume)
        encoder, tokenizer, _ = load_encoder(resume)
    else:
        if ckpt.list_checkpoints(ckpt_root):
            raise RuntimeError(
                f"every checkpoint under {ckpt_root} is corrupt; move them away to start over"
            )
        texts = (
            src_col.to_pylist() + trg_col.to_pylist() if not (vocab or cfg.vocab or init) else []
        )
        encoder, tokenizer = _build_model(cfg, model_cfg, output, texts, vocab, init, info)
    max_len = min(cfg.max_seq_length, encoder.bert.config.max_position_embeddings)
    stok = SentenceTokenizer(tokenizer, max_len)

    encoder.to(device)
    model: torch.nn.Module = encoder
    if info.enabled:
        model = DDP(encoder, device_ids=[info.local_rank] if device.type == "cuda" else None)
    loss_fn = AdditiveMarginRankingLoss(
        cfg.scale, cfg.margin, cfg.bidirectional, cfg.reduction, cfg.combine
    )
    optimizer = torch.optim.AdamW(
        _param_groups(encoder, cfg.weight_decay),
        lr=cfg.lr,
        eps=cfg.adam_eps,
        fused=device.type == "cuda",
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, linear_schedule(cfg.warmup_steps, total_steps)
    )

    step = 0
    _set_seed(cfg.seed + info.rank)  # dropout masks differ per rank, reproducibly
    if resume:
        state = torch.load(
            os.path.join(resume, ckpt.TRAINER_STATE), map_location="cpu", weights_only=False
        )
        if state["num_pairs"] != table.num_rows or state["batch_size"] != cfg.batch_size:
            raise RuntimeError(
                f"{resume} was trained on {state['num_pairs']} pairs in batches of "
                f"{state['batch_size']}; now {table.num_rows} / {cfg.batch_size}: not the same run"
            )
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        step = int(state["step"])
        rng_path = os.path.join(resume, f"rng-rank{info.rank}.pt")
        if os.path.exists(rng_path):
            _set_rng_state(torch.load(rng_path, map_location="cpu", weights_only=False))
        else:
            log.warning("no RNG state for rank %d (world size changed?): reseeding", info.rank)
            _set_seed(cfg.seed + info.rank + step)

    use_bf16 = bool(cfg.bf16) and device.type == "cuda" and torch.cuda.is_bf16_supported()
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if use_bf16 else nullcontext
    metrics = _Metrics(output, step, cfg.tensorboard, info.is_main)
    local_b = cfg.batch_size // info.world_size

    def save(at_step: int) -> None:
        barrier()
        tmp = ckpt.tmp_dir_for(ckpt_root, at_step)
        if info.is_main:
            ckpt.prepare_tmp(ckpt_root, at_step)
        barrier()
        torch.save(_rng_state(), os.path.join(tmp, f"rng-rank{info.rank}.pt"))
        barrier()
        if info.is_main:
            save_encoder(encoder, tokenizer, tmp, max_seq_length=max_len)
            torch.save(
                {
                    "step": at_step,
                    "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(),
                    "num_pairs": table.num_rows,
                    "batch_size": cfg.batch_size,
                    "micro_batches": at_step * cfg.grad_accum,
                    "world_size": info.world_size,
                },
                os.path.join(tmp, ckpt.TRAINER_STATE),
            )
            path = ckpt.finalize(
                ckpt_root, at_step, cfg.keep_checkpoints, {"world_size": info.world_size}
            )
            log.info("checkpoint %s", path)
        barrier()

    model.train()
    bar = tqdm(
        total=total_steps,
        initial=step,
        desc="train",
        unit="step",
        disable=not (info.is_main and cfg.progress),
    )
    last_loss = float("nan")
    halt_at = min(total_steps, stop_at_step) if stop_at_step else total_steps
    window_t, window_sents = time.perf_counter(), 0
    gather_timer.reset()
    while step < halt_at:
        t0 = time.perf_counter()
        step_loss = 0.0
        step_acc = 0.0
        for micro in range(cfg.grad_accum):
            m = step * cfg.grad_accum + micro
            idx = order.local_indices(m, info.rank, info.world_size)
            src = src_col.take(idx).to_pylist()
            trg = trg_col.take(idx).to_pylist()
            ids, truncated = stok.encode(src + trg)
            if truncated:
                counter.add_event("pairs", "sentences_truncated", truncated)
            input_ids, mask = pad_batch(ids, stok.pad_id)
            input_ids, mask = input_ids.to(device), mask.to(device)
            last = micro == cfg.grad_accum - 1
            sync = model.no_sync() if (info.enabled and not last) else nullcontext()
            with sync:
                with autocast():
                    emb = model(input_ids, mask)  # source and target in one call
                out = loss_fn(emb[:local_b], emb[local_b:])
                (out.loss / cfg.grad_accum).backward()
            step_loss += float(out.loss.detach()) / cfg.grad_accum
            step_acc += float(out.accuracy) / cfg.grad_accum
        grad_norm = torch.nn.utils.clip_grad_norm_(encoder.parameters(), cfg.clip_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        if not math.isfinite(step_loss):
            raise FloatingPointError(f"loss became {step_loss} at step {step}")
        step_time = time.perf_counter() - t0
        window_sents += 2 * cfg.batch_size * cfg.grad_accum
        if step % cfg.log_every == 0 or step == halt_at:
            last_loss = all_reduce_mean(step_loss, device)
            acc = all_reduce_mean(step_acc, device)
            elapsed = time.perf_counter() - window_t
            rate = window_sents / max(elapsed, 1e-9)
            rec = {
                "step": step,
                "loss": last_loss,
                "accuracy": acc,
                "lr": scheduler.get_last_lr()[0],
                "grad_norm": float(grad_norm),
                "sentences_per_s": rate,
                "step_time_s": step_time,
                "gather_share": gather_timer.total / max(elapsed, 1e-9),
            }
            metrics.write(rec)
            bar.set_postfix(loss=f"{last_loss:.4f}", sent_s=f"{rate:.0f}")
            window_t, window_sents = time.perf_counter(), 0
            gather_timer.reset()
        bar.update(1)
        if step % cfg.save_every == 0 or step == halt_at:
            save(step)
    bar.close()
    metrics.close()

    summary: dict[str, Any] = {"step": step, "total_steps": total_steps, "loss": last_loss}
    if step >= total_steps and info.is_main:
        final = os.path.join(output, "model")
        save_encoder(encoder, tokenizer, final, max_seq_length=max_len)
        summary["model"] = final
        log.info("final model written to %s", final)
    # Stats are local to each rank's batches; only the main rank's view is reported.
    if info.is_main:
        report = counter.to_report(STAGE, steps=step, world_size=info.world_size)
        problems = check_balanced(report)
        if problems:
            raise RuntimeError(f"unbalanced stats: {problems}")
        write_report(os.path.join(output, "stats.json"), report)
    barrier()
    return summary
