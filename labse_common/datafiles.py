"""Reading user data: every damaged, empty or wrong-shaped file becomes one :class:`InputError`.

The commands read Parquet tables, JSON reports and manifests, ``.npy`` arrays and text through
these helpers instead of calling pyarrow/json/numpy directly. pyarrow, numpy and ``json`` raise a
dozen exception types for damage (``ArrowInvalid``, ``OSError: Corrupt snappy compressed data``,
``UnicodeDecodeError``, ``ValueError: mmap length is greater than file size``) and none of them
names the file; here each becomes ``InputError(path, problem, flag)``, which the command
foundation prints as one line with exit status 2. A stage that survives damage (counts a bad
file and goes on) catches :class:`InputError` per file.

Reading is whole: a Parquet file is decoded to the end, so damage in the middle (footer intact)
is found here, not half-way through a stage that already wrote output.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from labse_common.errors import InputError
from labse_common.filesystems import is_remote
from labse_common.stats import StageCounter

log = logging.getLogger(__name__)

# What pyarrow, numpy and the codecs raise for a damaged or foreign file.
_DAMAGE = (pa.ArrowException, OSError, ValueError, EOFError, UnicodeDecodeError)


def is_text_type(t: pa.DataType) -> bool:
    """The one rule for a text column (pairs' src/trg, encode's text): strings, dictionary-encoded
    strings, or a column that is all null. Numbers are refused, never cast: "0", "1", ... from an
    id column put by mistake where the text belongs would be filtered or embedded as sentences."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t)


def check_text_column(path: str, name: str, t: pa.DataType, flag: str | None = None) -> None:
    """InputError naming the file, the column and its type unless :func:`is_text_type`."""
    if not is_text_type(t):
        raise InputError(
            path,
            f"column {name!r} holds {t}, not UTF-8 text (a text column must hold strings)",
            flag,
        )


def _missing(path: str, flag: str | None) -> InputError:
    return InputError(path, "not found", flag)


def _check_file(path: str | os.PathLike, flag: str | None) -> str:
    p = os.fspath(path)
    if is_remote(p):
        return p  # remote: existence is checked by the read itself
    if not os.path.exists(p):
        raise _missing(p, flag)
    if os.path.isdir(p):
        raise InputError(p, "is a folder, expected a file", flag)
    if os.path.getsize(p) == 0:
        raise InputError(p, "empty file", flag)
    return p


def _open_remote(path: str):
    from labse_common import filesystems

    return filesystems.open_read(path)


# Bytes read at a time by a streaming reader (iter_parquet_batches).
STREAM_BUFFER = 1 << 20


def parquet_file(
    path: str | os.PathLike, flag: str | None = None, stream: bool = False
) -> pq.ParquetFile:
    """Open a Parquet file (footer read and checked); damage is an InputError. ``stream``: for
    reading batch by batch in bounded memory (no pre-buffering, pages read through a small
    buffer)."""
    p = _check_file(path, flag)
    try:
        src = _open_remote(p) if is_remote(p) else p
        if stream:
            # pyarrow's defaults pre-buffer every row group iter_batches is asked for (the whole
            # file) and read a column chunk whole (the miner's pq.write_table makes one row group
            # of up to 1M rows): peak memory would grow with the file (a 1M-pair mined.parquet:
            # +160 MiB). Streamed, it is the batch and a buffer per column, at the same speed.
            return pq.ParquetFile(src, pre_buffer=False, buffer_size=STREAM_BUFFER)
        return pq.ParquetFile(src)
    except FileNotFoundError:
        raise _missing(p, flag) from None
    except _DAMAGE as e:
        raise InputError(p, f"not a readable Parquet file ({_short(e)})", flag) from e


def read_parquet(
    path: str | os.PathLike,
    columns: Sequence[str] | None = None,
    flag: str | None = None,
    required: Sequence[str] = (),
) -> pa.Table:
    """The whole table (or ``columns`` of it), decoded to the end; ``required`` columns must be
    there. Damage anywhere in the file, a missing column: InputError naming the file."""
    pf = parquet_file(path, flag)
    names = set(pf.schema_arrow.names)
    lacking = [c for c in required if c not in names]
    if lacking:
        raise InputError(
            path,
            f"has no column {', '.join(map(repr, lacking))} (columns: {', '.join(sorted(names))})",
            flag,
        )
    cols = [c for c in columns if c in names] if columns is not None else None
    try:
        return pf.read(columns=cols)
    except _DAMAGE as e:
        raise InputError(path, f"damaged Parquet ({_short(e)})", flag) from e


def iter_parquet_batches(
    path: str | os.PathLike,
    columns: Sequence[str] | None = None,
    flag: str | None = None,
    batch_size: int = 65_536,
) -> Iterator[pa.RecordBatch]:
    """Record batches in order; damage raises InputError when it is reached (the batches before
    it have been yielded: a caller that survives damage counts the rest of the file as lost)."""
    pf = parquet_file(path, flag, stream=True)
    it = pf.iter_batches(batch_size=batch_size, columns=list(columns) if columns else None)
    while True:
        try:
            batch = next(it)
        except StopIteration:
            return
        except _DAMAGE as e:
            raise InputError(path, f"damaged Parquet ({_short(e)})", flag) from e
        yield batch


@dataclass(frozen=True)
class LostRows:
    """Rows of a Parquet file that could not be decoded: the rest of one damaged row group."""

    row_group: int
    rows: int
    problem: str


def iter_parquet_surviving(
    path: str | os.PathLike,
    columns: Sequence[str] | None = None,
    flag: str | None = None,
    batch_size: int = 65_536,
) -> Iterator[pa.RecordBatch | LostRows]:
    """Record batches in order, going on past damage: a row group that fails to decode yields
    one :class:`LostRows` (its rows not yet yielded, counted from the footer) and reading goes on
    with the next group, whose column chunks the footer locates independently. Stages whose rows
    stand alone (word counts, pair rules) count the losses (:func:`iter_parquet_counted`); the
    embedding store keeps the lost rows' places. A file whose footer cannot be read is one
    InputError, as in :func:`parquet_file`."""
    pf = parquet_file(path, flag, stream=True)
    cols = list(columns) if columns else None
    for g in range(pf.num_row_groups):
        done, want = 0, pf.metadata.row_group(g).num_rows
        it = pf.iter_batches(batch_size=batch_size, row_groups=[g], columns=cols)
        while True:
            try:
                batch = next(it)
            except StopIteration:
                # The footer's row count says whether the group was read whole: a group that
                # ends short without an error loses the rest all the same, counted.
                if done < want:
                    yield LostRows(g, want - done, f"{want - done} of {want} rows missing")
                break
            except _DAMAGE as e:
                yield LostRows(g, want - done, _short(e))
                break
            done += batch.num_rows
            yield batch


def read_row_group_surviving(
    pf: pq.ParquetFile, group: int, columns: Sequence[str] | None = None
) -> pa.Table | LostRows:
    """One row group decoded whole, or :class:`LostRows` (all its rows) when it is damaged."""
    try:
        return pf.read_row_group(group, columns=list(columns) if columns else None)
    except _DAMAGE as e:
        return LostRows(group, pf.metadata.row_group(group).num_rows, _short(e))


def count_lost(counter: StageCounter, unit: str, path: str, lost: LostRows) -> None:
    """Log a damaged row group and count its rows as ``unit`` in and dropped
    ``damaged_row_group`` (and the event ``damaged_row_groups`` on ``files``): the bookkeeping
    of every stage whose rows stand alone."""
    log.warning(
        "%s: row group %d damaged, its %d %s dropped (%s)",
        path,
        lost.row_group,
        lost.rows,
        unit,
        lost.problem,
    )
    counter.add_in(unit, lost.rows)
    counter.add_dropped(unit, "damaged_row_group", lost.rows)
    counter.add_event("files", "damaged_row_groups")


def iter_parquet_counted(
    path: str,
    counter: StageCounter,
    unit: str,
    columns: Sequence[str] | None = None,
    flag: str | None = None,
    batch_size: int = 65_536,
) -> Iterator[pa.RecordBatch]:
    """:func:`iter_parquet_surviving` with the losses counted by :func:`count_lost`; a file of
    which no row decodes is an InputError (so the caller counts it unreadable)."""
    read = lost = 0
    for batch in iter_parquet_surviving(path, columns, flag, batch_size):
        if isinstance(batch, LostRows):
            count_lost(counter, unit, path, batch)
            lost += batch.rows
            continue
        read += batch.num_rows
        yield batch
    if lost and not read:
        raise InputError(path, "every row group is damaged", flag)


def iter_parquet_row_groups(
    path: str | os.PathLike, columns: Sequence[str] | None = None, flag: str | None = None
) -> Iterator[pa.Table]:
    """Row groups in order, one decoded at a time, for files written in small row groups (the
    dedup's spill files). A k-way merge keeps one open per file: ~1.4 MB for a 1,024-row group
    of sentence rows, where :func:`iter_parquet_batches`' reader keeps ~5.8 MB of page buffers.
    Damage raises InputError when it is reached, as there."""
    pf = parquet_file(path, flag, stream=True)
    cols = list(columns) if columns else None
    for i in range(pf.num_row_groups):
        try:
            group = pf.read_row_group(i, columns=cols, use_threads=False)
        except _DAMAGE as e:
            raise InputError(path, f"damaged Parquet ({_short(e)})", flag) from e
        yield group


def read_text(path: str | os.PathLike, flag: str | None = None) -> str:
    """A whole UTF-8 text file; bytes that are not UTF-8 are an InputError naming the offset."""
    p = _check_file(path, flag)
    try:
        if is_remote(p):
            with _open_remote(p) as f:
                data = f.read()
        else:
            with open(p, "rb") as f:
                data = f.read()
    except FileNotFoundError:
        raise _missing(p, flag) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(p, f"not UTF-8 text (byte {e.start})", flag) from e


def read_json(
    path: str | os.PathLike, flag: str | None = None, expect: type | tuple[type, ...] = dict
) -> Any:
    """A JSON document whose top level is ``expect`` (an object by default)."""
    text = read_text(path, flag)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(path, f"not valid JSON ({e.msg}, line {e.lineno})", flag) from e
    if not isinstance(doc, expect):
        want = expect.__name__ if isinstance(expect, type) else "/".join(t.__name__ for t in expect)
        got = type(doc).__name__
        raise InputError(
            path,
            f"JSON of the wrong shape: {_json_name(got)} where {_json_name(want)} was expected",
            flag,
        )
    return doc


def _json_name(py: str) -> str:
    return {
        "dict": "an object",
        "list": "a list",
        "str": "a string",
        "int": "a number",
        "float": "a number",
        "NoneType": "null",
        "bool": "a boolean",
    }.get(py, py)


def load_npy(path: str | os.PathLike, flag: str | None = None, mmap: bool = True) -> np.ndarray:
    """A ``.npy`` array (memory-mapped locally); truncation or a foreign file is InputError."""
    p = _check_file(path, flag)
    try:
        if is_remote(p):
            import io

            with _open_remote(p) as f:
                return np.load(io.BytesIO(f.read()), allow_pickle=False)
        return np.load(p, mmap_mode="r" if mmap else None, allow_pickle=False)
    except FileNotFoundError:
        raise _missing(p, flag) from None
    except _DAMAGE as e:
        raise InputError(p, f"not a readable .npy array ({_short(e)})", flag) from e


def _short(e: BaseException) -> str:
    msg = " ".join(str(e).split())
    return (msg[:200] + "...") if len(msg) > 200 else (msg or type(e).__name__)
