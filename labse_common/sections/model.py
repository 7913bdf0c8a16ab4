"""The ``model:`` section: the BERT encoder's shape."""

from __future__ import annotations

from dataclasses import dataclass

from labse_common.config import option


@dataclass
class ModelConfig:
    hidden_size: int = option(128, min=1)
    num_hidden_layers: int = option(2, min=1)
    num_attention_heads: int = option(4, min=1)
    intermediate_size: int = option(512, min=1)
    max_position_embeddings: int = option(128, min=2)
    initializer_range: float = option(0.02, min=0.0, min_exclusive=True)
    dropout: float = option(0.1, min=0.0, max=1.0)

    def validate(self) -> None:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size={self.hidden_size} is not a multiple of "
                f"num_attention_heads={self.num_attention_heads}"
            )


CONFIG = ModelConfig
