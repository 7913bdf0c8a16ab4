"""The vocabulary job's Beam part: smoothed word counts from ``<lang>/*.parquet`` sentences.

:func:`build_pipeline` counts the words of every file per language (cased BERT pre-tokenisation),
smooths each language's mass to p_lang ** alpha in word shards, drops words below the minimum
smoothed count, and writes ``word_counts.parquet`` (words in order of first occurrence),
``heldout.parquet`` (a hashed sample kept back for evaluation) and ``_beam/`` (counts and
per-language totals) into the output folder. The driver and command line are
:mod:`pipelines.vocab`.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import json
import logging
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.pvalue import TaggedOutput

from labse_common import filesystems
from labse_common.datafiles import iter_parquet_batches, iter_parquet_counted, parquet_file
from labse_common.errors import InputError
from labse_common.sections.vocab import VocabConfig
from labse_common.stats import StageCounter, merge_counts
from labse_model.vocab.build import COUNTS_FILE, HELDOUT_FILE
from labse_model.vocab.counting import SENT, WORDS, sentence_words
from labse_model.vocab.smoothing import language_weights
from pipelines.parquet_io import write_table
from pipelines.spill import FAN_IN as SPILL_FAN_IN
from pipelines.spill import spill_dir, use_file_shuffle
from pipelines.tagged import join_sinks, with_outputs
from pipelines.vocab_spill import SpillCounts, merged_words

log = logging.getLogger("pipelines.vocab")

STATS = "stats"
HELDOUT = "heldout"
LANG = "lang"  # per file: a language's (counted sentences, word occurrences)
TYPES = "types"  # per word shard: a language's distinct words
FILES = "files"
# A worker flushes its per-file word counter when it grows past this many keys (bounded memory).
FLUSH_KEYS = 500_000
BEAM_DIR = "_beam"
# Words are smoothed in groups keyed by a hash of the word, one per input file within these
# bounds: a group's words are held by one worker, and the vocabulary grows with the corpus.
MIN_WORD_SHARDS = 16
MAX_WORD_SHARDS = 256
# A word's first occurrence is file index * POS_STRIDE + its rank among the file's words.
POS_STRIDE = 1 << 40
# Rows per row group of a shard's part file, and per batch of word_counts.parquet.
PART_ROWS = 8192
# Rows per read of each part while merging: the merge holds one such batch (as Python objects)
# per part, up to MAX_WORD_SHARDS of them.
MERGE_READ_ROWS = 1024

COUNTS_SCHEMA = pa.schema(
    [("word", pa.string()), ("count", pa.float64()), ("raw_count", pa.int64())]
)
HELDOUT_SCHEMA = pa.schema([("lang", pa.string()), ("text", pa.string())])
# A shard's part file: the rows plus each word's first occurrence, the merge order.
PART_SCHEMA = COUNTS_SCHEMA.append(pa.field("first", pa.int64()))


# ---------------------------------------------------------------------------------------------
# Beam transforms
#
# The job runs on every runner, Beam's DaskRunner included (docs/cluster.md#dask): multi-output
# ParDos go through pipelines/tagged.py, nothing is emitted from finish_bundle, there are no
# side inputs and no Beam file sinks (files are written by plain ParDos through FileSystems),
# and the job ends in join_sinks.


def heldout_rank(text: str) -> tuple[bytes, str]:
    """Order of the held-out sample: a hash unrelated to the crc32 that held the sentence out,
    so the kept ``max_heldout_per_lang`` are a fixed pseudo-random choice on every runner."""
    data = text.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=8).digest(), text


def word_shard(word: str, shards: int) -> int:
    return zlib.crc32(word.encode("utf-8", "surrogatepass")) % shards


def word_shards(n_files: int) -> int:
    return min(MAX_WORD_SHARDS, max(MIN_WORD_SHARDS, n_files))


class CountFileWords(beam.DoFn):
    """One (index, (lang, Parquet file)) in, ((lang, word), (n, first occurrence)) out;
    held-out sentences, the language's sums and stats on side tags."""

    def __init__(
        self,
        max_word_length: int,
        heldout_fraction: float,
        max_heldout: int,
        batch_rows: int = 8192,
    ) -> None:
        self.max_word_length = max_word_length
        self.heldout_fraction = heldout_fraction
        self.max_heldout = max_heldout
        self.batch_rows = batch_rows

    def process(self, item: tuple[int, tuple[str, str]]) -> Iterator[Any]:
        index, (lang, path) = item
        counter = StageCounter()
        words: Counter[str] = Counter()
        first = index * POS_STRIDE  # the position of the next new word (Counters keep order)
        held: list[str] = []
        n_sent = 0
        try:
            if "text" not in parquet_file(path, "--input").schema_arrow.names:
                raise InputError(path, "no `text` column", "--input")
            # A damaged row group is counted and the rest of the file still read.
            for batch in iter_parquet_counted(
                path, counter, SENT, ["text"], "--input", self.batch_rows
            ):
                for text in batch.column(0).to_pylist():
                    kind, value = sentence_words(
                        text, counter, self.max_word_length, self.heldout_fraction
                    )
                    if kind == "count":
                        words.update(value)
                        n_sent += 1
                    elif kind == "heldout" and self.max_heldout:
                        held.append(value)
                        if len(held) >= 2 * self.max_heldout:  # the file's sample stays bounded
                            held = heapq.nsmallest(self.max_heldout, held, key=heldout_rank)
                if len(words) > FLUSH_KEYS:
                    yield from _flush(lang, words, first, n_sent, counter)
                    first, n_sent = first + len(words), 0
                    words.clear()
        except InputError as e:  # a damaged or foreign file is counted, never fatal
            log.warning("%s", e)
            # Rows read since the last flush are not kept (flushed ones went out with their stats).
            counter = StageCounter()
            counter.add_in(FILES)
            counter.add_dropped(FILES, "unreadable")
            yield TaggedOutput(STATS, counter.drain())
            return
        counter.add_in(FILES)
        counter.add_out(FILES)
        yield from _flush(lang, words, first, n_sent, counter)
        for text in heapq.nsmallest(self.max_heldout, held, key=heldout_rank):
            yield TaggedOutput(HELDOUT, (lang, text))


def _flush(
    lang: str, words: Counter[str], first: int, n_sent: int, counter: StageCounter
) -> Iterator[Any]:
    # Counts, language sums and stats leave together, so whatever was emitted is accounted for.
    yield from (((lang, w), (n, first + i)) for i, (w, n) in enumerate(words.items()))
    yield TaggedOutput(LANG, (lang, (n_sent, sum(words.values()))))
    yield TaggedOutput(STATS, counter.drain())


def _sum_first(items: Iterable[tuple[int, int]]) -> tuple[int, int]:
    """(occurrences, first occurrence) partials of one word combined."""
    n, first = 0, None
    for a, b in items:
        n += a
        first = b if first is None or b < first else first
    return n, first


def _sum_tuples(items: Iterable[tuple[int, ...]]) -> tuple[int, ...]:
    total: list[int] = []
    for t in items:
        total = [a + b for a, b in zip(t, total)] if total else list(t)
    return tuple(total)


def part_path(output: str, shard: int) -> str:
    return FileSystems.join(output, BEAM_DIR, f"word_counts-{shard:05d}.parquet")


class SmoothShard(beam.DoFn):
    """One shard of the words: smoothed counts, the min-count cut, a part file in
    first-occurrence order; stats and each language's distinct words on side tags.

    The group holds every language's word total (word ``None``) besides the shard's
    (word, lang, n, first): the weights travel with the data instead of in a side input, which the
    DaskRunner recomputes. With the file shuffle (``pipelines/vocab_spill.py``) the group holds
    the shard's spill file paths instead of its words (word and lang ``None``, the path in
    place of n). A word's languages are summed in a fixed order, so the float is the same on
    every runner and in both modes.
    """

    def __init__(
        self, output: str, alpha: float, min_count: float, fan_in: int = SPILL_FAN_IN
    ) -> None:
        self.output, self.alpha, self.min_count = output, alpha, min_count
        self.fan_in = fan_in

    def process(self, kv: tuple[int, Iterable[tuple]]) -> Iterator[Any]:
        shard, values = kv
        totals: dict[str, int] = {}
        by_word: dict[str, list[tuple[str, int, int]]] = {}
        spilled: list[str] = []
        for word, lang, n, first in values:
            if word is not None:
                by_word.setdefault(word, []).append((lang, n, first))
            elif lang is None:
                spilled.append(n)
            else:
                totals[lang] = n
        weights = language_weights(dict(sorted(totals.items())), self.alpha)
        counter = StageCounter()
        types: Counter[str] = Counter()
        rows: list[tuple[int, str, float, int]] = []
        words = merged_words(spilled, self.fan_in) if spilled else by_word.items()
        for word, per_lang in words:
            per_lang.sort()
            smoothed, raw = 0.0, 0
            for lang, n, _ in per_lang:
                smoothed += weights[lang] * n
                raw += n
                types[lang] += 1
            if smoothed >= self.min_count:
                counter.add_out(WORDS, raw)
                rows.append((min(f for _, _, f in per_lang), word, smoothed, raw))
            else:
                counter.add_dropped(WORDS, "below_min_count", raw)
        rows.sort()
        cols = list(zip(*rows)) or [(), (), (), ()]
        table = pa.table(
            [
                pa.array(cols[1], pa.string()),
                pa.array(cols[2], pa.float64()),
                pa.array(cols[3], pa.int64()),
                pa.array(cols[0], pa.int64()),
            ],
            schema=PART_SCHEMA,
        )
        # Small row groups: the merge reads every part at once, a batch each.
        yield write_table(table, part_path(self.output, shard), PART_ROWS)
        if counter.counts:
            yield TaggedOutput(STATS, counter.drain())
        for lang, n in sorted(types.items()):
            yield TaggedOutput(TYPES, (lang, n))


def _part_rows(path: str) -> Iterator[tuple[str, float, int, int]]:
    for batch in iter_parquet_batches(path, None, None, MERGE_READ_ROWS):
        yield from zip(*(c.to_pylist() for c in batch.columns))


def merge_count_parts(paths: list[str], output: str) -> str:
    """The part files as one ``word_counts.parquet`` in first-occurrence order (input files in
    path order), streamed batch by batch (the vocabulary never sits in one list); the parts are
    removed afterwards.

    A fixed order because the learner's float sums, and so ties in vocab.txt, follow the row
    order; first occurrence is also the order the job gave on the local runner before.
    """
    path = FileSystems.join(output, COUNTS_FILE)
    rows = heapq.merge(*(_part_rows(p) for p in sorted(paths)), key=lambda r: r[3])
    with (
        filesystems.create(path) as f,
        pq.ParquetWriter(f, COUNTS_SCHEMA, compression="zstd") as writer,
    ):
        while batch := list(itertools.islice(rows, PART_ROWS)):
            cols = list(zip(*batch))[:3]
            writer.write_table(
                pa.table(
                    [pa.array(c, t.type) for c, t in zip(cols, COUNTS_SCHEMA)], schema=COUNTS_SCHEMA
                )
            )
    if paths:
        FileSystems.delete(list(paths))
    return path


def write_heldout_rows(samples: list[tuple[str, list[str]]], output: str) -> str:
    rows = sorted((lang, t) for lang, texts in samples for t in texts)
    langs, texts = zip(*rows) if rows else ((), ())
    table = pa.table(
        [pa.array(langs, pa.string()), pa.array(texts, pa.string())], schema=HELDOUT_SCHEMA
    )
    return write_table(table, FileSystems.join(output, HELDOUT_FILE), PART_ROWS)


def write_languages(rows: list[tuple[str, tuple[int, int, int]]], output: str) -> str:
    lines = "".join(
        json.dumps([lang, {"totals": t, "types": n, "sentences": s}]) + "\n"
        for lang, (s, t, n) in sorted(rows)
    )
    return _write_text(FileSystems.join(output, BEAM_DIR, "languages.jsonl"), lines)


def write_counts_json(counts: dict[str, int], output: str) -> str:
    text = json.dumps(counts, sort_keys=True) + "\n"
    return _write_text(FileSystems.join(output, BEAM_DIR, "counts.json"), text)


def _write_text(path: str, text: str) -> str:
    with filesystems.create(path) as f:
        f.write(text.encode("utf-8"))
    return path


def _gather(
    pcoll: beam.PCollection, label: str, write: Callable[..., str], *args: Any
) -> beam.PCollection:
    """``write(all elements of pcoll, *args)`` once on one worker, also when ``pcoll`` is empty
    (a start element keeps the group alive), so the file is always written. Only for small
    collections: a group is one list on the DaskRunner."""
    start = pcoll.pipeline | f"{label}Start" >> beam.Create([(0, (False, None))])
    items = pcoll | f"{label}Key" >> beam.Map(lambda x: (0, (True, x)))
    return (
        (start, items)
        | f"{label}Flatten" >> beam.Flatten()
        | f"{label}Group" >> beam.GroupByKey()
        | label >> beam.Map(lambda kv: write([x for real, x in kv[1] if real], *args))
    )


def build_pipeline(
    p: beam.Pipeline, files: list[tuple[str, str]], output: str, cfg: VocabConfig
) -> None:
    """The counting job, writing word_counts.parquet, heldout.parquet and _beam/ into output."""
    shards = word_shards(len(files))
    counted = with_outputs(
        p | "Files" >> beam.Create(list(enumerate(files))) | "Spread" >> beam.Reshuffle(),
        "Count",
        CountFileWords(cfg.max_word_length, cfg.heldout_fraction, cfg.max_heldout_per_lang),
        STATS,
        HELDOUT,
        LANG,
        main="words",
    )
    lang_sums = counted[LANG] | "LangSums" >> beam.CombinePerKey(_sum_tuples)
    totals = lang_sums | "TotalsToShards" >> beam.FlatMap(
        lambda kv: ((s, (None, kv[0], kv[1][1], 0)) for s in range(shards))
    )
    if use_file_shuffle(cfg.shuffle, p.options.view_as(StandardOptions).runner):
        # Bounded memory where the runner holds its shuffle in RAM: sorted spill files per shard.
        keyed = (
            counted.words
            | "SpillCounts"
            >> beam.ParDo(SpillCounts(spill_dir(output), cfg.spill_rows, shards, word_shard))
            | "SpillPaths" >> beam.MapTuple(lambda shard, path: (shard, (None, None, path, 0)))
        )
    else:
        per_lang = counted.words | "SumPerLangWord" >> beam.CombinePerKey(_sum_first)
        keyed = per_lang | "WordToShard" >> beam.Map(
            lambda kv: (word_shard(kv[0][1], shards), (kv[0][1], kv[0][0], *kv[1]))
        )
    smoothed = with_outputs(
        (totals, keyed) | "ShardInputs" >> beam.Flatten() | "GroupShards" >> beam.GroupByKey(),
        "Smooth",
        SmoothShard(output, cfg.smoothing, cfg.min_count, cfg.spill_fan_in),
        STATS,
        TYPES,
        main="parts",
    )
    counts_done = _gather(smoothed.parts, "MergeCounts", merge_count_parts, output)

    heldout_done = _gather(
        counted[HELDOUT]
        | "SampleHeldout"
        >> beam.combiners.Top.SmallestPerKey(max(1, cfg.max_heldout_per_lang), key=heldout_rank),
        "WriteHeldout",
        write_heldout_rows,
        output,
    )

    stats_done = (
        (counted[STATS], smoothed[STATS])
        | "AllStats" >> beam.Flatten()
        # without_defaults: the default-injecting form needs a side input; every file has stats.
        | "MergeStats" >> beam.CombineGlobally(merge_counts).without_defaults()
        | "WriteStats" >> beam.Map(write_counts_json, output)
    )

    types = smoothed[TYPES] | "LangTypes" >> beam.CombinePerKey(sum)
    lang_rows = (
        (
            lang_sums | "LangSumsRow" >> beam.Map(lambda kv: (kv[0], (*kv[1], 0))),
            types | "LangTypesRow" >> beam.Map(lambda kv: (kv[0], (0, 0, kv[1]))),
        )
        | "LangParts" >> beam.Flatten()
        | "LangRows" >> beam.CombinePerKey(_sum_tuples)
    )
    langs_done = _gather(lang_rows, "WriteLangs", write_languages, output)
    join_sinks([counts_done, heldout_done, stats_done, langs_done])
