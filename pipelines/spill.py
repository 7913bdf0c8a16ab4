"""A file shuffle for the dedup, for runners that hold a shuffle in RAM (the local runner).

Beam's local engine keeps every shuffled element in the driver's memory, so the in-memory dedup
(``CombinePerKey(DedupShard)``) needed ~2.3 KB of RAM per distinct sentence of the whole job
(bench/HISTORY.md, "Scale ladder: corpus jobs"). Here the shuffle goes through files instead, as
external sorts and datatrove/stopes' dedup do:

1. :class:`SpillRows` buffers the kept rows of a worker, and every ``spill_rows`` rows writes one
   Parquet file per (language, shard) it holds, sorted by :func:`pipelines.dedup.order_key`
   (dedup key first). Only the file's path travels through Beam's shuffle.
2. :class:`MergeSpilled` gets a (language, shard)'s paths, merges the sorted files row group by
   row group (``heapq.merge``), collapses each run of equal dedup keys into its first row (the
   representative the in-memory combine picks) and writes the output files as they fill.

Memory is then one buffer per worker plus, while merging, one row group per open spill file:
at most ``spill_fan_in`` files are read at once (a reader holds one decoded row group, ~1.4 MB
of sentence rows). A shard with more files is merged in rounds, as external sorts do:
each group of ``spill_fan_in`` files into one sorted file, until the last merge reads at most
``spill_fan_in``. Without the bound the merge's memory grew with the input: 102 spill files of
a 20M-sentence Wikipedia run held ~1.4 GB (bench/README). Rounds keep the files' order, and
``heapq.merge`` is stable, so the output is the same bytes as one merge of every file, and
those are the same bytes as the in-memory path's
(``tests/pipelines/test_spill.py``). Spill files live under ``OUTPUT/_tmp-<job>/_spill/`` (a
place every worker sees wherever the output is), are deleted once merged, and the folder is
removed before the output is committed (:func:`remove_spill`).
"""

from __future__ import annotations

import heapq
import logging
import shutil
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.transforms.window import GlobalWindows

from labse_common import filesystems
from labse_common.datafiles import iter_parquet_row_groups
from labse_common.filesystems import is_remote
from labse_common.formats import SENTENCE_ROW_FIELDS
from pipelines import local_runner
from pipelines.dedup import order_key
from pipelines.parquet_io import WriteSentenceShard, write_table

log = logging.getLogger(__name__)

SPILL_DIR = "_spill"
#: Rows per row group of a spill file: the merge holds one group per file at a time.
GROUP_ROWS = 1024
#: Default of ``corpus.spill_fan_in``: the most spill files one merge reads at once.
FAN_IN = 32
_SCHEMA = pa.schema([("dkey", pa.string()), *SENTENCE_ROW_FIELDS])
_LOCAL_RUNNERS = {
    local_runner.NAME,
    "DirectRunner",
    "BundleBasedDirectRunner",
    "SwitchingDirectRunner",
}


@dataclass(frozen=True)
class SpillFormat:
    """What a kind of spill file holds: its schema, and the sort key of one stored row (a tuple
    of the schema's columns). The merge machinery below is the same for every kind; the corpus
    dedup and the vocabulary's word counts (``pipelines/vocab_spill.py``) each define one."""

    schema: pa.Schema
    key: Callable[[tuple], Any]


def _sentence_key(stored: tuple) -> tuple:
    return order_key(stored[0], stored[1:])


#: The dedup's spill rows: (dedup key, *sentence row), in output order.
SENTENCES = SpillFormat(_SCHEMA, _sentence_key)


def use_file_shuffle(shuffle: str, runner: str | None) -> bool:
    """``corpus.shuffle`` resolved for a runner: ``auto`` means files on the local engines."""
    if shuffle != "auto":
        return shuffle == "files"
    if runner is None:  # Beam's default: the DirectRunner
        return True
    name = runner if isinstance(runner, str) else type(runner).__name__
    return name in _LOCAL_RUNNERS or name.rsplit(".", 1)[-1] in _LOCAL_RUNNERS


def spill_dir(output: str) -> str:
    return filesystems.join(output, SPILL_DIR)


class SpillRows(beam.DoFn):
    """(group key, [(dedup key, row), ...]) batches -> (group key, sorted spill file path)."""

    def __init__(self, folder: str, max_rows: int) -> None:
        self.folder, self.max_rows = folder, max_rows
        self._buf: dict[str, list] = {}
        self._n = 0

    def start_bundle(self) -> None:
        self._buf, self._n = {}, 0

    def process(self, kv):
        key, batch = kv
        self._buf.setdefault(key, []).extend(batch)
        self._n += len(batch)
        if self._n >= self.max_rows:
            yield from self._flush()

    def finish_bundle(self):
        for kv in self._flush():
            yield GlobalWindows.windowed_value(kv)

    def _flush(self) -> Iterator[tuple[str, str]]:
        buf, self._buf, self._n = self._buf, {}, 0
        for key, rows in buf.items():
            rows.sort(key=lambda r: order_key(r[0], r[1]))
            lang, shard = key.split("\t")
            table = spill_table([(d, *row) for d, row in rows], SENTENCES)
            name = f"{uuid.uuid4().hex}.parquet"
            yield (
                key,
                write_table(table, filesystems.join(self.folder, lang, shard, name), GROUP_ROWS),
            )


def spill_table(rows: list[tuple], fmt: SpillFormat) -> pa.Table:
    """Stored-row tuples -> a table of the format's schema."""
    cols = list(zip(*rows)) or [() for _ in fmt.schema]
    return pa.Table.from_arrays(
        [pa.array(c, type=f.type) for c, f in zip(cols, fmt.schema)], schema=fmt.schema
    )


def _sorted_rows(path: str, fmt: SpillFormat = SENTENCES) -> Iterator[tuple[Any, tuple]]:
    """A spill file's rows as (sort key, stored row), one row group in memory."""
    key = fmt.key
    for batch in iter_parquet_row_groups(path):
        for stored in zip(*(c.to_pylist() for c in batch.columns)):
            yield key(stored), stored


class MergeSpilled(beam.DoFn):
    """(group key, spill paths) -> the group's output files, as :class:`WriteSentenceShard`."""

    def __init__(
        self, writer: WriteSentenceShard, dedup: bool, keep_collapsed: bool, fan_in: int = FAN_IN
    ) -> None:
        if fan_in < 2:
            raise ValueError(f"fan_in must be >= 2, got {fan_in}")
        self.writer, self.dedup, self.keep_collapsed = writer, dedup, keep_collapsed
        self.fan_in = fan_in

    def process(self, kv):
        key, paths = kv
        paths = sorted(paths)  # a fixed merge order: ties (equal order keys) come out the same
        paths = reduce_spilled(paths, self.fan_in)
        yield from self.writer.write_entries(key, self._entries(merge_sorted(paths)))
        filesystems.delete(paths)  # disk back as soon as a group is written

    def _entries(self, merged) -> Iterator[list]:
        cur, cur_key = None, None
        for _, stored in merged:
            dkey, row = stored[0], stored[1:]
            if cur is not None and self.dedup and dkey == cur_key:
                cur[1] += 1
                if self.keep_collapsed:
                    if cur[2] is None:
                        cur[2] = []
                    cur[2].append(row)
                continue
            if cur is not None:
                yield cur
            cur, cur_key = [row, 1, None], dkey
        if cur is not None:
            yield cur


def merge_sorted(paths: Iterable[str], fmt: SpillFormat = SENTENCES) -> Iterator[tuple[Any, tuple]]:
    """The (sort key, stored row) of sorted spill files in one order; ties come in the order of
    ``paths``."""
    return heapq.merge(*(_sorted_rows(p, fmt) for p in paths), key=itemgetter(0))


def reduce_spilled(paths: list[str], fan_in: int, fmt: SpillFormat = SENTENCES) -> list[str]:
    """Merges runs of ``fan_in`` consecutive files into one until at most ``fan_in`` are left.

    Every row is kept (the dedup happens in the last merge), runs keep their order, and the
    merged files replace their inputs, which are deleted as soon as they are merged."""
    rnd = 0
    while len(paths) > fan_in:
        rnd += 1
        log.info("merging %d spill files in runs of %d (round %d)", len(paths), fan_in, rnd)
        nxt = []
        for i in range(0, len(paths), fan_in):
            run = paths[i : i + fan_in]
            if len(run) == 1:
                nxt.append(run[0])
                continue
            out = f"{run[0].rsplit('/', 1)[0]}/merged-{rnd}-{uuid.uuid4().hex}.parquet"
            _write_rows(merge_sorted(run, fmt), out, fmt)
            filesystems.delete(run)
            nxt.append(out)
        paths = nxt
    return paths


def _write_rows(rows: Iterator[tuple[Any, tuple]], path: str, fmt: SpillFormat) -> None:
    """Sorted (sort key, stored row) -> one spill file, a row group at a time."""
    with filesystems.create(path) as f:
        writer = pq.ParquetWriter(f, fmt.schema, compression="zstd")
        buf: list[tuple] = []
        for _, stored in rows:
            buf.append(stored)
            if len(buf) == GROUP_ROWS:
                writer.write_table(spill_table(buf, fmt), row_group_size=GROUP_ROWS)
                buf = []
        if buf:
            writer.write_table(spill_table(buf, fmt), row_group_size=GROUP_ROWS)
        writer.close()


def remove_spill(output: str) -> None:
    """Removes ``OUTPUT/_spill`` (emptied folders; files of a group that failed) before commit."""
    path = spill_dir(output)
    if is_remote(path):
        left = filesystems.match(path + "/**")
        filesystems.delete(left)
    else:
        shutil.rmtree(path, ignore_errors=True)
