"""A file shuffle for the dedup, for runners that hold a shuffle in RAM (the local runner).

Beam's local engine keeps every shuffled element in the driver's memory, so the in-memory dedup
(``CombinePerKey(DedupShard)``) needed ~2.3 KB of RAM per distinct sentence of the whole job
(bench/README, "Scale ladder: corpus jobs"). Here the shuffle goes through files instead, as
external sorts and datatrove/stopes' dedup do:

1. :class:`SpillRows` buffers the kept rows of a worker, and every ``spill_rows`` rows writes one
   Parquet file per (language, shard) it holds, sorted by :func:`pipelines.dedup.order_key`
   (dedup key first). Only the file's path travels through Beam's shuffle.
2. :class:`MergeSpilled` gets a (language, shard)'s paths, merges the sorted files row group by
   row group (``heapq.merge``), collapses each run of equal dedup keys into its first row (the
   representative the in-memory combine picks) and writes the output files as they fill.

Memory is then one buffer per worker plus, while merging, one row group per spill file of the
shard: it no longer grows with the input. The files are the same bytes as the in-memory path's
(``tests/test_spill_shuffle.py``). Spill files live under ``OUTPUT/_tmp-<job>/_spill/`` (a
place every worker sees wherever the output is), are deleted once merged, and the folder is
removed before the output is committed (:func:`remove_spill`).
"""

from __future__ import annotations

import heapq
import logging
import shutil
import uuid
from collections.abc import Iterator
from operator import itemgetter

import apache_beam as beam
import pyarrow as pa
from apache_beam.transforms.window import GlobalWindows

from labse_common import filesystems
from labse_common.datafiles import iter_parquet_batches
from labse_common.formats import SENTENCE_ROW_FIELDS
from labse_common.output_dir import is_remote
from pipelines import local_runner
from pipelines.dedup import order_key
from pipelines.parquet_io import WriteSentenceShard, write_table

log = logging.getLogger(__name__)

SPILL_DIR = "_spill"
#: Rows per row group of a spill file: the merge holds one group per file at a time.
GROUP_ROWS = 1024
_SCHEMA = pa.schema([("dkey", pa.string()), *SENTENCE_ROW_FIELDS])
_LOCAL_RUNNERS = {local_runner.NAME, "DirectRunner", "BundleBasedDirectRunner", "SwitchingDirectRunner"}


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
            cols = list(zip(*((d, *row) for d, row in rows)))
            table = pa.Table.from_arrays([pa.array(c, type=f.type) for c, f in zip(cols, _SCHEMA)],
                                         schema=_SCHEMA)  # fmt: skip
            name = f"{uuid.uuid4().hex}.parquet"
            yield key, write_table(table, filesystems.join(self.folder, lang, shard, name), GROUP_ROWS)


def _sorted_rows(path: str) -> Iterator[tuple[tuple, str | None, tuple]]:
    """A spill file's rows as (order key, dedup key, row), one row group in memory."""
    for batch in iter_parquet_batches(path, batch_size=GROUP_ROWS):
        cols = [c.to_pylist() for c in batch.columns]
        for dkey, *row in zip(*cols):
            row = tuple(row)
            yield order_key(dkey, row), dkey, row


class MergeSpilled(beam.DoFn):
    """(group key, spill paths) -> the group's output files, as :class:`WriteSentenceShard`."""

    def __init__(self, writer: WriteSentenceShard, dedup: bool, keep_collapsed: bool) -> None:
        self.writer, self.dedup, self.keep_collapsed = writer, dedup, keep_collapsed

    def process(self, kv):
        key, paths = kv
        paths = sorted(paths)  # a fixed merge order: ties (equal order keys) come out the same
        merged = heapq.merge(*(_sorted_rows(p) for p in paths), key=itemgetter(0))
        yield from self.writer.write_entries(key, self._entries(merged))
        filesystems.delete(paths)  # disk back as soon as a group is written

    def _entries(self, merged) -> Iterator[list]:
        cur, cur_key = None, None
        for _, dkey, row in merged:
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


def remove_spill(output: str) -> None:
    """Removes ``OUTPUT/_spill`` (emptied folders; files of a group that failed) before commit."""
    path = spill_dir(output)
    if is_remote(path):
        left = filesystems.match(path + "/**")
        filesystems.delete(left)
    else:
        shutil.rmtree(path, ignore_errors=True)
