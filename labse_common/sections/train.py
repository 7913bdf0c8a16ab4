"""The ``train:`` section: dual-encoder training (``python -m labse_model train``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from labse_common.config_values import option


@dataclass
class TrainConfig:
    batch_size: int = option(
        64, min=1, help="GLOBAL micro-batch = the in-batch negatives, split over all ranks"
    )
    grad_accum: int = option(1, min=1, help="micro-batches per optimizer step")
    chunk_size: int | None = option(
        None,
        min=1,
        help="gradient caching: sentences (source and target rows) per forward chunk "
        "on each rank; the whole batch is embedded without gradients, the loss's gradients are "
        "cached and each chunk re-run with gradients, so batch_size costs the memory of one chunk "
        "and gives the plain batch's gradients; null = off (one forward of the whole batch)",
    )
    hard_negatives: int = option(
        0,
        min=0,
        help="hard negatives per source: targets the current encoder puts nearest it "
        "that are not its translation (duplicates and near-duplicates by normalised text "
        "excluded), mined from the training pool and added as extra candidate columns of the "
        "softmax; each costs one more sentence per pair in the forward; 0 = off",
    )
    hard_negatives_every: int = option(
        0,
        min=0,
        help="optimizer steps between two minings of the hard negatives (the first "
        "after this many; batches before it carry empty slots); 0 = once per epoch of the pool",
    )
    max_seq_length: int = option(
        64, min=2, help="tokens incl. [CLS]/[SEP]; longer sentences truncated and counted"
    )
    length_groups: int = option(
        1,
        min=1,
        help="the batch's sentences are sorted by length and embedded in this many groups, "
        "each padded to its own longest sentence instead of the batch's; the same embeddings, "
        "losses and gradients (one model call per group, float rounding aside), fewer padded "
        "tokens; 1 = one call on the batch padded to its longest sentence",
    )
    steps: int = option(
        300,
        min=0,
        help="optimizer steps = length of the linear schedule; 0 = no training (the "
        "runner with model.init: embed with that encoder as it is)",
    )
    lr: float = option(5e-4, min=0.0, min_exclusive=True)
    warmup_steps: int = option(30, min=0)
    weight_decay: float = option(0.01, min=0.0)
    clip_norm: float = option(1.0, min=0.0)
    adam_eps: float = option(1e-6, min=0.0, min_exclusive=True)
    embedding_lr_scale: float = option(
        1.0,
        min=0.0,
        min_exclusive=True,
        help="learning-rate multiplier of the word-embedding matrix (1 = the paper's single rate; small data wants more)",
    )
    margin: float = option(0.3, min=0.0, help="additive margin m on the positive's cosine")
    scale: float = option(20.0, min=0.0, min_exclusive=True, help="logit scale")
    reduction: Literal["mean", "sum"] = option("mean")
    combine: Literal["sum", "mean"] = option("sum")
    bidirectional: bool = option(True)
    bf16: bool = option(True, help="bf16 autocast on a GPU that supports it; ignored on CPU")
    seed: int = option(0)
    save_every: int = option(100, min=1)
    keep_checkpoints: int = option(2, min=1)
    log_every: int = option(10, min=1)
    vocab: str | None = option(
        None, help="BERT tokenizer dir; null = --vocab or --init, else learned when learn_vocab"
    )
    learn_vocab: bool = option(
        False, help="learn a cased WordPiece from the pairs when no vocab is given"
    )
    vocab_size: int = option(8000, min=6)
    tensorboard: bool = option(True)
    progress: bool = option(True)
    threads: int | None = option(None, min=1, help="CPU threads per worker; null = cores / workers")
    lanes: int = option(
        4,
        min=1,
        help="data lanes: the global batch is B/lanes records from each; fixed, so any number of ranks (a divisor) sees the same batches",
    )
    block_rows: int = option(
        512,
        min=1,
        help="usable records per block of a shard (TSV/text lines, or rows of a Parquet row group)",
    )
    shuffle_blocks: int = option(
        4, min=1, help="blocks per shuffle window (the bounded shuffle buffer)"
    )
    mix_alpha: float = option(
        0.3, min=0.0, max=1.0, help="language mixing exponent over <lang>/ folders: p_lang ** alpha"
    )
    source_weights: dict[str, float] = option(
        {},
        help="share of each source's pairs (folders <source>.<src>-<trg>): a source takes w / sum(w) of the records, its languages mixed by mix_alpha inside it; an unnamed source weighs 1; naming a source the pairs lack is an error",
    )
    prefetch: int = option(4, min=1, help="batches the producer thread prepares ahead")
    timing: bool = option(False, help="synchronise the accelerator every step for exact step times")

    def validate(self) -> None:
        for name, w in self.source_weights.items():
            if "." in name or not name:
                raise ValueError(f"source_weights: {name!r} is not a source name (no dots)")
            if not (isinstance(w, (int, float)) and math.isfinite(w) and w >= 0):
                raise ValueError(f"source_weights.{name}={w!r} is not a number >= 0")
        if self.source_weights and not any(self.source_weights.values()):
            raise ValueError("source_weights: every weight is 0")


CONFIG = TrainConfig
