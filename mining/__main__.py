"""Command line: ``python -m mining <command>`` (console script ``labse-mining``).

The commands are the modules ``mining/cli_<command>.py`` (mine, mine-many, embed, eval, plan;
underscores become dashes), each with ``main(argv)`` and a docstring whose first line is its
one-line help (:mod:`labse_common.command_group`); the flags they share are
:mod:`mining.command_options`.
"""

from __future__ import annotations

from labse_common.command import exit_with
from labse_common.command_group import CommandGroup

GROUP = CommandGroup(
    prog="python -m mining",
    summary="Bitext mining with FAISS kNN and margin scoring (LASER-compatible), embedding "
    "stores,\nand retrieval evaluation (Tatoeba, BUCC, UN-style pools).",
    package="mining",
    prefix="cli_",
    examples=[
        "python -m mining mine --src-text de.txt --trg-text en.txt --model run/model "
        "--output mined/",
        "python -m mining plan --n-src 1e6 --n-trg 1e6 --mem-gb 8",
        "python -m mining mine --help",
    ],
    logger="mining",
)


def commands() -> dict[str, str]:
    """``{command: one-line help}`` of every ``mining/cli_*.py``, sorted by name."""
    return GROUP.commands()


def main(argv: list[str] | None = None) -> int:
    return GROUP.main(argv)


if __name__ == "__main__":
    exit_with(main)
