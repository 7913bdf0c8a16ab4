"""Command line: ``python -m filters <command> ...`` for bitext filtering.

The commands are the modules ``filters/bitext/cli_<command>.py`` (underscores become dashes),
each with ``main(argv: list[str]) -> int`` and a docstring whose first line is its one-line help
(labse_common.command_group). Adding a command touches no shared file.
"""

from __future__ import annotations

from labse_common.command import exit_with
from labse_common.command_group import CommandGroup

GROUP = CommandGroup(
    prog="python -m filters",
    summary="Score, filter, label and export mined bitext pairs: rule filters, margin and "
    "cross-lingual (CDS) scores, a combined score calibrated on labels, a sample to label.",
    package="filters.bitext",
    prefix="cli_",
    examples=[
        "python -m filters rules --pairs mined.tsv --output rules/",
        "python -m filters apply --help",
    ],
    logger="filters",
)


def commands() -> dict[str, str]:
    """``{command: one-line help}`` of every ``filters/bitext/cli_*.py``, sorted by name."""
    return GROUP.commands()


def main(argv: list[str] | None = None) -> int:
    return GROUP.main(argv)


if __name__ == "__main__":
    exit_with(main)
