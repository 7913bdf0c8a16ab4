"""The tail both corpus jobs share: clean -> dedup -> Parquet per language, and stats.json."""

from __future__ import annotations

import apache_beam as beam

from labse_common.formats import DROPPED_SCHEMA
from labse_common.sections.corpus import CorpusConfig
from pipelines.clean import CleanDocuments
from pipelines.dedup import DedupShard
from pipelines.parquet_io import WriteParquet, WriteSentenceShard
from pipelines.stats_io import write_stats
from pipelines.tagged import join_sinks, with_outputs
from pipelines.tags import DROPPED, STATS


def finish_sentences(docs, output: str, cfg: CorpusConfig, stats: list, stage: str, extra: dict) -> None:
    """Clean -> dedup per (language, shard) -> Parquet per language; stats -> DIR/stats.json."""
    cleaned = with_outputs(docs, "Clean", CleanDocuments(cfg), STATS, DROPPED, main="kept")
    keep_dropped = cfg.write_dropped
    deduped = cleaned.kept | "Dedup" >> beam.CombinePerKey(DedupShard(cfg.dedup, keep_dropped))
    written = with_outputs(deduped, "WriteSentences",
                           WriteSentenceShard(output, cfg.rows_per_file),
                           STATS, DROPPED, main="files")  # fmt: skip
    stats = [*stats, cleaned[STATS], written[STATS]]
    sinks = [written.files]
    if keep_dropped:
        sinks.append(
            (cleaned[DROPPED], written[DROPPED])
            | "AllDropped" >> beam.Flatten()
            | "WriteDropped" >> WriteParquet(
                output, DROPPED_SCHEMA, cfg.rows_per_file, 1,
                subdir="_dropped")
        )  # fmt: skip
    sinks.append(write_stats(stats, output, stage, extra))
    join_sinks(sinks)  # last: the DaskRunner computes only what the last transform needs
