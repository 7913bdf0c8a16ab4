"""The tail both corpus jobs share: clean -> dedup -> Parquet per language, and stats.json."""

from __future__ import annotations

import apache_beam as beam

from labse_common.formats import DROPPED_SCHEMA
from labse_common.sections.corpus import CorpusConfig
from pipelines.clean import CleanDocuments
from pipelines.dedup import DedupShard
from pipelines.parquet_io import WriteParquet, WriteSentenceShard
from pipelines.stats_io import write_stats
from pipelines.tags import DROPPED, STATS


def finish_sentences(docs, output: str, cfg: CorpusConfig, stats: list, stage: str, extra: dict) -> None:
    """Clean -> dedup per (language, shard) -> Parquet per language; stats -> DIR/stats.json."""
    cleaned = docs | "Clean" >> beam.ParDo(CleanDocuments(cfg)).with_outputs(
        STATS, DROPPED, main="kept"
    )
    keep_dropped = cfg.write_dropped
    written = (
        cleaned.kept
        | "Dedup" >> beam.CombinePerKey(DedupShard(cfg.dedup, keep_dropped))
        | "WriteSentences" >> beam.ParDo(
            WriteSentenceShard(output, cfg.rows_per_file)
        ).with_outputs(STATS, DROPPED, main="files")
    )  # fmt: skip
    stats = [*stats, cleaned[STATS], written[STATS]]
    if keep_dropped:
        (
            (cleaned[DROPPED], written[DROPPED])
            | "AllDropped" >> beam.Flatten()
            | "WriteDropped" >> WriteParquet(
                output, DROPPED_SCHEMA, cfg.rows_per_file, 1,
                subdir="_dropped")
        )  # fmt: skip
    write_stats(stats, output, stage, extra)
