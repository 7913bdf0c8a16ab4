"""The one training loop shared by pretraining (MLM/TLM) and dual-encoder training.

Split in three:

* :class:`TrainState`: the model being optimised, its optimizer, the step, the data position
  (micro-batches consumed and every lane's cursor), the stacking stage and the run-wide event
  counts; saved and restored with :mod:`labse_model.checkpoint` (plus one RNG file per rank)
  (:mod:`labse_model.train_state`).
* an **objective** (``train.DualEncoderObjective``, ``pretrain.PretrainObjective``): builds the
  batches (a prefetching producer thread tokenises and masks ahead), computes ``train_step``,
  evaluates on held-out data, writes the model, and may change the model between steps
  (progressive stacking).
* :func:`run`: DDP, gradient accumulation, clipping, the learning-rate schedule (linear warmup
  then linear decay over the whole run, across stacking stages; :mod:`labse_model.optimizer`), metrics (metrics.jsonl and
  TensorBoard), the progress bar, checkpoints, and stats.json.

The loop synchronises with the accelerator only at logging steps, or at every step when
``timing`` is on (honest per-step times cost a sync each).
"""

from __future__ import annotations

import json
import logging
import math
import os
import queue
import threading
import time
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from tqdm import tqdm

from labse_common.stats import StageCounter, check_balanced, write_report
from labse_model import checkpoint as ckpt
from labse_model.distributed import DistInfo, all_reduce_mean, barrier, gather_timer
from labse_model.optimizer import linear_schedule
from labse_model.train_state import TrainState, rng_state

log = logging.getLogger(__name__)


@dataclass
class Batch:
    tensors: dict[str, torch.Tensor]
    cursors: dict[str, dict[int, int]]  # lane cursors after this micro-batch
    events: dict[str, int] = field(default_factory=dict)  # e.g. truncations in this batch
    samples: int = 0  # sentences (for rates)
    tokens: int = 0


class Prefetcher:
    """Runs a batch generator in a producer thread, ``depth`` batches ahead of the step."""

    _END = object()

    def __init__(self, source: Iterator[Batch], depth: int = 4) -> None:
        self.q: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=self._run, args=(source,), daemon=True, name="batch-producer"
        )
        self.thread.start()

    def _run(self, source: Iterator[Batch]) -> None:
        try:
            for item in source:
                while not self.stop.is_set():
                    try:
                        self.q.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if self.stop.is_set():
                    return
            self.q.put(self._END)
        except BaseException as e:  # re-raised in the training thread
            self.q.put(e)

    def __iter__(self) -> Prefetcher:
        return self

    def __next__(self) -> Batch:
        item = self.q.get()
        if item is self._END:
            raise StopIteration
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)


class Objective(Protocol):
    stage_name: str

    def batches(self, state: TrainState) -> Iterator[Batch]: ...

    def train_step(
        self, model: torch.nn.Module, batch: Batch
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]: ...

    def save_model(self, state: TrainState, directory: str) -> None: ...

    def evaluate(self, state: TrainState) -> dict[str, float]: ...

    def after_step(self, state: TrainState) -> bool: ...

    def lr_scale(self, state: TrainState) -> float: ...


class Metrics:
    """metrics.jsonl and TensorBoard on the main rank."""

    def __init__(
        self, output: str, resume_step: int, tensorboard: bool, enabled: bool, prefix: str = "train"
    ) -> None:
        self.enabled = enabled
        self.prefix = prefix
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
                    self.tb.add_scalar(f"{self.prefix}/{k}", v, rec["step"])

    def close(self) -> None:
        if not self.enabled:
            return
        self.file.close()
        if self.tb is not None:
            self.tb.close()


class LoopKeys(Protocol):
    """The keys of a stage's section the loop reads; the ``train:`` and ``pretrain:`` sections
    (labse_common/sections/) declare them, with their defaults, ranges and help."""

    grad_accum: int
    clip_norm: float
    lr: float
    warmup_steps: int
    save_every: int
    keep_checkpoints: int
    log_every: int
    tensorboard: bool
    progress: bool
    bf16: bool
    timing: bool
    prefetch: int


@dataclass(frozen=True)
class LoopConfig:
    """One run of the loop: the stage's typed section, read as is (no copy of its keys), and
    this run's step range. Built by :meth:`of`, the one place both stages make it."""

    section: LoopKeys
    total_steps: int
    halt_at: int

    @classmethod
    def of(cls, section: LoopKeys, total_steps: int, stop_at_step: int | None = None) -> LoopConfig:
        """``total_steps`` is the schedule's length; ``stop_at_step`` halts earlier with a
        checkpoint, as a preempted job slice would."""
        halt_at = min(total_steps, stop_at_step) if stop_at_step else total_steps
        return cls(section, int(total_steps), int(halt_at))

    @property
    def eval_every(self) -> int:
        # Only pretraining evaluates on held-out data; the train: section has no such key.
        return int(getattr(self.section, "eval_every", 0))


def _gather_objects(obj: Any, info: DistInfo) -> list:
    if not info.enabled:
        return [obj]
    import torch.distributed as dist

    out: list = [None] * info.world_size
    dist.all_gather_object(out, obj)
    return out


def _merge_cursors(parts: list[dict]) -> dict[str, dict[int, int]]:
    merged: dict[str, dict[int, int]] = {}
    for p in parts:
        for stream, lanes in p.items():
            merged.setdefault(stream, {}).update(lanes)
    return merged


def _sum_counts(parts: list[dict]) -> dict[str, int]:
    c = StageCounter()
    for p in parts:
        c.merge(p)
    return dict(c.counts)


class _Loop:
    """What the steps of one run share: the wrapped model, the schedule, metrics, this rank's
    events since the start (or resume) and the data position of the last micro-batch."""

    def __init__(
        self,
        objective: Objective,
        state: TrainState,
        cfg: LoopConfig,
        output: str,
        info: DistInfo,
        device: torch.device,
    ) -> None:
        self.objective, self.state, self.cfg, self.info, self.device = (
            objective,
            state,
            cfg,
            info,
            device,
        )
        self.section = section = cfg.section  # the stage's typed section, read, never copied
        self.output = output
        self.ckpt_root = os.path.join(output, "checkpoints")
        self.schedule = linear_schedule(section.warmup_steps, cfg.total_steps)
        bf16 = bool(section.bf16) and device.type == "cuda" and torch.cuda.is_bf16_supported()
        self.autocast = (
            (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if bf16 else nullcontext
        )
        self.metrics = Metrics(
            output, state.step, section.tensorboard, info.is_main, objective.stage_name
        )
        self.local_events = StageCounter()
        self.cursors = dict(state.cursors)
        self.model = self.wrap(state.model)
        self.model.train()
        self.last: dict[str, float] = {}
        self.window_t, self.window_samples, self.window_tokens = time.perf_counter(), 0, 0

    def wrap(self, module: torch.nn.Module) -> torch.nn.Module:
        if not self.info.enabled:
            return module
        ids = [self.info.local_rank] if self.device.type == "cuda" else None
        return DDP(module, device_ids=ids)

    def save(self, at_step: int) -> None:
        """A checkpoint of ``at_step``: every rank's RNG and cursors, the main rank the rest."""
        info, state = self.info, self.state
        barrier()
        parts = _gather_objects(
            {"cursors": self.cursors, "events": dict(self.local_events.counts)}, info
        )
        tmp = ckpt.tmp_dir_for(self.ckpt_root, at_step)
        if info.is_main:
            ckpt.prepare_tmp(self.ckpt_root, at_step)
        barrier()
        torch.save(rng_state(), os.path.join(tmp, f"rng-rank{info.rank}.pt"))
        barrier()
        if info.is_main:
            state.cursors = _merge_cursors([p["cursors"] for p in parts])
            saved_events = _sum_counts([state.events] + [p["events"] for p in parts])
            self.objective.save_model(state, tmp)
            ts = state.trainer_state()
            ts["events"] = saved_events
            ts["world_size"] = info.world_size
            torch.save(ts, os.path.join(tmp, ckpt.TRAINER_STATE))
            path = ckpt.finalize(
                self.ckpt_root,
                at_step,
                self.section.keep_checkpoints,
                {"world_size": info.world_size, "stage": state.stage},
            )
            log.info("checkpoint %s", path)
        barrier()

    def evaluate_at_start(self) -> None:
        """The held-out starting point of the learning curve."""
        if self.cfg.eval_every and self.state.step == 0:
            if self.info.is_main:
                rec = {"step": 0, "stage": self.state.stage, **self.objective.evaluate(self.state)}
                self.metrics.write(rec)
            barrier()

    def accumulate(self, batches: Iterator[Batch]) -> dict[str, torch.Tensor]:
        """Forward and backward of ``grad_accum`` micro-batches; their mean loss parts."""
        section, accum = self.section, self.section.grad_accum
        sums: dict[str, torch.Tensor] = {}
        for micro in range(accum):
            batch = next(batches)
            for k, v in batch.events.items():
                self.local_events.counts[k] += v
            last_micro = micro == accum - 1
            sync = self.model.no_sync() if (self.info.enabled and not last_micro) else nullcontext()
            with sync:
                own_backward = getattr(self.objective, "forward_backward", None)
                if own_backward is not None:
                    # The objective runs its own backward passes (gradient caching).
                    loss, parts = own_backward(
                        self.model, batch, 1.0 / section.grad_accum, self.autocast, last_micro
                    )
                else:
                    with self.autocast():
                        loss, parts = self.objective.train_step(self.model, batch)
                    (loss / section.grad_accum).backward()
            for k, v in parts.items():
                sums[k] = sums.get(k, 0) + v.detach().float() / section.grad_accum
            self.cursors = batch.cursors
            self.state.micro += 1
            self.window_samples += batch.samples
            self.window_tokens += batch.tokens
        return sums

    def optimizer_step(self) -> tuple[torch.Tensor, float]:
        """Clip, set the scheduled learning rate, step; returns (gradient norm, lr scale)."""
        state, section = self.state, self.section
        params = [p for p in state.model.parameters() if p.requires_grad]
        grad_norm = torch.nn.utils.clip_grad_norm_(params, section.clip_norm)
        scale = self.schedule(state.step) * self.objective.lr_scale(state)
        for g in state.optimizer.param_groups:
            g["lr"] = section.lr * scale * g.get("lr_mult", 1.0)
        state.optimizer.step()
        state.optimizer.zero_grad(set_to_none=True)
        state.step += 1
        return grad_norm, scale

    def log_step(
        self,
        sums: dict[str, torch.Tensor],
        grad_norm: torch.Tensor,
        scale: float,
        step_time: float,
        bar: tqdm,
    ) -> None:
        """One metrics record (rates over the window since the last one) and the bar."""
        state, info = self.state, self.info
        # The only per-step host sync without timing: reading the logged values.
        rec: dict[str, Any] = {"step": state.step}
        for k, v in sums.items():
            rec[k] = all_reduce_mean(float(v), self.device)
        if not math.isfinite(rec.get("loss", 0.0)):
            raise FloatingPointError(f"loss became {rec['loss']} at step {state.step}")
        elapsed = max(time.perf_counter() - self.window_t, 1e-9)
        rec.update(
            lr=self.section.lr * scale,
            grad_norm=float(grad_norm),
            sentences_per_s=self.window_samples * info.world_size / elapsed,
            tokens_per_s=self.window_tokens * info.world_size / elapsed,
            step_time_s=step_time,
            stage=state.stage,
            gather_share=gather_timer.total / elapsed,
        )
        if self.cfg.eval_every and state.step % self.cfg.eval_every == 0 and info.is_main:
            rec.update(self.objective.evaluate(state))
        barrier()
        self.metrics.write(rec)
        self.last = rec
        bar.set_postfix(
            loss=f"{rec.get('loss', float('nan')):.4f}", tok_s=f"{rec['tokens_per_s']:.0f}"
        )
        self.window_t, self.window_samples, self.window_tokens = time.perf_counter(), 0, 0
        gather_timer.reset()

    def step(self, batches: Iterator[Batch], bar: tqdm) -> None:
        """One optimizer step, its log record, a stacking change and a checkpoint when due."""
        state, section, cfg = self.state, self.section, self.cfg
        t0 = time.perf_counter()
        sums = self.accumulate(batches)
        grad_norm, scale = self.optimizer_step()
        if section.timing and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        step_time = time.perf_counter() - t0
        if state.step % section.log_every == 0 or state.step == cfg.halt_at:
            self.log_step(sums, grad_norm, scale, step_time, bar)
        bar.update(1)
        if state.step < cfg.total_steps and self.objective.after_step(state):
            # Progressive stacking replaced the model (before any checkpoint of this step,
            # so a resume finds the new stage): rewrap it. The producer runs on: its
            # batches do not depend on the model.
            self.model = self.wrap(state.model)
            self.model.train()
        if state.step % section.save_every == 0 or state.step == cfg.halt_at:
            self.save(state.step)

    def finish(self, input_counts: dict[str, int], report_extra: dict | None) -> dict:
        """The final model (when the schedule is done), stats.json, and the run's summary."""
        state, cfg, info = self.state, self.cfg, self.info
        summary: dict[str, Any] = {
            "step": state.step,
            "total_steps": cfg.total_steps,
            "loss": self.last.get("loss", float("nan")),
            "last": self.last,
        }
        if state.step >= cfg.total_steps and info.is_main:
            final = os.path.join(self.output, "model")
            self.objective.save_model(state, final)
            summary["model"] = final
            log.info("final model written to %s", final)
        local = dict(self.local_events.counts)
        events = _sum_counts([state.events] + _gather_objects(local, info))
        if info.is_main:
            c = StageCounter()
            c.merge(input_counts)
            c.merge(events)
            report = c.to_report(
                self.objective.stage_name,
                steps=state.step,
                world_size=info.world_size,
                **(report_extra or {}),
            )
            problems = check_balanced(report)
            if problems:
                raise RuntimeError(f"unbalanced stats: {problems}")
            write_report(os.path.join(self.output, "stats.json"), report)
        barrier()
        return summary


def run(
    objective: Objective,
    state: TrainState,
    cfg: LoopConfig,
    output: str,
    info: DistInfo,
    device: torch.device,
    input_counts: dict[str, int],
    report_extra: dict | None = None,
) -> dict:
    """Train from ``state`` to ``cfg.halt_at``; checkpoints, metrics, final model, stats.json."""
    loop = _Loop(objective, state, cfg, output, info, device)
    bar = tqdm(
        total=cfg.total_steps,
        initial=state.step,
        desc=objective.stage_name,
        unit="step",
        disable=not (info.is_main and cfg.section.progress),
    )
    gather_timer.reset()
    batches = Prefetcher(objective.batches(state), cfg.section.prefetch)
    loop.evaluate_at_start()
    try:
        while state.step < cfg.halt_at:
            loop.step(batches, bar)
    finally:
        batches.close()
        bar.close()
        loop.metrics.close()
    return loop.finish(input_counts, report_extra)
