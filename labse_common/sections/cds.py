"""The ``cds:`` section: the contrastive-data-selection scorer (training and scoring).

Its threshold is the final filter's (``combine:``, with ``features: [cds_score]`` for a CDS-only
threshold): one place for every calibration default."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from labse_common.config_values import option


@dataclass
class CdsModelConfig:
    """Shape of the encoder-decoder (a BART built from a config) when it starts from scratch."""

    d_model: int = option(128, min=8, help="hidden size of encoder and decoder")
    encoder_layers: int = option(2, min=1)
    decoder_layers: int = option(2, min=1)
    attention_heads: int = option(4, min=1)
    ffn_dim: int = option(256, min=8, help="feed-forward inner size")
    max_length: int = option(
        64, min=4, help="tokens per side incl. specials; longer sides are truncated and counted"
    )
    dropout: float = option(0.1, min=0.0, max=0.9)
    init_std: float = option(0.02, min=0.0, min_exclusive=True)

    def validate(self) -> None:
        if self.d_model % self.attention_heads:
            raise ValueError(
                f"model.d_model={self.d_model} is not a multiple of model.attention_heads={self.attention_heads}"
            )


@dataclass
class CdsConfig:
    vocab: str | None = option(
        None,
        help="BERT tokenizer dir (the vocab stage output); null = learn a WordPiece from the pairs",
    )
    vocab_size: int = option(8000, min=16, help="only when learning the WordPiece from the pairs")
    init: str | None = option(
        None,
        help="local pretrained seq2seq checkpoint dir (Marian, BART) to start from; null = from scratch",
    )
    model: CdsModelConfig = field(default_factory=CdsModelConfig)
    bidirectional: bool = option(
        False, help="also train target->source models: cds_score_bwd and dual_xent"
    )
    batch_size: int = option(32, min=1, help="training pairs per step")
    noisy_epochs: float = option(
        8.0, min=0.0, min_exclusive=True, help="passes over the candidate pairs for theta_noisy"
    )
    clean_epochs: float = option(
        4.0, min=0.0, min_exclusive=True, help="passes over the trusted pairs for theta_clean"
    )
    lr: float = option(1e-3, min=0.0, min_exclusive=True, help="peak learning rate of theta_noisy")
    clean_lr: float = option(
        5e-4,
        min=0.0,
        min_exclusive=True,
        help="peak learning rate of the fine-tuning to theta_clean",
    )
    warmup_steps: int = option(20, min=0)
    weight_decay: float = option(0.01, min=0.0)
    clip_norm: float = option(1.0, min=0.0)
    min_trusted: int = option(100, min=1, help="a trusted set with fewer usable pairs is refused")
    min_noisy: int = option(100, min=1, help="a candidate set with fewer usable pairs is refused")
    seed: int = option(0)
    threads: int | None = option(None, min=1, help="torch CPU threads; null = torch's default")
    device: Literal["auto", "cpu", "cuda"] = option("auto", help="auto = cuda when present")
    score_batch_size: int = option(64, min=1, help="pairs per scoring batch (length-bucketed)")
    progress: bool = option(True, help="tqdm progress bars on training and scoring")


CONFIG = CdsConfig
