"""Every stage, in run order (the order they are declared in: the corpus stages, then the model
stages, then the bitext stages), and the lookups of them."""

from __future__ import annotations

# Imported for their declarations: each @stage appends to STAGES. The run order holds whatever
# the import order here: bitext_stages imports model_stages, which imports corpus_stages.
from pipelines.run import bitext_stages, corpus_stages, model_stages  # noqa: F401
from pipelines.run.declare import STAGES

BY_NAME = {s.name: s for s in STAGES}
NAMES = [s.name for s in STAGES]
