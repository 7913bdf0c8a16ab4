"""The options of a Beam job's file shuffle (``pipelines/spill.py``), shared by the config
sections whose jobs have one (``corpus``: the dedup; ``vocab``: the word counts), so the
setting means the same thing in both."""

from __future__ import annotations

from typing import Any

from labse_common.config import option


def shuffle_option(what: str, group: str) -> Any:
    return option(
        "auto",
        choices=["auto", "memory", "files"],
        help=f"how {what} reach their {group}: 'memory' = Beam's shuffle (a cluster "
        f"runner spills it itself), 'files' = sorted spill files merged per {group} "
        "in bounded memory; 'auto' = files on the local runner, whose shuffle is "
        "held in RAM, memory elsewhere",
    )


def spill_rows_option(default: int, what: str) -> Any:
    return option(
        default, min=1000, help=f"shuffle=files: {what} a worker buffers before writing spill files"
    )


def spill_fan_in_option() -> Any:
    return option(
        32,
        min=2,
        help="shuffle=files: most spill files one merge reads at once (~1.5 MB "
        "each); a group with more is merged in rounds",
    )
