"""The ``eval:`` section: Tatoeba / UN / BUCC evaluation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from labse_common.config_values import option

Scoring = Literal["cosine", "margin"]
SCORINGS: tuple[str, ...] = get_args(Scoring)  # the CLI's choices, from the one Literal


@dataclass
class EvalConfig:
    scoring: Scoring = option("cosine", help="nearest cosine, or best ratio margin among k")
    k: int = option(4, min=1, help="k for margin scoring and BUCC mining")
    prefix: str = option("tatoeba", help="file prefix of the Tatoeba files")
    langs: list[str] | None = option(None, help="null = every language found")
    tune_split: str = option("training", help="BUCC: threshold chosen on this split's gold")
    eval_split: str = option("sample", help="... and scored on this one")
    bucc_pairs: list[str] = option(["de-en", "fr-en", "ru-en", "zh-en"], help="BUCC language pairs")


CONFIG = EvalConfig
