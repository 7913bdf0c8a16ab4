"""Command line: ``python -m labse_model <command>`` (console script ``labse-model``).

The commands are the modules ``labse_model/cli_<command>.py`` (pretrain, train, encode), each
with ``main(argv)`` and a docstring whose first line is its one-line help
(:mod:`labse_common.command_group`); what train and pretrain share is
:mod:`labse_model.run_options`.
"""

from __future__ import annotations

from labse_common.command import exit_with
from labse_common.command_group import CommandGroup

GROUP = CommandGroup(
    prog="python -m labse_model",
    summary="Pretrain and train a LaBSE dual encoder, and embed sentences with it.",
    package="labse_model",
    prefix="cli_",
    examples=[
        "python -m labse_model train --pairs pairs.tsv --vocab vocab/ --output run/",
        "python -m labse_model encode --model run/model --input de.txt --output emb/de",
        "python -m labse_model train --help",
    ],
    logger="labse_model",
)


def commands() -> dict[str, str]:
    """``{command: one-line help}`` of every ``labse_model/cli_*.py``, sorted by name."""
    return GROUP.commands()


def main(argv: list[str] | None = None) -> int:
    return GROUP.main(argv)


if __name__ == "__main__":
    exit_with(main)
