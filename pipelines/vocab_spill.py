"""A file shuffle for the vocabulary's word counts, for runners that hold a shuffle in RAM.

On the local runner Beam's ``CombinePerKey`` over (language, word) kept every distinct key in the
driver: 6.5M keys and ~3.3 GB at 10M sentences (bench/HISTORY.md, "The paper's vocabulary size"),
growing with the corpus. Here the counts go through sorted files instead, with the corpus
dedup's merge machinery (``pipelines/spill.py``):

1. :class:`SpillCounts` sums a worker's (language, word) partial counts in a buffer and, every
   ``spill_rows`` distinct keys, writes one Parquet file per word shard, sorted by (word,
   language). Only the file's path travels through Beam's shuffle.
2. :func:`merged_words` reads a shard's files (at most ``spill_fan_in`` at once, in rounds above
   that), sums the partials of equal (word, language) and yields each word with its languages
   in language order, which is what the smoothing (``pipelines.vocab.SmoothShard``) reads from
   Beam's group in the in-memory mode.

Memory is then one buffer per worker plus one row group per open spill file, and while
smoothing the words of one shard (distinct words / shards). Both modes write the same bytes
(``tests/pipelines/test_vocab_spill.py``): partial sums are integers and the first occurrence is a
minimum, so neither depends on the order partials meet in.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from operator import itemgetter

import apache_beam as beam
import pyarrow as pa
from apache_beam.transforms.window import GlobalWindows

from labse_common import filesystems
from pipelines.parquet_io import write_table
from pipelines.spill import GROUP_ROWS, SpillFormat, merge_sorted, reduce_spilled, spill_table

#: A spill row: one (word, language)'s partial count and earliest first-occurrence position.
COUNTS = SpillFormat(
    pa.schema(
        [("word", pa.string()), ("lang", pa.string()), ("n", pa.int64()), ("first", pa.int64())]
    ),
    itemgetter(0, 1),
)


class SpillCounts(beam.DoFn):
    """((lang, word), (n, first)) partials -> (shard, spill file path) per shard it holds.

    ``shard_of(word)`` is the job's word-to-shard hash, so a shard's files hold its words only.
    """

    def __init__(self, folder: str, max_rows: int, shards: int, shard_of) -> None:
        self.folder, self.max_rows, self.shards, self.shard_of = folder, max_rows, shards, shard_of
        self._buf: dict[tuple[str, str], list[int]] = {}

    def start_bundle(self) -> None:
        self._buf = {}

    def process(self, kv):
        (lang, word), (n, first) = kv
        cur = self._buf.get((word, lang))
        if cur is None:
            self._buf[(word, lang)] = [n, first]
        else:
            cur[0] += n
            cur[1] = min(cur[1], first)
        if len(self._buf) >= self.max_rows:
            yield from self._flush()

    def finish_bundle(self):
        for kv in self._flush():
            yield GlobalWindows.windowed_value(kv)

    def _flush(self) -> Iterator[tuple[int, str]]:
        buf, self._buf = self._buf, {}
        by_shard: dict[int, list[tuple]] = {}
        for (word, lang), (n, first) in buf.items():
            by_shard.setdefault(self.shard_of(word, self.shards), []).append((word, lang, n, first))
        del buf
        for shard, rows in sorted(by_shard.items()):
            rows.sort(key=COUNTS.key)
            path = filesystems.join(self.folder, f"{shard:05d}", f"{uuid.uuid4().hex}.parquet")
            yield shard, write_table(spill_table(rows, COUNTS), path, GROUP_ROWS)


def merged_words(paths: list[str], fan_in: int) -> Iterator[tuple[str, list[tuple[str, int, int]]]]:
    """A shard's spill files -> (word, [(lang, n, first), ...] in language order), by word.

    The files are merged in rounds down to ``fan_in`` first; all of them are deleted once read.
    """
    paths = reduce_spilled(sorted(paths), fan_in, COUNTS)
    word, per_lang = None, []
    for (w, lang), (_, _, n, first) in merge_sorted(paths, COUNTS):
        if w != word:
            if per_lang:
                yield word, per_lang
            word, per_lang = w, []
        if per_lang and per_lang[-1][0] == lang:  # the same (word, language) from another file
            _, n0, f0 = per_lang[-1]
            per_lang[-1] = (lang, n0 + n, min(f0, first))
        else:
            per_lang.append((lang, n, first))
    if per_lang:
        yield word, per_lang
    filesystems.delete(paths)
