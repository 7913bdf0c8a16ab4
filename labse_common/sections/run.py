"""The ``run:`` section: settings of the stage runner (``python -m pipelines.run``); what it reads
is the ``sources:`` section, how it runs Beam and training the ``beam:`` and ``launch:`` ones."""

from __future__ import annotations

from dataclasses import dataclass

from labse_common.config_values import option
from labse_common.sections.model import Quantize


@dataclass
class RunConfig:
    quality_bootstrap: bool = option(
        True, help="train the fastText quality classifier and rerun CommonCrawl with it"
    )
    min_margin: float = option(
        1.05, help="bitext without the filter stages: keep mined pairs with margin >= this"
    )
    cds_trusted_pairs: int = option(
        2000,
        min=100,
        help="trusted pairs the CDS scorer trains on (an even sample of the training pairs)",
    )
    embed_batch_size: int = option(64, min=1, help="batch size of the embedding stage")
    embed_quantize: Quantize = option(
        "none",
        help="the embedding stage's encoder: none (float32) or int8 (int8 Linear layers on CPU: "
        "a BERT-base ~1.6x faster, vectors at cosine ~0.998; bench/README.md)",
    )
    report_examples: int = option(5, min=1, help="kept and rejected pairs shown in the report")


CONFIG = RunConfig
