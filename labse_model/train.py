"""Dual-encoder training: the translation-ranking objective on the shared loop (loop.py).

Runs alone or as one torchrun worker (see ``launcher.py``). Each step: every rank takes its
lanes' share of the global micro-batch from the streaming reader (stream.py; a producer thread
tokenises ahead), encodes source and target in ONE forward call (a DDP module called twice per
step would break its gradient hooks), and the loss gathers embeddings from all ranks so the
in-batch negatives are the global batch. With ``chunk_size`` the step is gradient-cached
(grad_cache.py: any batch size in the memory of one chunk); with ``hard_negatives`` the
encoder mines its own hard negatives from the pairs every few steps (hard_negatives.py) and
each batch carries them as extra candidate columns.

Outputs under ``--output``: ``checkpoints/step-*/`` (resumable, see checkpoint.py), ``model/``
(final encoder, HF + sentence-transformers layout), ``metrics.jsonl``, ``tb/`` (TensorBoard),
``stats.json`` (pairs read/kept/dropped per reason; truncations as events), ``vocab/`` when the
vocabulary was learned from the pairs (``learn_vocab`` with neither ``--vocab`` nor ``--init``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import torch

from labse_common.errors import InputError, UsageError
from labse_common.sections.model import ModelConfig
from labse_common.sections.train import TrainConfig
from labse_model import stream, stream_windows
from labse_model.batching import SentenceTokenizer, pad_batch
from labse_model.distributed import DistInfo, barrier, init_from_env
from labse_model.grad_cache import cached_forward_backward
from labse_model.hard_negatives import HardNegativePool
from labse_model.lanes import Lane, lanes_of_rank, source_of, unknown_sources
from labse_model.loop import Batch, LoopConfig, run
from labse_model.loss import AdditiveMarginRankingLoss
from labse_model.model import (
    SentenceEncoder,
    load_encoder,
    load_tokenizer,
    random_encoder,
    save_encoder,
)
from labse_model.optimizer import make_optimizer
from labse_model.train_state import TrainState, find_resume, quiet_workers, restore_state, set_seed

log = logging.getLogger(__name__)

STAGE = "train"
PAIR_UNIT = stream.PAIRS


def learn_vocab_from(texts: Iterator[str], out_dir: str, vocab_size: int) -> None:
    """A cased WordPiece learned by the project's (deterministic) learner: same input, same ids."""
    from labse_common.config import load
    from labse_model.vocab.build import build_vocab

    # A small vocabulary cannot hold every character of 17 scripts twice (## forms): the rarest
    # characters become [UNK] so that a third of the budget is left for real pieces. Nothing
    # is held out: every pair is training data here.
    cfg = load(
        "vocab",
        None,
        flags={
            "vocab_size": vocab_size,
            "heldout_fraction": 0.0,
            "learner": {"max_unique_chars": max(1, (vocab_size - 5) // 3)},
        },
    )
    build_vocab({stream.DEFAULT_GROUP: list(texts)}, cfg, out_dir)


def _build_model(
    model: ModelConfig,
    cfg: TrainConfig,
    output: str,
    scan_res: stream.ScanResult,
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
            raise UsageError(
                "no vocabulary: pass --vocab DIR (e.g. the vocab stage output) or --init "
                "CHECKPOINT (or set learn_vocab=true to learn a small WordPiece from the pairs)"
            )
        vocab = os.path.join(output, "vocab")
        if info.is_main and not os.path.exists(os.path.join(vocab, "tokenizer.json")):
            log.info(
                "no --vocab: learning a %d-piece cased WordPiece from the pairs", cfg.vocab_size
            )
            texts = (s for rec in stream.iter_all_records(scan_res, stream.PAIRS) for s in rec)
            learn_vocab_from(texts, vocab, cfg.vocab_size)
        barrier()
    tokenizer = load_tokenizer(vocab)
    # Same seed on every rank: identical initial weights even before DDP's broadcast.
    return random_encoder(model, tokenizer, cfg.seed), tokenizer


def device_for(info: DistInfo, threads: int | None) -> torch.device:
    device = (
        torch.device("cuda", info.local_rank) if torch.cuda.is_available() else torch.device("cpu")
    )
    if device.type == "cpu":
        # Workers on one node share its cores; oversubscribed OpenMP threads spin and crawl.
        # Sized to the CPUs this process may use (affinity, cgroup quota), not the machine's.
        from labse_common.threads import size_threads

        size_threads(threads, processes=int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    return device


def check_batch_grid(batch_size: int, lanes: int, world: int, what: str) -> None:
    if batch_size % lanes:
        raise ValueError(f"{what}.batch_size {batch_size} is not divisible by {what}.lanes {lanes}")
    if lanes % world:
        raise ValueError(f"{what}.lanes {lanes} is not divisible by the world size {world}")


class DualEncoderObjective:
    stage_name = STAGE

    def __init__(
        self,
        cfg: TrainConfig,
        scan_res: stream.ScanResult,
        stok: SentenceTokenizer,
        tokenizer: Any,
        info: DistInfo,
        device: torch.device,
    ) -> None:
        self.cfg, self.scan_res, self.stok, self.tokenizer = cfg, scan_res, stok, tokenizer
        self.info, self.device = info, device
        self.loss_fn = AdditiveMarginRankingLoss(
            cfg.scale, cfg.margin, cfg.bidirectional, cfg.reduction, cfg.combine
        )
        self.per_lane = cfg.batch_size // cfg.lanes
        self.pool: HardNegativePool | None = None
        self.pool_ids: list[list[int]] | None = None
        self.mine_every = 0
        if cfg.hard_negatives:
            records = [(r[0], r[1]) for r in stream.iter_all_records(scan_res, PAIR_UNIT)]
            self.pool = HardNegativePool([s for s, _ in records], [t for _, t in records])
            # Tokenised once: a batch's negatives are then only looked up.
            self.pool_ids, _ = stok.encode(self.pool.targets)
            self.empty_ids = stok.encode([""])[0][0]
            # Once per epoch by default: the pool seen once by the current encoder.
            self.mine_every = cfg.hard_negatives_every or max(1, len(self.pool) // cfg.batch_size)
            log.info(
                "hard negatives: %d per source, mined every %d steps from %d pairs",
                cfg.hard_negatives,
                self.mine_every,
                len(self.pool),
            )

    def _with_negatives(self, batch: Batch) -> Batch:
        """The batch plus its rows' hard negatives, appended after the targets.

        Done in the training thread, not the producer: which mining a batch uses must not
        depend on how far ahead the producer runs (a rerun or a resume gives the same batches).
        Every row gets exactly ``hard_negatives`` slots (an empty one has group -1 and is
        masked): all ranks must gather the same number of columns, whatever each has mined.
        """
        pool, n = self.pool, self.cfg.hard_negatives
        assert pool is not None and self.pool_ids is not None
        index = batch.tensors["pool_index"].tolist()
        ids: list[list[int]] = []
        extra_groups: list[int] = []
        for i in index:
            negs = pool.negatives_at(i)[:n]
            ids += [self.pool_ids[c] for c in negs] + [self.empty_ids] * (n - len(negs))
            extra_groups += [int(pool.groups[c]) for c in negs] + [-1] * (n - len(negs))
        neg_ids, neg_mask = pad_batch(ids, self.stok.pad_id)
        old_ids, old_mask = batch.tensors["input_ids"], batch.tensors["attention_mask"]
        width = max(old_ids.shape[1], neg_ids.shape[1])

        def widen(x: torch.Tensor, fill: int) -> torch.Tensor:
            return torch.nn.functional.pad(x, (0, width - x.shape[1]), value=fill)

        tensors = {
            "input_ids": torch.cat(
                [widen(old_ids, self.stok.pad_id), widen(neg_ids, self.stok.pad_id)]
            ),
            "attention_mask": torch.cat([widen(old_mask, 0), widen(neg_mask, 0)]),
            "src_groups": torch.tensor([pool.group_at(i) for i in index], dtype=torch.long),
            "extra_groups": torch.tensor(extra_groups, dtype=torch.long),
        }
        return Batch(tensors, batch.cursors, batch.events, batch.samples, batch.tokens)

    def batches(self, state: TrainState) -> Iterator[Batch]:
        cfg = self.cfg
        lanes = lanes_of_rank(cfg.lanes, self.info.rank, self.info.world_size)
        saved = state.cursors.get(PAIR_UNIT, {})
        pos = {j: int(saved.get(j, state.micro * self.per_lane)) for j in lanes}
        its = {
            j: Lane(
                self.scan_res,
                PAIR_UNIT,
                j,
                cfg.lanes,
                cfg.seed,
                cfg.shuffle_blocks,
                cfg.mix_alpha,
                source_weights=cfg.source_weights,
            ).records(pos[j])
            for j in lanes
        }
        while True:
            src: list[str] = []
            trg: list[str] = []
            for j in lanes:
                for _ in range(self.per_lane):
                    s, t = next(its[j])
                    src.append(s)
                    trg.append(t)
                pos[j] += self.per_lane
            ids, truncated = self.stok.encode(src + trg)
            extra: dict[str, torch.Tensor] = {}
            if self.pool is not None:
                extra["pool_index"] = torch.tensor(
                    [self.pool.index_of(s, t) for s, t in zip(src, trg)]
                )
            input_ids, mask = pad_batch(ids, self.stok.pad_id)
            events = {f"{PAIR_UNIT}/event/sentences_truncated": truncated} if truncated else {}
            yield Batch(
                {"input_ids": input_ids, "attention_mask": mask, **extra},
                {PAIR_UNIT: dict(pos)},
                events,
                samples=len(ids),
                tokens=int(mask.sum()),
            )

    def _loss_of(
        self, batch: Batch
    ) -> Callable[[torch.Tensor], tuple[torch.Tensor, dict[str, torch.Tensor]]]:
        """The loss of this batch's embeddings: rows are sources, targets, then the hard
        negatives (``hard_negatives`` per source) when they are on."""
        t = batch.tensors
        if "src_groups" not in t:

            def loss(emb: torch.Tensor):
                b = emb.shape[0] // 2
                out = self.loss_fn(emb[:b], emb[b:])
                return out.loss, {"loss": out.loss.detach(), "accuracy": out.accuracy}

            return loss
        src_groups = t["src_groups"].to(self.device)
        extra_groups = t["extra_groups"].to(self.device)

        def loss_hard(emb: torch.Tensor):
            b = src_groups.shape[0]
            out = self.loss_fn(emb[:b], emb[b : 2 * b], emb[2 * b :], src_groups, extra_groups)
            return out.loss, {"loss": out.loss.detach(), "accuracy": out.accuracy}

        return loss_hard

    def train_step(self, model: torch.nn.Module, batch: Batch):
        if self.pool is not None and "src_groups" not in batch.tensors:
            batch = self._with_negatives(batch)
        ids = batch.tensors["input_ids"].to(self.device, non_blocking=True)
        mask = batch.tensors["attention_mask"].to(self.device, non_blocking=True)
        return self._loss_of(batch)(model(ids, mask))  # all rows in one call

    def forward_backward(
        self,
        model: torch.nn.Module,
        batch: Batch,
        loss_scale: float,
        autocast: Callable[[], AbstractContextManager],
        sync: bool,
    ):
        """One micro-batch with its backward; gradient caching when ``chunk_size`` is smaller
        than this rank's sentences (source and target rows)."""
        chunk = self.cfg.chunk_size
        if self.pool is not None:
            batch = self._with_negatives(batch)
        ids = batch.tensors["input_ids"]
        if chunk is None or chunk >= ids.shape[0]:
            with autocast():
                loss, parts = self.train_step(model, batch)
            (loss * loss_scale).backward()
            return loss, parts
        ids = ids.to(self.device, non_blocking=True)
        mask = batch.tensors["attention_mask"].to(self.device, non_blocking=True)
        return cached_forward_backward(
            model, ids, mask, self._loss_of(batch), chunk, loss_scale, autocast, sync
        )

    def save_model(self, state: TrainState, directory: str) -> None:
        save_encoder(
            state.model, self.tokenizer, directory, max_seq_length=self.stok.max_seq_length
        )

    def evaluate(self, state: TrainState) -> dict[str, float]:
        return {}

    def mine_hard_negatives(self, state: TrainState) -> None:
        """Re-mine with the current weights (every rank: the pool's embedding is shared)."""
        assert self.pool is not None
        t0 = time.perf_counter()
        self.pool.refresh(
            state.model,
            self.tokenizer,
            self.stok.max_seq_length,
            self.device,
            self.cfg.hard_negatives,
        )
        log.info("hard negatives mined at step %d in %.1f s", state.step, time.perf_counter() - t0)

    def after_step(self, state: TrainState) -> bool:
        if self.pool is not None and state.step % self.mine_every == 0:
            self.mine_hard_negatives(state)
        return False

    def lr_scale(self, state: TrainState) -> float:
        return 1.0


def _scan_pairs(
    pairs: list[str], cfg: TrainConfig, info: DistInfo, output: str
) -> stream.ScanResult:
    """The pair files' blocks (kept in the output for a restart: labse_model.scan_cache)."""
    groups = stream.expand_inputs(pairs)
    scan_res = stream.scan_distributed(
        groups, PAIR_UNIT, cfg.block_rows, 0.0, 0, info, os.path.join(output, "scan")
    )
    if scan_res.total_rows() == 0:
        raise stream.NoUsableInput(
            None,
            "no usable pairs in the given files (all empty, malformed or unreadable)",
            "--pairs",
        )
    unknown = unknown_sources(scan_res.groups, cfg.source_weights)
    if unknown:
        found = sorted({source_of(g) for g in scan_res.groups} - {""})
        raise InputError(
            None,
            f"train.source_weights names {unknown}, but the pairs' folders hold "
            + (f"the sources {found}" if found else "no source (plain <lang>/ folders)")
            + ": sources are the <source>. prefixes of the pair folders' names",
            "--pairs",
        )
    if len(groups) > 1:
        stream.finish_groups(scan_res, sorted(groups), PAIR_UNIT)
    log.info(
        "%d pairs in %d blocks, global batch %d in %d lanes",
        scan_res.total_rows(),
        sum(len(b) for b in scan_res.groups.values()),
        cfg.batch_size,
        cfg.lanes,
    )
    return scan_res


def _check_sections(model: ModelConfig, cfg: TrainConfig) -> None:
    """The typed sections, as loaded: a dict here would skip the loader's checks."""
    if not isinstance(model, ModelConfig):
        raise TypeError(
            f"train() takes the typed model section (ModelConfig), not {type(model).__name__}"
        )
    if not isinstance(cfg, TrainConfig):
        raise TypeError(
            f"train() takes the typed train section (TrainConfig), not {type(cfg).__name__}"
        )


def train(
    model: ModelConfig,
    cfg: TrainConfig,
    pairs: list[str],
    output: str,
    vocab: str | None = None,
    init: str | None = None,
    max_steps: int | None = None,
    stop_at_step: int | None = None,
) -> dict:
    """Train (or resume) a dual encoder; returns a summary dict (final step, last loss, paths).

    ``model`` and ``cfg`` are the ``model:`` and ``train:`` sections as loaded
    (``labse_common.config.load``). ``max_steps`` overrides ``train.steps`` (the schedule
    length); ``stop_at_step`` halts after that step with a checkpoint, as a preempted job slice
    would, to be resumed later.
    """
    _check_sections(model, cfg)
    total_steps = int(max_steps or cfg.steps)
    if not pairs:
        raise ValueError("no pair files given (--pairs FILE)")
    info = init_from_env()
    check_batch_grid(cfg.batch_size, cfg.lanes, info.world_size, "train")
    quiet_workers(info)
    device = device_for(info, cfg.threads)
    os.makedirs(os.path.join(output, "checkpoints"), exist_ok=True)
    scan_res = _scan_pairs(pairs, cfg, info, output)

    resume = find_resume(os.path.join(output, "checkpoints"), info)
    if resume:
        log.info("resuming from %s", resume)
        encoder, tokenizer, _ = load_encoder(resume)
    else:
        encoder, tokenizer = _build_model(model, cfg, output, scan_res, vocab, init, info)
    encoder.length_groups = cfg.length_groups
    stok = SentenceTokenizer(
        tokenizer, min(cfg.max_seq_length, encoder.bert.config.max_position_embeddings)
    )
    encoder.to(device)
    state = TrainState(
        encoder,
        make_optimizer(
            encoder, cfg.lr, cfg.weight_decay, cfg.adam_eps, device, cfg.embedding_lr_scale
        ),
    )
    set_seed(cfg.seed + info.rank)  # dropout masks differ per rank, reproducibly
    fingerprint = {
        "num_pairs": scan_res.total_rows(),
        "batch_size": cfg.batch_size,
        "lanes": cfg.lanes,
        "seed": cfg.seed,
        "block_rows": cfg.block_rows,
    }
    if resume:
        restore_state(state, resume, fingerprint, info, cfg.seed)
    state.extra["data"] = fingerprint

    objective = DualEncoderObjective(cfg, scan_res, stok, tokenizer, info, device)
    if objective.pool is not None and state.step >= objective.mine_every:
        objective.mine_hard_negatives(state)  # a resumed run: the negatives are not saved
    bound = stream_windows.window_bound(
        scan_res, cfg.lanes, cfg.lanes // info.world_size, cfg.shuffle_blocks
    )
    windows = stream_windows.log_window_bounds(
        {PAIR_UNIT: bound}, cfg.shuffle_blocks, cfg.block_rows
    )
    loop_cfg = LoopConfig.of(cfg, total_steps, stop_at_step)
    extra = {"shuffle_windows": windows}
    return run(objective, state, loop_cfg, output, info, device, scan_res.counts, extra)
