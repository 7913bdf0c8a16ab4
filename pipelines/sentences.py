"""The tail both corpus jobs share: clean -> dedup -> Parquet per language, and stats.json."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.options.pipeline_options import StandardOptions

from labse_common.formats import DROPPED_SCHEMA
from labse_common.sections.corpus import CorpusConfig
from pipelines.clean import CleanDocuments
from pipelines.dedup import DedupShard
from pipelines.parquet_io import WriteParquet, WriteSentenceShard
from pipelines.spill import MergeSpilled, SpillRows, spill_dir, use_file_shuffle
from pipelines.stats_io import write_stats
from pipelines.tagged import join_sinks, with_outputs
from pipelines.tags import DROPPED, STATS


def finish_sentences(
    docs, output: str, cfg: CorpusConfig, stats: list, stage: str, extra: dict
) -> None:
    """Clean -> dedup per (language, shard) -> Parquet per language; stats -> DIR/stats.json.

    ``docs`` is one PCollection of documents or a list of them (branches that must not be
    flattened before cleaning: see below). The dedup's shuffle goes through Beam
    (``CombinePerKey``) or through spill files (``pipelines/spill.py``), by ``corpus.shuffle``;
    both write the same files.
    """
    branches = docs if isinstance(docs, (list, tuple)) else [docs]
    runner = branches[0].pipeline.options.view_as(StandardOptions).runner
    files = use_file_shuffle(cfg.shuffle, runner)
    keep_dropped = cfg.write_dropped
    writer = WriteSentenceShard(output, cfg.rows_per_file, cfg.row_group_rows)
    kept, dropped = [], []
    for i, branch in enumerate(branches):
        sfx = f"{i}" if i else ""
        cleaned = with_outputs(
            branch, f"Clean{sfx}", CleanDocuments(cfg), STATS, DROPPED, main="kept"
        )
        stats, dropped = [*stats, cleaned[STATS]], [*dropped, cleaned[DROPPED]]
        # The local engine materialises a Flatten whose inputs come from different stages, so
        # branches meet only after the spill, where an element is a file path, not the text.
        kept.append(
            cleaned.kept | f"Spill{sfx}" >> beam.ParDo(SpillRows(spill_dir(output), cfg.spill_rows))
            if files
            else cleaned.kept
        )
    kept = kept[0] if len(kept) == 1 else tuple(kept) | "AllKept" >> beam.Flatten()
    if files:  # bounded memory on a runner that shuffles in RAM
        written = with_outputs(
            kept | "GroupSpilled" >> beam.GroupByKey(),
            "WriteSentences",
            MergeSpilled(writer, cfg.dedup, keep_dropped, cfg.spill_fan_in),
            STATS,
            DROPPED,
            main="files",
        )
    else:
        deduped = kept | "Dedup" >> beam.CombinePerKey(DedupShard(cfg.dedup, keep_dropped))
        written = with_outputs(deduped, "WriteSentences", writer, STATS, DROPPED, main="files")
    stats = [*stats, written[STATS]]
    sinks = [written.files]
    if keep_dropped:
        sinks.append(
            (*dropped, written[DROPPED])
            | "AllDropped" >> beam.Flatten()
            | "WriteDropped"
            >> WriteParquet(output, DROPPED_SCHEMA, cfg.rows_per_file, 1, subdir="_dropped")
        )
    sinks.append(write_stats(stats, output, stage, extra))
    join_sinks(sinks)  # last: the DaskRunner computes only what the last transform needs
