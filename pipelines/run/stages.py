"""Every stage, in run order (the order they are declared in: the corpus stages, then the model
stages, then the bitext stages), and the lookups of them."""

from __future__ import annotations

# Imported for their declarations: each @stage appends to STAGES, in this order.
from pipelines.run import corpus_stages, model_stages  # noqa: F401
from pipelines.run.bitext_stages import CDS_SCORE, CDS_TRAIN, COMBINE, LABELS, RULES, SAMPLE
from pipelines.run.declare import STAGES

BY_NAME = {s.name: s for s in STAGES}
NAMES = [s.name for s in STAGES]
FILTER_STAGES = (RULES, CDS_TRAIN, CDS_SCORE, SAMPLE, LABELS, COMBINE)
