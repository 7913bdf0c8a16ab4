"""The runner's small steps between the stage commands, one module each, run as
``python -m pipelines.e2e_tasks <task>`` (:mod:`pipelines.e2e_tasks`, a command group):

    inputs     the sources' pairs, known alignments and text, read into what a run trains on
    sentences  one canonically ordered Parquet per language: what is mined, what the vocabulary
               learns from
    embed      one embedding store per language, the encoder loaded once
    labels     the gate before the final filter: the sample a person labels
    concat     several pair Parquet files as one
    score      precision and recall of the bitext against the known alignment

Every task but score claims its output (:func:`labse_common.output_dir.claim_output`), writes it
aside and commits it at the end: a second writer stops with exit status 2, an existing output
needs ``--overwrite``. The runner calls them into its freshly emptied stage folders.
"""

from __future__ import annotations

import json
import logging


def log_result(task: str, report: dict) -> None:
    """One log line of what a task counted."""
    logging.getLogger("pipelines.tasks").info(
        "%s: %s", task, json.dumps(report.get("counts", report))[:300]
    )
