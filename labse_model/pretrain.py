"""Encoder pretraining: MLM on monolingual sentences + TLM on translation pairs, with progressive
stacking, on the shared loop (loop.py) and the streaming reader (stream.py).

Each micro-batch holds ``mlm_batch_size`` packed monolingual sequences and ``tlm_batch_size``
``[CLS] a [SEP] b [SEP]`` pair sequences (global counts, split over the data lanes and ranks),
padded together and run through ONE forward call; the loss is the MLM mean plus the TLM mean.
After masking, the pairs are packed several to a row (``pack_pairs``) and, with
``sentence_segments``, each packed sentence is its own segment; segments carry their own
positions and attend only to themselves (masking.pack_rows, mlm.MaskedLM).
A producer thread tokenises, packs and masks ahead of the step. Masks are drawn from
``rng(seed, micro-batch, lane)``, so they do not depend on the number of ranks either.

Progressive stacking: stage ``s`` of ``S`` trains ``L / 2**(S-1-s)`` layers for
``stage_steps[s]`` steps; at a stage boundary the model is stacked (mlm.stack) and the optimizer
is rebuilt, its moments reset or duplicated like the layers. The learning-rate schedule runs
over the sum of the stage steps, unbroken. Checkpoints record the stage (trainer_state.pt and the
manifest), and the saved model has that stage's depth, so a resume lands in the right stage.

Outputs under ``--output``: ``checkpoints/``, ``model/`` (HF/sentence-transformers encoder plus
``mlm_head.safetensors``), ``metrics.jsonl`` (loss, mlm_loss, tlm_loss, accuracies, held-out
``eval_*``, tokens/s, stage), ``tb/``, ``stats.json``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from tokenizers import Tokenizer

from labse_common.sections.model import ModelConfig
from labse_common.sections.pretrain import PretrainConfig
from labse_model import stream, stream_windows
from labse_model.distributed import DistInfo, init_from_env
from labse_model.lanes import Lane, lanes_of_rank
from labse_model.loop import Batch, LoopConfig, run
from labse_model.masking import MaskSpec, collate, mask_tokens, pack_rows, pack_sentences, tlm_pair
from labse_model.mlm import MaskedLM, load_head, save_head, stack, stack_optimizer_state
from labse_model.model import load_encoder, load_tokenizer, random_encoder, save_encoder
from labse_model.optimizer import make_optimizer
from labse_model.train import check_batch_grid, device_for
from labse_model.train_state import TrainState, find_resume, quiet_workers, restore_state, set_seed

log = logging.getLogger(__name__)

STAGE = "pretrain"
MLM, TLM = "mlm", "tlm"
_TOKENIZE_CHUNK = 256


def stage_layers(total_layers: int, stages: int) -> list[int]:
    """Layers per stage: L/4, L/2, L for three stages."""
    div = 2 ** (stages - 1)
    if total_layers % div:
        from labse_common.config import ConfigError  # a UsageError: one line, exit 2 on the CLI

        raise ConfigError(
            f"model.num_hidden_layers={total_layers} cannot be stacked in {stages} stages (not divisible by {div})"
        )
    return [total_layers // 2 ** (stages - 1 - s) for s in range(stages)]


def _pack_pair_rows(
    rows: dict[str, np.ndarray], parts: list[int], max_len: int
) -> tuple[dict[str, np.ndarray], list[int]]:
    """The TLM rows (the tail of ``parts``) packed several to a row. MLM rows stay as they are:
    one segment per sentence with ``sentence_segments``, else one segment per row."""
    first = parts.index(1)
    keys = ("input_ids", "token_type_ids", "attention_mask", "labels")
    packed = pack_rows({k: rows[k][first:] for k in keys}, max_len)
    mono = {k: v[:first] for k, v in rows.items()}
    width = max(packed["input_ids"].shape[1], mono["input_ids"].shape[1])
    if "segment_ids" not in mono:
        mono["position_ids"] = np.broadcast_to(
            np.arange(mono["input_ids"].shape[1]), mono["input_ids"].shape
        )
        mono["segment_ids"] = mono["attention_mask"]

    def widen(a: np.ndarray, fill: int) -> np.ndarray:
        return np.pad(a, ((0, 0), (0, width - a.shape[1])), constant_values=fill)

    out = {
        k: np.concatenate(
            [
                widen(mono[k], -100 if k == "labels" else 0),
                widen(packed[k], -100 if k == "labels" else 0),
            ]
        )
        for k in packed
    }
    return out, [0] * first + [1] * len(packed["input_ids"])


class PretrainObjective:
    stage_name = STAGE

    def __init__(
        self,
        cfg: PretrainConfig,
        sents: stream.ScanResult | None,
        pairs: stream.ScanResult | None,
        tokenizer: Any,
        info: DistInfo,
        device: torch.device,
        max_len: int,
    ) -> None:
        self.cfg, self.sents, self.pairs, self.tokenizer = cfg, sents, pairs, tokenizer
        self.info, self.device, self.max_len = info, device, max_len
        self.tok = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
        self.tok.no_padding()
        self.tok.no_truncation()
        self.cls_id, self.sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
        self.pad_id = tokenizer.pad_token_id or 0
        self.special_ids = tuple(sorted(set(tokenizer.all_special_ids)))
        self.spec = MaskSpec(
            cfg.mask_rate,
            cfg.max_masked,
            cfg.mask_token_share,
            cfg.random_token_share,
            tokenizer.mask_token_id,
            self.special_ids,
            len(tokenizer),
        )
        self.per_lane = {
            MLM: cfg.mlm_batch_size // cfg.lanes if sents else 0,
            TLM: cfg.tlm_batch_size // cfg.lanes if pairs else 0,
        }
        self.boundaries = list(np.cumsum(cfg.stage_steps))
        self._eval_batches: list | None = None

    # --- inputs ----------------------------------------------------------------------------

    def _encode(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.tok.encode_batch(texts, add_special_tokens=False)]

    def _mlm_lane(self, lane: int, start: int) -> Iterator[tuple]:
        """(packed sequence, sentence cursor after it, truncated so far) for one lane."""
        records = Lane(
            self.sents,
            stream.SENTENCES,
            lane,
            self.cfg.lanes,
            self.cfg.seed,
            self.cfg.shuffle_blocks,
            self.cfg.mix_alpha,
            self.cfg.heldout_fraction,
        ).records(start)

        def token_lists() -> Iterator[list[int]]:
            while True:
                chunk = [next(records) for _ in range(_TOKENIZE_CHUNK)]
                yield from self._encode(chunk)

        stats: dict[str, int] = {}
        for seq, consumed in pack_sentences(
            token_lists(), self.max_len, self.cls_id, self.sep_id, stats, self.cfg.sentence_segments
        ):
            yield seq, start + consumed, stats.get("truncated", 0)

    def _tlm_lane(self, lane: int, start: int) -> Iterator[tuple]:
        records = Lane(
            self.pairs,
            stream.PAIRS,
            lane,
            self.cfg.lanes,
            self.cfg.seed,
            self.cfg.shuffle_blocks,
            self.cfg.mix_alpha,
            self.cfg.heldout_fraction,
        ).records(start)
        pos = start
        truncated = 0
        while True:
            chunk = [next(records) for _ in range(_TOKENIZE_CHUNK)]
            enc = self._encode([t for rec in chunk for t in rec])
            for i in range(len(chunk)):
                seq, cut = tlm_pair(
                    enc[2 * i], enc[2 * i + 1], self.max_len, self.cls_id, self.sep_id
                )
                truncated += int(cut)
                pos += 1
                yield seq, pos, truncated

    def _mask(self, seqs: list, rng: np.random.Generator) -> dict[str, np.ndarray]:
        arrays = collate(seqs, self.pad_id, self.special_ids)
        arrays["input_ids"], arrays["labels"] = mask_tokens(
            arrays["input_ids"], arrays["real"], self.spec, rng
        )
        return arrays

    def batches(self, state: TrainState) -> Iterator[Batch]:
        cfg = self.cfg
        lanes = lanes_of_rank(cfg.lanes, self.info.rank, self.info.world_size)
        makers = {MLM: self._mlm_lane, TLM: self._tlm_lane}
        its: dict[str, dict[int, Iterator]] = {}
        cursors: dict[str, dict[int, int]] = {}
        seen_trunc: dict[tuple[str, int], int] = {}
        for kind, n in self.per_lane.items():
            if not n:
                continue
            saved = state.cursors.get(kind, {})
            cursors[kind] = {j: int(saved.get(j, 0)) for j in lanes}
            its[kind] = {j: makers[kind](j, cursors[kind][j]) for j in lanes}
        micro = state.micro
        while True:
            seqs, parts, events = [], [], {}
            rows_by_lane: list[tuple[int, int, int]] = []
            for kind in (MLM, TLM):
                if kind not in its:
                    continue
                for j in lanes:
                    first = len(seqs)
                    for _ in range(self.per_lane[kind]):
                        seq, cur, trunc = next(its[kind][j])
                        seqs.append(seq)
                        parts.append(0 if kind == MLM else 1)
                    cursors[kind][j] = cur
                    new = trunc - seen_trunc.get((kind, j), 0)
                    seen_trunc[(kind, j)] = trunc
                    if new:
                        unit = stream.SENTENCES if kind == MLM else stream.PAIRS
                        key = f"{unit}/event/{'sentences' if kind == MLM else 'pairs'}_truncated"
                        events[key] = events.get(key, 0) + new
                    rows_by_lane.append((first, len(seqs), j))
            arrays = collate(seqs, self.pad_id, self.special_ids)
            labels = np.full_like(arrays["input_ids"], -100)
            ids = arrays["input_ids"].copy()
            # One mask stream per (micro-batch, lane, objective): independent of the rank layout.
            # Each lane's rows are masked at their own width, not the rank's padded width.
            for a, b, j in rows_by_lane:
                rng = np.random.default_rng([cfg.seed, 7, micro, j, parts[a]])
                w = int(arrays["attention_mask"][a:b].sum(1).max())
                ids[a:b, :w], labels[a:b, :w] = mask_tokens(
                    arrays["input_ids"][a:b, :w], arrays["real"][a:b, :w], self.spec, rng
                )
            rows = {
                "input_ids": ids,
                "token_type_ids": arrays["token_type_ids"],
                "attention_mask": arrays["attention_mask"],
                "labels": labels,
            }
            for k in ("segment_ids", "position_ids"):
                if k in arrays:
                    rows[k] = arrays[k]
            if cfg.pack_pairs and parts and parts[-1] == 1:
                # After masking, so the masks (and the losses) are those of the unpacked rows.
                rows, parts = _pack_pair_rows(rows, parts, self.max_len)
            tensors = {k: torch.from_numpy(v) for k, v in rows.items()}
            tensors["masked_index"] = torch.from_numpy(
                np.flatnonzero(rows["labels"].reshape(-1) != -100)
            )
            tensors["part"] = torch.tensor(parts)
            micro += 1
            yield Batch(
                tensors,
                {k: dict(v) for k, v in cursors.items()},
                events,
                samples=sum(s.sentences for s in seqs),
                tokens=int(arrays["attention_mask"].sum()),
            )

    # --- step ------------------------------------------------------------------------------

    def train_step(self, model: torch.nn.Module, batch: Batch):
        t = {k: v.to(self.device, non_blocking=True) for k, v in batch.tensors.items()}
        losses, correct, rows = model(
            t["input_ids"],
            t["attention_mask"],
            t["token_type_ids"],
            t["labels"],
            t["masked_index"],
            t.get("position_ids"),
            t.get("segment_ids"),
        )
        part = t["part"][rows]
        loss = torch.zeros((), device=self.device)
        out: dict[str, torch.Tensor] = {}
        # Each objective is a mean over the GLOBAL batch's predicted tokens: ranks hold different
        # numbers of them, so a rank's sum is divided by the global count (times the world size,
        # as DDP and the logged metrics average over ranks); a per-rank mean would weight the
        # tokens differently from one process holding the whole batch.
        counts = torch.stack([(part == 0).sum(), (part == 1).sum()]).float()
        world = self.info.world_size
        if world > 1:
            dist.all_reduce(counts)
        for name, p in ((MLM, 0), (TLM, 1)):
            sel = part == p
            if not bool(self.per_lane[name]):
                continue
            n = counts[p].clamp(min=1) / world
            lp = (losses * sel).sum() / n
            loss = loss + lp
            out[f"{name}_loss"] = lp.detach()
            out[f"{name}_accuracy"] = (correct * sel).sum().float() / n
        out["loss"] = loss.detach()
        return loss, out

    # --- held-out --------------------------------------------------------------------------

    def _heldout(self) -> list:
        if self._eval_batches is not None:
            return self._eval_batches
        rng = np.random.default_rng([self.cfg.seed, 99])
        out = []
        if self.sents is not None and self.sents.heldout:
            seqs = [
                s
                for s, _ in pack_sentences(
                    iter(self._encode(self.sents.heldout)),
                    self.max_len,
                    self.cls_id,
                    self.sep_id,
                    {},
                    self.cfg.sentence_segments,
                )
            ]
            for i in range(0, len(seqs), 32):
                out.append((MLM, self._mask(seqs[i : i + 32], rng)))
        if self.pairs is not None and self.pairs.heldout:
            enc = self._encode([t for rec in self.pairs.heldout for t in rec])
            seqs = [
                tlm_pair(enc[2 * i], enc[2 * i + 1], self.max_len, self.cls_id, self.sep_id)[0]
                for i in range(len(self.pairs.heldout))
            ]
            for i in range(0, len(seqs), 32):
                out.append((TLM, self._mask(seqs[i : i + 32], rng)))
        self._eval_batches = out
        return out

    @torch.no_grad()
    def evaluate(self, state: TrainState) -> dict[str, float]:
        """Held-out MLM/TLM loss and accuracy, with fixed masks (comparable across steps)."""
        model = state.model
        was = model.training
        model.eval()
        sums: dict[str, list[float]] = {}
        for kind, a in self._heldout():
            t = {k: torch.from_numpy(v).to(self.device) for k, v in a.items() if k != "real"}
            losses, correct, _rows = model(
                t["input_ids"],
                t["attention_mask"],
                t["token_type_ids"],
                t["labels"],
                position_ids=t.get("position_ids"),
                segment_ids=t.get("segment_ids"),
            )
            s = sums.setdefault(kind, [0.0, 0.0, 0.0])
            s[0] += float(losses.sum())
            s[1] += float(correct.sum())
            s[2] += len(losses)
        model.train(was)
        out = {}
        for kind, (loss, corr, n) in sums.items():
            out[f"eval_{kind}_loss"] = loss / max(n, 1)
            out[f"eval_{kind}_accuracy"] = corr / max(n, 1)
        return out

    # --- model -----------------------------------------------------------------------------

    def save_model(self, state: TrainState, directory: str) -> None:
        save_encoder(state.model.encoder, self.tokenizer, directory, max_seq_length=self.max_len)
        save_head(state.model, directory)

    def after_step(self, state: TrainState) -> bool:
        if state.stage >= self.cfg.stages - 1 or state.step < self.boundaries[state.stage]:
            return False
        old_model, old_opt = state.model, state.optimizer
        new_model = stack(old_model).to(self.device)
        new_opt = make_optimizer(
            new_model,
            self.cfg.lr,
            self.cfg.weight_decay,
            self.cfg.adam_eps,
            self.device,
            self.cfg.embedding_lr_scale,
        )
        if self.cfg.optimizer_on_stack == "copy":
            stack_optimizer_state(old_opt, old_model, new_opt, new_model)
        state.model, state.optimizer = new_model, new_opt
        state.stage += 1
        log.info(
            "stacking: stage %d with %d layers from step %d",
            state.stage,
            new_model.bert.config.num_hidden_layers,
            state.step,
        )
        return True

    def lr_scale(self, state: TrainState) -> float:
        return 1.0


def _check_sections(model: ModelConfig, cfg: PretrainConfig) -> None:
    """The typed sections, as loaded: a dict here would skip the loader's checks."""
    if not isinstance(model, ModelConfig):
        raise TypeError(
            f"pretrain() takes the typed model section (ModelConfig), not {type(model).__name__}"
        )
    if not isinstance(cfg, PretrainConfig):
        raise TypeError(
            f"pretrain() takes the typed pretrain section (PretrainConfig), not {type(cfg).__name__}"
        )


def _for_inputs(
    cfg: PretrainConfig, sentences: list[str] | None, pairs: list[str] | None
) -> PretrainConfig:
    """The section for this run's inputs: an objective without input trains nothing, so its
    batch size is 0 (a copy; the caller's object is never changed)."""
    if not sentences and not pairs:
        raise ValueError("nothing to pretrain on: give --sentences and/or --pairs")
    cfg = dataclasses.replace(
        cfg,
        mlm_batch_size=cfg.mlm_batch_size if sentences else 0,
        tlm_batch_size=cfg.tlm_batch_size if pairs else 0,
    )
    if cfg.mlm_batch_size + cfg.tlm_batch_size == 0:
        raise ValueError(
            "the inputs given have batch size 0 in the config (mlm_batch_size/tlm_batch_size)"
        )
    return cfg


def _scan(
    specs: list[str], unit: str, cfg: PretrainConfig, info: DistInfo, scan_dir: str, why: str
) -> stream.ScanResult:
    """One input's blocks and held-out share (the scan is kept for a restart: scan_cache)."""
    groups = stream.expand_inputs(specs)
    res = stream.scan_distributed(
        groups, unit, cfg.block_rows, cfg.heldout_fraction, cfg.max_heldout, info, scan_dir
    )
    if unit == stream.SENTENCES:
        stream.finish_groups(res, sorted(groups), unit)
    if res.total_rows() == 0:
        flag, what = (
            ("--sentences", "sentences") if unit == stream.SENTENCES else ("--pairs", "pairs")
        )
        raise stream.NoUsableInput(None, f"no usable {what} in the given inputs ({why})", flag)
    return res


def _scan_inputs(
    cfg: PretrainConfig,
    sentences: list[str] | None,
    pairs: list[str] | None,
    info: DistInfo,
    scan_dir: str,
) -> tuple[stream.ScanResult | None, stream.ScanResult | None, stream.StageCounter]:
    """The sentence and pair scans this run trains on, and their input counts (the pair
    files' counted under ``pair_files/``, apart from the sentence files')."""
    counts = stream.StageCounter()
    sents = pair_scan = None
    if sentences and cfg.mlm_batch_size:
        why = "all empty or unreadable"
        sents = _scan(sentences, stream.SENTENCES, cfg, info, scan_dir, why)
        counts.merge(sents.counts)
    if pairs and cfg.tlm_batch_size:
        why = "all empty, malformed or unreadable"
        pair_scan = _scan(pairs, stream.PAIRS, cfg, info, scan_dir, why)
        c = stream.StageCounter()
        c.merge({k.replace("files/", "pair_files/"): v for k, v in pair_scan.counts.items()})
        counts.merge(c.counts)
    return sents, pair_scan, counts


def _masked_lm(
    model: ModelConfig,
    cfg: PretrainConfig,
    first_layers: int,
    resume: str | None,
    init: str | None,
    vocab: str | None,
) -> tuple[MaskedLM, Any]:
    """The model to train: the checkpoint resumed, else --init's encoder (and its MLM head when
    it has one), else a new encoder of the first stage's depth on --vocab."""
    source = resume or init
    if source:
        enc, tokenizer, _ = load_encoder(source)
        mlm = MaskedLM(enc)
        if not load_head(mlm, source):
            if resume:
                raise RuntimeError(f"{resume} has no MLM head ({source})")
            log.warning("%s has no MLM head: a new one is initialised", source)
        if vocab and init and not resume:
            log.warning("--init given: its own tokenizer is used, --vocab is ignored")
        return mlm, tokenizer
    if not vocab:
        raise ValueError("no vocabulary: pass --vocab DIR (the vocab stage output) or --init DIR")
    tokenizer = load_tokenizer(vocab)
    first = dataclasses.replace(model, num_hidden_layers=first_layers)
    return MaskedLM(random_encoder(first, tokenizer, cfg.seed)), tokenizer


def _window_log(
    cfg: PretrainConfig,
    info: DistInfo,
    sents: stream.ScanResult | None,
    pair_scan: stream.ScanResult | None,
) -> dict:
    """The shuffle windows' bounds per input, logged and kept for stats.json."""
    on_rank = cfg.lanes // info.world_size
    bounds = {
        kind: stream_windows.window_bound(res, cfg.lanes, on_rank, cfg.shuffle_blocks)
        for kind, res in ((stream.SENTENCES, sents), (stream.PAIRS, pair_scan))
        if res
    }
    return stream_windows.log_window_bounds(bounds, cfg.shuffle_blocks, cfg.block_rows)


def pretrain(
    model: ModelConfig,
    cfg: PretrainConfig,
    sentences: list[str] | None,
    pairs: list[str] | None,
    output: str,
    vocab: str | None = None,
    init: str | None = None,
    stop_at_step: int | None = None,
) -> dict:
    """Pretrain (or resume) an encoder with MLM (sentences) and TLM (pairs); returns a summary.

    ``model`` and ``cfg`` are the ``model:`` and ``pretrain:`` sections as loaded
    (``labse_common.config.load``; the stages are ``pretrain.stage_steps``). The caller's
    objects are never changed."""
    _check_sections(model, cfg)
    cfg = _for_inputs(cfg, sentences, pairs)
    info = init_from_env()
    for b in (cfg.mlm_batch_size, cfg.tlm_batch_size):
        if b:
            check_batch_grid(b, cfg.lanes, info.world_size, "pretrain")
    quiet_workers(info)
    device = device_for(info, cfg.threads)
    os.makedirs(os.path.join(output, "checkpoints"), exist_ok=True)
    layers = stage_layers(model.num_hidden_layers, cfg.stages)
    scan_dir = os.path.join(output, "scan")
    sents, pair_scan, counts = _scan_inputs(cfg, sentences, pairs, info, scan_dir)

    resume = find_resume(os.path.join(output, "checkpoints"), info)
    mlm, tokenizer = _masked_lm(model, cfg, layers[0], resume, init, vocab)
    mlm = mlm.to(device)
    depth = mlm.bert.config.num_hidden_layers
    if depth not in layers:
        raise ValueError(f"{resume or init} has {depth} layers; the stages have {layers}")
    max_len = min(cfg.max_seq_length, mlm.bert.config.max_position_embeddings)
    optimizer = make_optimizer(
        mlm, cfg.lr, cfg.weight_decay, cfg.adam_eps, device, cfg.embedding_lr_scale
    )
    state = TrainState(mlm, optimizer, stage=layers.index(depth))
    set_seed(cfg.seed + info.rank)
    fingerprint = {
        "sentences": sents.total_rows() if sents else 0,
        "pairs": pair_scan.total_rows() if pair_scan else 0,
        "batch": [cfg.mlm_batch_size, cfg.tlm_batch_size],
        "lanes": cfg.lanes,
        "seed": cfg.seed,
        "block_rows": cfg.block_rows,
        "max_len": max_len,
    }
    if resume:
        restore_state(state, resume, fingerprint, info, cfg.seed)
        log.info("resuming from %s (stage %d, %d layers)", resume, state.stage, depth)
    state.extra["data"] = fingerprint

    objective = PretrainObjective(cfg, sents, pair_scan, tokenizer, info, device, max_len)
    loop_cfg = LoopConfig.of(cfg, int(sum(cfg.stage_steps)), stop_at_step)
    windows = _window_log(cfg, info, sents, pair_scan)
    extra = {"stages": layers, "stage_steps": cfg.stage_steps, "shuffle_windows": windows}
    summary = run(objective, state, loop_cfg, output, info, device, dict(counts.counts), extra)
    summary["stage"] = state.stage
    return summary
