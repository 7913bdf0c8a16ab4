"""``python -m pipelines.e2e_tasks <task>``: the runner's small steps between the stage commands.

The tasks are the modules ``pipelines/tasks/cli_<task>.py`` (inputs, sentences, embed, labels,
concat, score; see :mod:`pipelines.tasks`), each with ``main(argv)`` and a docstring whose first
line is its one-line help (:mod:`labse_common.command_group`).
"""

from __future__ import annotations

import importlib
from typing import Any

from labse_common.command import exit_with
from labse_common.command_group import CommandGroup

GROUP = CommandGroup(
    prog="python -m pipelines.e2e_tasks",
    summary="The stage runner's small steps between the stage commands: its inputs from the "
    "sources,\nthe sentences to mine, the embeddings, the labelling gate, and the score against "
    "the known\nalignment. The runner calls them; each can be run alone.",
    package="pipelines.tasks",
    prefix="cli_",
    examples=[
        "python -m pipelines.e2e_tasks score --bitext bitext/ --gold inputs/gold.tsv "
        "--sentences sentences/mine --output eval/",
        "python -m pipelines.e2e_tasks labels --help",
    ],
    logger="pipelines.e2e_tasks",
)

# What this module held before the tasks had a module each: imported from here by the tests
# and bench/quality_bench.py, loaded only when asked for (--help imports no task).
_MOVED = {
    "inputs": "cli_inputs",
    "train_group": "cli_inputs",
    "TRAIN_GROUPS": "cli_inputs",
    "labels": "cli_labels",
    "LABEL_PROVENANCE": "cli_labels",
    "embed": "cli_embed",
    "concat": "cli_concat",
    "score": "cli_score",
    "read_gold": "cli_score",
    "GOLD_HEADER": "cli_score",
}


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        return getattr(importlib.import_module(f"pipelines.tasks.{_MOVED[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def commands() -> dict[str, str]:
    """``{task: one-line help}`` of every ``pipelines/tasks/cli_*.py``, sorted by name."""
    return GROUP.commands()


def main(argv: list[str] | None = None) -> int:
    return GROUP.main(argv)


if __name__ == "__main__":
    exit_with(main)
