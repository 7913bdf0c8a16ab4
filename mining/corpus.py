"""One side of a mining run: its sentences, metadata, vectors, and the cleaning before kNN.

Cleaning drops rows whose text is empty or whose vector is NaN/inf/zero or has a norm that
overflows float32 (each counted under its reason), and with
``unify`` folds duplicate sentences into one representative (counted as an event) that is mapped
back to every original row after mining, as LASER's ``--unify``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from labse_common.datafiles import read_parquet
from labse_common.embedding_store import (
    MANIFEST,
    VECTOR_DROP_REASONS,
    EmbeddingStore,
    count_problems,
    unit_rows,
    vector_problems,
)
from labse_common.errors import InputError
from labse_common.filesystems import is_remote
from labse_common.formats import PROVENANCE_COLUMNS
from labse_common.stats import StageCounter
from labse_common.textio import read_lines

log = logging.getLogger(__name__)

META_COLUMNS = ("id", *PROVENANCE_COLUMNS)


@dataclass
class Corpus:
    """A side's sentences and metadata as Arrow columns, never as Python objects per row.

    ``table`` has ``text`` (string or large_string, no nulls), ``id`` (string) and any provenance
    columns, each one array (not chunks). Held as Arrow (the bytes plus a 4- or 8-byte offset
    per row and column), a run reading, cleaning and writing N sentences grows ~240 B per
    sentence where the Python lists it replaced grew ~650 (bench/mine_corpus_bench.py), and
    the output rows are gathered by ``take``."""

    table: pa.Table
    lang: str = ""

    def __len__(self) -> int:
        return self.table.num_rows

    @property
    def text(self) -> pa.ChunkedArray:
        """The text column (one chunk)."""
        return self.table.column("text")

    @property
    def texts(self) -> list[str]:
        """The sentences as a Python list: for encoding them and for small inputs only."""
        return self.text.to_pylist()

    @property
    def meta(self) -> dict[str, pa.ChunkedArray]:
        """``id`` and the provenance columns present, by name (views, not copies)."""
        return {c: self.table.column(c) for c in META_COLUMNS if c in self.table.column_names}


def make_corpus(
    texts: pa.Array | pa.ChunkedArray | Sequence[str], meta: dict | None = None, lang: str = ""
) -> Corpus:
    """A :class:`Corpus` from a text column and optional metadata columns: null texts become
    empty (dropped later as ``empty_text``), a missing ``id`` becomes the row number."""
    text = (
        texts
        if isinstance(texts, (pa.Array, pa.ChunkedArray))
        else pa.array(texts, pa.large_string())
    )
    if not (pa.types.is_string(text.type) or pa.types.is_large_string(text.type)):
        text = text.cast(pa.large_string())  # each step copies the text: only when needed
    if text.null_count:
        text = pc.fill_null(text, "")
    meta = dict(meta or {})
    ids = meta.pop("id", None)
    if ids is None:
        ids = pa.array(np.arange(len(text), dtype=np.int64))
    elif not isinstance(ids, (pa.Array, pa.ChunkedArray)):
        ids = pa.array(ids)
    cols = {"text": text, "id": ids.cast(pa.string())}
    for name in META_COLUMNS[1:]:
        if name in meta:
            v = meta[name]
            cols[name] = v if isinstance(v, (pa.Array, pa.ChunkedArray)) else pa.array(v)
    return Corpus(pa.table({k: _one_chunk(v) for k, v in cols.items()}), lang)


def _one_chunk(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The column as one array: Arrow's ``take`` on a chunked column first joins every chunk
    (per call: ~10x slower and a transient copy of the column), and the output is gathered
    with many takes. A string column past 2 GiB becomes large_string to fit in one array."""
    if isinstance(col, pa.Array):
        return col
    if pa.types.is_string(col.type) and col.nbytes > 2**31 - 2**24:
        col = col.cast(pa.large_string())
    return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)


def _read_columns(p: Path, flag: str | None) -> pa.Table:
    """A Parquet file or folder's text, lang and metadata columns (not the others it carries)."""
    wanted = ["text", "lang", *META_COLUMNS]
    if p.is_file():
        return read_parquet(p, wanted, flag=flag)
    names = pq.ParquetDataset(p).schema.names
    return pq.read_table(p, columns=[c for c in wanted if c in names])


def read_corpus(path: str | os.PathLike, lang: str = "", flag: str | None = None) -> Corpus:
    """Read one sentence per line (``.txt``, any other suffix) or a Parquet with ``text``;
    a missing, damaged or foreign file is an InputError naming it (and ``flag``)."""
    if is_remote(os.fspath(path)):  # an embedding store on s3://, gs://: its shard Parquets
        table, p = EmbeddingStore(os.fspath(path)).all_metadata(), Path("store")
    else:
        p = Path(path)
        if not p.exists():
            raise InputError(p, "corpus not found", flag)
    if is_remote(os.fspath(path)) or p.is_dir() or p.suffix == ".parquet":
        # An embedding store directory carries its sentences in its shard Parquets.
        if not is_remote(os.fspath(path)):
            table = (
                EmbeddingStore(p).all_metadata()
                if (p / MANIFEST).is_file()
                else _read_columns(p, flag)
            )
        if "text" not in table.column_names:
            raise InputError(
                p, f"Parquet corpus needs a 'text' column, has {table.column_names}", flag
            )
        if not lang and "lang" in table.column_names and table.num_rows:
            lang = str(table.column("lang")[0].as_py() or "")
        meta = {c: table.column(c) for c in META_COLUMNS if c in table.column_names}
        # The decoder's page buffers are freed but kept by Arrow's allocator: give them back.
        pa.default_memory_pool().release_unused()
        try:
            return make_corpus(table.column("text"), meta, lang)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise InputError(p, f"its 'text' column is not text ({e})", flag) from e
    return make_corpus(read_lines(p), None, lang)


@dataclass
class Side:
    """A cleaned side: compact unit vectors ``x`` and, per compact row, its original rows."""

    x: np.ndarray  # (n_unique, dim) float32 unit rows (empty when not materialised)
    offsets: np.ndarray  # CSR: members[offsets[u]:offsets[u+1]] are the rows of unique u
    members: np.ndarray
    n_rows: int

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    def representative(self) -> np.ndarray:
        return self.members[self.offsets[:-1]]


def gather_rows(blocks: Sequence[np.ndarray], rows: np.ndarray, dim: int) -> np.ndarray:
    """Rows (sorted global indices) of a list of blocks, as one float32 array."""
    out = np.empty((len(rows), dim), dtype=np.float32)
    start = 0
    for b in blocks:
        lo, hi = np.searchsorted(rows, [start, start + len(b)])
        if hi > lo:
            out[lo:hi] = b[rows[lo:hi] - start]
        start += len(b)
    return out


def prepare_side(
    texts: pa.Array | pa.ChunkedArray | Sequence[str],
    blocks: Sequence[np.ndarray],
    unify: bool,
    counter: StageCounter,
    unit: str,
    materialize: bool = True,
    text_input: tuple[str | None, str | None] = (None, None),
    vector_input: tuple[str | None, str | None] = (None, None),
) -> Side:
    """Drop empty/invalid rows, optionally unify duplicates, normalise; count everything.

    The text tests run as Arrow kernels (no Python string per row): a text is empty when
    nothing is left after trimming Unicode whitespace (the same characters ``str.strip``
    removes), and duplicates are the same UTF-8 bytes. A vector is dropped under its
    :data:`~labse_common.embedding_store.VECTOR_DROP_REASONS` reason. ``materialize=False``
    leaves ``x`` empty: sharded mining loads the rows shard by shard.

    A side with rows but none usable is an :class:`InputError` naming the input that made them
    unusable (``text_input`` / ``vector_input``: its path and flag) with the counts: mining
    it would give 0 pairs, exit 0 and no hint why.
    """
    if not isinstance(texts, (pa.Array, pa.ChunkedArray)):
        texts = pa.array(list(texts), pa.large_string())
    if texts.null_count:
        texts = pc.fill_null(texts, "")
    n = len(texts)
    n_vec = sum(len(b) for b in blocks)
    if n_vec != n:
        raise InputError(None, f"{unit}: {n} sentences but {n_vec} embedding rows (row i = line i)")
    dim = blocks[0].shape[1] if blocks else 0
    counter.add_in(unit, n)
    nonempty = _nonempty(texts)
    codes = np.concatenate([vector_problems(b) for b in blocks]) if n else np.zeros(0, np.int8)
    dropped = {"empty_text": int((~nonempty).sum())}
    dropped.update(count_problems(codes[nonempty]))  # a row is dropped once, for its text first
    for reason, k in dropped.items():
        counter.add_dropped(unit, reason, k)
    rows = np.flatnonzero(nonempty & (codes == 0))
    counter.add_out(unit, len(rows))
    if n and not len(rows):
        _nothing_usable(unit, n, dropped, text_input, vector_input)

    if unify and len(rows):
        group, n_unique = _first_seen_groups(texts, rows)
        order = np.argsort(group, kind="stable")  # members of a group stay in row order
        members = rows[order]
        offsets = np.zeros(n_unique + 1, dtype=np.int64)
        offsets[1:] = np.cumsum(np.bincount(group, minlength=n_unique))
        counter.add_event(unit, "duplicate_unified", len(rows) - n_unique)
    else:
        members = rows
        offsets = np.arange(len(rows) + 1, dtype=np.int64)
    side = Side(x=np.zeros((0, dim), np.float32), offsets=offsets, members=members, n_rows=n)
    if materialize:
        side.x = unit_rows(gather_rows(blocks, side.representative(), dim), unit)
    return side


def _nothing_usable(
    unit: str,
    n: int,
    dropped: dict[str, int],
    text_input: tuple[str | None, str | None],
    vector_input: tuple[str | None, str | None],
) -> None:
    """The one-line error of a side whose every row was dropped, naming the guilty input."""
    by_vectors = sum(dropped[r] for r in VECTOR_DROP_REASONS)
    path, flag = vector_input if by_vectors else text_input
    what = "vector" if by_vectors == n else "row"
    why = (
        "is zero, NaN/inf or has an overflowing norm"
        if by_vectors == n
        else "has an empty text or an unusable vector"
    )
    counts = ", ".join(f"{r} {k}" for r, k in dropped.items() if k)
    raise InputError(
        path, f"no usable row to mine: every {what} of {unit} {why} ({n} dropped: {counts})", flag
    )


def _first_seen_groups(
    texts: pa.Array | pa.ChunkedArray, rows: np.ndarray, piece: int = 1 << 18
) -> tuple[np.ndarray, int]:
    """Per kept row (``rows``, ascending), the number of its distinct text in order of first
    appearance; and how many distinct texts there are.

    Sort-based, not a hash table: Arrow sorts row indices by text where the text lies (~8 bytes
    per row), and equal neighbours are compared a piece at a time, so the only copy of text is
    one piece. A hash of the column held a second copy of every distinct text and its table,
    ~3x the text's size at its peak."""
    keep = np.zeros(len(texts), bool)
    keep[rows] = True
    order = pc.array_sort_indices(texts).to_numpy()
    order = order[keep[order]]  # kept rows, sorted by text (ties in row order: a stable sort)
    del keep
    same = np.zeros(len(order), bool)  # same[i]: the i-th sorted row repeats the one before
    for lo in range(1, len(order), piece):
        idx = pa.array(order[lo - 1 : lo + piece])
        vals = texts.take(idx)
        eq = pc.equal(vals.slice(1), vals.slice(0, len(vals) - 1))
        if isinstance(eq, pa.ChunkedArray):
            eq = eq.combine_chunks()
        same[lo : lo + len(idx) - 1] = eq.to_numpy(zero_copy_only=False)
    run = np.cumsum(~same) - 1  # the text's number in sorted order
    starts = np.flatnonzero(~same)
    first = order[starts]  # each run's first row (ties were left in row order)
    rank = np.empty(len(starts), np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(starts))
    group = np.empty(len(texts), np.int64)
    group[order] = rank[run]
    return group[rows], len(starts)


def _nonempty(texts: pa.Array | pa.ChunkedArray, piece: int = 1 << 18) -> np.ndarray:
    """Which texts have something left after trimming whitespace; trimmed piece by piece, so
    the trimmed copy is of one piece only."""
    out = np.zeros(len(texts), bool)
    for lo in range(0, len(texts), piece):
        part = texts.slice(lo, piece)
        mask = pc.not_equal(pc.utf8_trim_whitespace(part), "")
        if isinstance(mask, pa.ChunkedArray):
            mask = mask.combine_chunks()
        out[lo : lo + len(part)] = mask.to_numpy(zero_copy_only=False)
    return out


def expand_pairs(
    src: Side, trg: Side, src_u: np.ndarray, trg_u: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Map pairs of unique sentences back to every (src row, trg row) combination.

    Returns ``(src_rows, trg_rows, pair_index)``, pair_index pointing into the input pairs.
    """
    cs, ct = src.sizes[src_u], trg.sizes[trg_u]
    tot = cs * ct
    pi = np.repeat(np.arange(len(src_u)), tot)
    within = np.arange(int(tot.sum())) - np.repeat(np.cumsum(tot) - tot, tot)
    a, b = within // ct[pi], within % ct[pi]
    src_rows = src.members[src.offsets[src_u][pi] + a]
    trg_rows = trg.members[trg.offsets[trg_u][pi] + b]
    return src_rows, trg_rows, pi
