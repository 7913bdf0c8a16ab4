"""The ``model:`` section: the BERT encoder's shape."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from labse_common.config_values import option

# How an encoder's weights run when it embeds (labse_model.encode implements these; the CLIs and
# run.embed_quantize offer them): float32 as trained, or int8 Linear layers with activations
# quantised per batch, on CPU only (bench/README.md, "Encoder and training").
Quantize = Literal["none", "int8"]
QUANTIZE: tuple[str, ...] = get_args(Quantize)


def quantize_device(quantize: str, device: str | None) -> str | None:
    """The device an encoder with ``quantize`` runs on (int8: the CPU when none is named): the
    one rule of the encoder and of the commands that check it before loading (ValueError)."""
    if quantize not in QUANTIZE:
        raise ValueError(f"quantize must be one of {', '.join(QUANTIZE)}, not {quantize!r}")
    if quantize != "int8":
        return device
    if device is not None and device.split(":")[0] != "cpu":
        raise ValueError(f"quantize=int8 runs on the CPU only, not on {device}")
    return "cpu"  # int8 kernels are CPU ones: a present GPU is not picked for them


@dataclass
class ModelConfig:
    hidden_size: int = option(128, min=1, help="width of the encoder (BERT-base: 768)")
    num_hidden_layers: int = option(2, min=1, help="transformer layers (BERT-base: 12)")
    num_attention_heads: int = option(4, min=1, help="attention heads; must divide hidden_size")
    intermediate_size: int = option(512, min=1, help="feed-forward width (BERT-base: 3072)")
    max_position_embeddings: int = option(128, min=2, help="longest input in tokens")
    initializer_range: float = option(
        0.02, min=0.0, min_exclusive=True, help="std of the random initial weights"
    )
    dropout: float = option(0.1, min=0.0, max=1.0, help="hidden and attention dropout")
    init: str | None = option(
        None,
        help="an encoder you already have (the released LaBSE in either layout, a "
        "sentence-transformers folder or a folder this project wrote): the run skips the vocabulary "
        "and pretraining, and training unless train.steps > 0 (then it fine-tunes from it)",
    )
    pooling: str = option(
        "pooler",
        choices=["pooler", "cls", "mean"],
        help="sentence vector of a NEW encoder: pooler = LaBSE ([CLS] through dense + tanh), "
        "cls = bare [CLS], mean = mean over tokens; --init/resume keep the checkpoint's head",
    )

    def validate(self) -> None:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size={self.hidden_size} is not a multiple of "
                f"num_attention_heads={self.num_attention_heads}"
            )


CONFIG = ModelConfig
