"""Job-wide exact dedup: rows grouped per (language, hash shard) collapse to one representative."""

from __future__ import annotations

import zlib

import apache_beam as beam

from labse_common.formats import SENTENCE_ROW_NAMES

_TEXT, _SOURCE, _DOC_ID = (SENTENCE_ROW_NAMES.index(n) for n in ("text", "source", "doc_id"))


def shard_of(dkey: str | None, text: str, shards: int) -> int:
    if dkey is not None:
        return int(dkey[:8], 16) % shards  # the dedup key is already a uniform hash
    # crc32 spreads rows as well as the dedup hash at a fraction of its cost.
    return zlib.crc32(text.encode("utf-8", "replace")) % shards


def _rank(row: tuple) -> tuple:
    # The deterministic representative of a duplicate group: first by (source, doc_id, text).
    return (row[_SOURCE], row[_DOC_ID], row[_TEXT])


def order_key(dkey: str | None, row: tuple) -> tuple:
    """Where a row goes in its shard's output: by dedup key, then rank. A duplicate group's
    representative is its first row in this order, so the file shuffle (``pipelines/spill.py``),
    which merges rows sorted this way, writes the same files as the in-memory combine."""
    return (dkey or "", *_rank(row))


class DedupShard(beam.CombineFn):
    """Merges the row batches of one (language, shard) group, collapsing exact duplicates.

    The accumulator maps dedup key -> [representative row, copies, collapsed rows or None].
    Combiner lifting merges each bundle's batches before the shuffle, so duplicates inside a
    worker never cross the network. The collapsed rows themselves are kept only when asked for
    (``--write-dropped``). Without dedup every row is its own entry. One group's distinct rows
    are held in memory by one worker: size ``shards_per_language`` so that (rows per language /
    shards) fits, e.g. 1M rows (~0.5 GB) per shard.
    """

    def __init__(self, dedup: bool = True, keep_collapsed: bool = False) -> None:
        self.dedup, self.keep_collapsed = dedup, keep_collapsed

    def create_accumulator(self) -> dict:
        return {}

    def _add(self, acc: dict, dkey, row: tuple, n: int, collapsed: list | None) -> None:
        if not self.dedup:
            acc[len(acc)] = [row, n, None]
            return
        cur = acc.get(dkey)
        if cur is None:
            acc[dkey] = [row, n, collapsed]
            return
        cur[1] += n
        loser = row
        if _rank(row) < _rank(cur[0]):
            loser, cur[0] = cur[0], row
        if self.keep_collapsed:
            if cur[2] is None:
                cur[2] = []
            cur[2].append(loser)
            cur[2].extend(collapsed or ())

    def add_input(self, acc: dict, batch: list) -> dict:
        for dkey, row in batch:
            self._add(acc, dkey, row, 1, None)
        return acc

    def merge_accumulators(self, accs) -> dict:
        it = iter(accs)
        out = next(it)
        for acc in it:
            for dkey, (row, n, collapsed) in acc.items():
                self._add(out, dkey, row, n, collapsed)
        return out

    def extract_output(self, acc: dict) -> dict:
        return acc
