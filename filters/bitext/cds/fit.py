"""Train a CDS model directory end to end: tokenizer, θ_noisy, θ_clean (per direction).

Layout written (all Hugging Face format, loadable with ``AutoModelForSeq2SeqLM``)::

    MODEL_DIR/cds.json            format, directions, max_length, config, training figures
    MODEL_DIR/tokenizer files     vocab.txt / tokenizer.json (+ config)
    MODEL_DIR/fwd/noisy/          θ_noisy  source→target
    MODEL_DIR/fwd/clean/          θ_clean  source→target
    MODEL_DIR/bwd/{noisy,clean}/  target→source twins (``bidirectional: true``)
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Sequence

from transformers import PreTrainedTokenizerBase

from filters.bitext.cds.model import (
    encode_pairs,
    load_init_model,
    load_tokenizer,
    new_model,
    pick_device,
)
from filters.bitext.cds.score import FORMAT, META_FILE
from filters.bitext.cds.train import TrainSettings, fine_tune_copy, train_seq2seq
from labse_common.config import to_dict
from labse_common.sections.cds import CdsConfig
from labse_common.stats import StageCounter

log = logging.getLogger(__name__)


class TrustedTooSmall(ValueError):
    """The trusted (or candidate) set has fewer usable pairs than the configured minimum."""


def make_tokenizer(
    cfg: CdsConfig, sentences: Sequence[str], work_dir: str
) -> PreTrainedTokenizerBase:
    """The checkpoint's tokenizer (``init``), the given vocab dir, or a WordPiece learned here."""
    if cfg.init:
        return load_tokenizer(cfg.init)
    if cfg.vocab:
        from labse_model.model import load_tokenizer as load_bert_tokenizer

        return load_bert_tokenizer(cfg.vocab)
    from labse_model.tiny import train_wordpiece

    log.info("no vocab given: learning a %d-piece cased WordPiece from the pairs", cfg.vocab_size)
    return train_wordpiece(sentences, os.path.join(work_dir, "vocab"), vocab_size=cfg.vocab_size)


def train_cds(
    noisy: tuple[Sequence[str], Sequence[str]],
    trusted: tuple[Sequence[str], Sequence[str]],
    cfg: CdsConfig,
    out_dir: str,
    counter: StageCounter | None = None,
) -> dict:
    """Train and save θ_noisy / θ_clean into ``out_dir``; returns the ``cds.json`` content.

    ``noisy`` and ``trusted`` are (sources, targets). Raises :class:`TrustedTooSmall` when
    either set is below its minimum (``min_noisy`` / ``min_trusted``).
    """
    counter = counter or StageCounter()
    _check_sizes(noisy, trusted, cfg)
    device = pick_device(cfg.device)
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        tok = make_tokenizer(cfg, [*noisy[0], *noisy[1], *trusted[0], *trusted[1]], work)
        tok.save_pretrained(out_dir)
    max_length = cfg.model.max_length
    directions = ["fwd", "bwd"] if cfg.bidirectional else ["fwd"]
    figures: dict = {}
    for d in directions:
        base, max_length = _base_model(cfg, tok, max_length)
        flip = d == "bwd"
        pairs = {
            "noisy_pairs": (noisy[1], noisy[0]) if flip else noisy,
            "trusted_pairs": (trusted[1], trusted[0]) if flip else trusted,
        }
        enc = {}
        for unit, (src, trg) in pairs.items():
            enc[unit] = encode_pairs(tok, base.config, src, trg, max_length)
            counter.add_event(unit, f"truncated_input_{d}", enc[unit].truncated_inputs)
            counter.add_event(unit, f"truncated_target_{d}", enc[unit].truncated_targets)
        figures[d] = _train_direction(
            base, enc["noisy_pairs"], enc["trusted_pairs"], cfg, device, d, out_dir
        )
    meta = {
        "format": FORMAT,
        "directions": directions,
        "max_length": max_length,
        "score_batch_size": cfg.score_batch_size,
        "score": "cds_score = [log p(y|x; clean) - log p(y|x; noisy)] / |y|",
        "noisy_pairs": len(noisy[0]),
        "trusted_pairs": len(trusted[0]),
        "training": figures,
        "config": to_dict(cfg),
    }
    with open(os.path.join(out_dir, META_FILE), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=2, ensure_ascii=False)
        f.write("\n")
    return meta


def _check_sizes(
    noisy: tuple[Sequence[str], Sequence[str]],
    trusted: tuple[Sequence[str], Sequence[str]],
    cfg: CdsConfig,
) -> None:
    if len(trusted[0]) < cfg.min_trusted:
        raise TrustedTooSmall(
            f"the trusted set has {len(trusted[0])} usable pairs; at least {cfg.min_trusted} are "
            "needed to fine-tune theta_clean (cds.min_trusted)"
        )
    if len(noisy[0]) < cfg.min_noisy:
        raise TrustedTooSmall(
            f"the candidate set has {len(noisy[0])} usable pairs; at least {cfg.min_noisy} are "
            "needed to train theta_noisy (cds.min_noisy)"
        )


def _base_model(cfg: CdsConfig, tok: PreTrainedTokenizerBase, max_length: int) -> tuple:
    """A fresh model for one direction, and the length it can take (a checkpoint's position
    embeddings may be shorter than ``model.max_length``)."""
    if cfg.init:
        base = load_init_model(cfg.init, tok)
        limit = int(getattr(base.config, "max_position_embeddings", max_length))
        return base, min(max_length, limit)
    return new_model(tok, cfg.model, seed=cfg.seed), max_length


def _train_direction(
    base, enc_noisy, enc_trusted, cfg: CdsConfig, device, d: str, out_dir: str
) -> dict:
    """θ_noisy on the candidates, then θ_clean as its fine-tuned copy; both saved under
    ``out_dir/<d>/``. Returns their training figures."""
    common = {
        "batch_size": cfg.batch_size,
        "warmup_steps": cfg.warmup_steps,
        "weight_decay": cfg.weight_decay,
        "clip_norm": cfg.clip_norm,
        "seed": cfg.seed,
        "progress": cfg.progress,
    }
    noisy_fig = train_seq2seq(
        base,
        enc_noisy.inputs,
        enc_noisy.targets,
        TrainSettings(epochs=cfg.noisy_epochs, lr=cfg.lr, **common),
        device,
        desc=f"theta_noisy {d}",
    )
    clean, clean_fig = fine_tune_copy(
        base,
        enc_trusted.inputs,
        enc_trusted.targets,
        TrainSettings(epochs=cfg.clean_epochs, lr=cfg.clean_lr, **common),
        device,
        desc=f"theta_clean {d}",
    )
    base.save_pretrained(os.path.join(out_dir, d, "noisy"))
    clean.save_pretrained(os.path.join(out_dir, d, "clean"))
    return {"noisy": noisy_fig, "clean": clean_fig}
