"""The ``pretrain:`` section: MLM + TLM pretraining with progressive stacking
(``python -m labse_model pretrain``). The encoder's shape is the ``model:`` section; its
``num_hidden_layers`` is the depth of the LAST stage."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from labse_common.config_values import option


@dataclass
class PretrainConfig:
    mlm_batch_size: int = option(
        64, min=0, help="GLOBAL packed MLM sequences per micro-batch (0: no MLM)"
    )
    tlm_batch_size: int = option(
        64, min=0, help="GLOBAL TLM pair sequences per micro-batch (0: no TLM)"
    )
    max_seq_length: int = option(
        128, min=8, help="tokens per sequence: sentences are packed up to it (paper: 512)"
    )
    pack_pairs: bool = option(
        True,
        help="pack several TLM pairs into a row, attention and positions kept per pair "
        "(the same losses as one pair per row, without the padding)",
    )
    sentence_segments: bool = option(
        True,
        help="MLM rows as [CLS] s1 [SEP] [CLS] s2 [SEP] ..., each sentence attending to "
        "itself with positions from 0 (as the sentence encoder sees it); false: "
        "BERT's [CLS] s1 [SEP] s2 [SEP] ..., attending across sentences",
    )
    mask_rate: float = option(
        0.2, min=0.0, min_exclusive=True, max=1.0, help="share of real tokens predicted"
    )
    max_masked: int = option(80, min=1, help="at most this many predicted tokens per sequence")
    mask_token_share: float = option(
        0.8, min=0.0, max=1.0, help="predicted tokens replaced by [MASK]"
    )
    random_token_share: float = option(
        0.1, min=0.0, max=1.0, help="... by a random token (the rest stay)"
    )
    stages: int = option(
        3, min=1, max=4, help="progressive stacking stages: stage s has L / 2**(stages-1-s) layers"
    )
    stage_steps: list[int] = option(
        [400, 800, 1800], min=0, help="optimizer steps per stage (paper: 400k, 800k, 1.8M)"
    )
    optimizer_on_stack: Literal["reset", "copy"] = option(
        "copy", help="AdamW moments at a stacking step: reset, or copied like the layers"
    )
    lr: float = option(5e-4, min=0.0, min_exclusive=True)
    warmup_steps: int = option(
        100, min=0, help="linear warmup, then linear decay to 0 over ALL stages"
    )
    weight_decay: float = option(0.01, min=0.0)
    clip_norm: float = option(1.0, min=0.0)
    adam_eps: float = option(1e-6, min=0.0, min_exclusive=True)
    embedding_lr_scale: float = option(
        1.0,
        min=0.0,
        min_exclusive=True,
        help="learning-rate multiplier of the word-embedding matrix (1 = the paper's single rate; small data wants more)",
    )
    grad_accum: int = option(1, min=1)
    bf16: bool = option(True, help="bf16 autocast on a GPU that supports it; ignored on CPU")
    seed: int = option(0)
    lanes: int = option(4, min=1, help="data lanes (see train.lanes); divides both batch sizes")
    block_rows: int = option(
        512,
        min=1,
        help="usable records per block of a shard (text lines, or rows of a Parquet row group)",
    )
    shuffle_blocks: int = option(4, min=1, help="blocks per shuffle window")
    mix_alpha: float = option(
        0.3, min=0.0, max=1.0, help="language mixing exponent: p_lang ** alpha"
    )
    heldout_fraction: float = option(
        0.01, min=0.0, max=0.5, help="hashed share of sentences/pairs kept out for held-out metrics"
    )
    max_heldout: int = option(256, min=0, help="held-out sentences (and pairs) evaluated")
    eval_every: int = option(
        50, min=0, help="held-out MLM/TLM loss and accuracy every N steps (0: never)"
    )
    save_every: int = option(200, min=1)
    keep_checkpoints: int = option(2, min=1)
    log_every: int = option(10, min=1)
    prefetch: int = option(
        4, min=1, help="batches tokenised and masked ahead by the producer thread"
    )
    timing: bool = option(False, help="synchronise the accelerator every step for exact step times")
    tensorboard: bool = option(True)
    progress: bool = option(True)
    threads: int | None = option(None, min=1, help="CPU threads per worker; null = cores / workers")

    def validate(self) -> None:
        if len(self.stage_steps) != self.stages:
            raise ValueError(
                f"stage_steps has {len(self.stage_steps)} entries for {self.stages} stages"
            )
        if self.mlm_batch_size + self.tlm_batch_size == 0:
            raise ValueError("mlm_batch_size and tlm_batch_size are both 0: nothing to train")
        if self.mask_token_share + self.random_token_share > 1.0:
            raise ValueError("mask_token_share + random_token_share must be <= 1")


CONFIG = PretrainConfig
