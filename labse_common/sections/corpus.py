"""The ``corpus:`` section: the CommonCrawl and Wikipedia cleaning jobs."""

from __future__ import annotations

from dataclasses import dataclass

from labse_common.config_values import option
from labse_common.shuffle_options import shuffle_option, spill_fan_in_option, spill_rows_option


@dataclass
class CorpusConfig:
    min_chars: int = option(
        10, min=1, help="lines/sentences shorter than this are dropped (LaBSE: 10)"
    )
    max_chars: int = option(5000, min=1, help="... and longer than this (LaBSE: 5000)")
    lid_model: str | None = option(
        None, help="fastText LID model path; null = lid.176.ftz shipped in filters/models/"
    )
    lid_threshold: float = option(
        0.5, min=0.0, max=1.0, help="LID probability below which a sentence is dropped"
    )
    langs: list[str] | None = option(None, help="keep only these language labels; null = all")
    quality_model: str | None = option(
        None, help="fastText quality classifier; null = rule-based scorer"
    )
    quality_threshold: float = option(
        0.5, min=0.0, max=1.0, help="quality score below which a sentence is dropped"
    )
    dedup: bool = option(True, help="exact dedup across the whole job")
    write_dropped: bool = option(False, help="also write dropped lines/sentences with their reason")
    rows_per_file: int = option(100_000, min=1, help="Parquet rows per output file")
    row_group_rows: int = option(
        10_000,
        min=1,
        help="Parquet rows per row group of the sentence files: a reader that starts mid-file (a training stream's block) decodes from its group's start",
    )
    shards_per_language: int = option(1, min=1, help="dedup groups per language (~rows/1M)")
    shuffle: str = shuffle_option("kept rows", "(language, shard) dedup group")
    spill_rows: int = spill_rows_option(200_000, "rows")
    spill_fan_in: int = spill_fan_in_option()
    page_timeout_s: float = option(
        5.0, min=0.0, min_exclusive=True, help="per-page wikitext parse limit, seconds"
    )
    max_page_chars: int = option(
        2_000_000, min=1, help="pages with more wikitext characters are dropped"
    )

    def validate(self) -> None:
        if self.max_chars < self.min_chars:
            raise ValueError(f"max_chars={self.max_chars} is below min_chars={self.min_chars}")


CONFIG = CorpusConfig
