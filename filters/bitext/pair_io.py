"""Reading and writing pair files: THE reader/writer for every ``filters`` command.

API
---
``iter_pair_batches(path, counter=None, batch_rows=65536, layout="auto") -> Iterator[pa.RecordBatch]``
    Stream the pairs of ``path`` as record batches with string columns ``src, trg`` first, then
    any other columns of the file. ``path`` is one of

    - Parquet (mining output ``mined.parquet`` or any Parquet with ``src`` and ``trg`` columns);
      a directory reads ``mined.parquet`` when present, else every ``*.parquet`` in it, sorted;
    - TSV, gzip-compressed or not (detected by magic bytes, not by name), no quoting:
        * ``layout="src-trg"``: ``src<TAB>trg[<TAB>more...]``, extra columns named ``col2, col3...``;
        * ``layout="scored"``: the miner's ``mined.tsv.gz``, ``margin<TAB>src<TAB>trg[<TAB>src_lang
          <TAB>trg_lang<TAB>src_id<TAB>trg_id<TAB>cosine...]`` (LASER's ``score<TAB>src<TAB>trg``);
        * ``layout="auto"`` (default): a first line whose fields include ``src`` and ``trg`` is a
          header naming the columns; otherwise a first line with >= 3 fields whose first field
          is a number and second is not means ``scored``; otherwise ``src-trg``.

    Bad input never raises mid-file: a line with fewer than 2 fields, or with a different number
    of fields than the first data line, is dropped as ``malformed``, a line that is not UTF-8 as ``bad_utf8``, a blank
    line as ``blank``; a truncated ``.gz`` keeps everything readable, drops the cut last line
    as ``truncated`` and counts the event ``truncated_gzip``. These go to ``counter`` under
    the unit ``lines`` (in == out + dropped). A UTF-8 BOM is stripped. Nulls in Parquet
    ``src``/``trg`` read as empty strings (the rules drop them, counted).

``read_pairs(path, counter=None, layout="auto") -> pa.Table``
    The whole file as one table (same columns as above).

``write_pairs(table, out_dir, stem="pairs") -> (parquet_path, tsv_gz_path)``
    ``<stem>.parquet`` and ``<stem>.tsv.gz`` (no header; ``src, trg`` first, then the other
    columns), each written to a temporary name and renamed at the end.
``write_parquet(table, path)`` / ``write_tsv_gz(table, path, columns=None)``: one of the two.
``PairWriter(out_dir, stem)``: the same two files, streamed batch by batch (``write``/``close``).

Errors: :class:`PairFileError` (a ValueError) for a missing file, a Parquet file without
``src``/``trg``, or a file with no readable pair; CLIs print it and exit 2.
"""

from __future__ import annotations

import gzip
import logging
import os
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from labse_common.stats import StageCounter

log = logging.getLogger(__name__)

LINES = "lines"  # the stats unit of the TSV reader
# The miner's TSV order (mining/output.py); kept here so filters does not import mining.
SCORED_COLUMNS = ("margin", "src", "trg", "src_lang", "trg_lang", "src_id", "trg_id", "cosine")
_FLOAT_COLUMNS = {"margin", "cosine", "cds_score", "score"}
_GZIP_MAGIC = b"\x1f\x8b"
_BOM = "\ufeff"
Opener = Callable[[str, str], BinaryIO]


class PairFileError(ValueError):
    """A pair file that cannot be used at all (missing, wrong columns, nothing readable)."""


# --- reading -----------------------------------------------------------------------------------


def _is_float(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def _parquet_files(path: Path) -> list[Path]:
    if path.is_dir():
        mined = path / "mined.parquet"
        files = [mined] if mined.is_file() else sorted(path.glob("*.parquet"))
        if not files:
            raise PairFileError(f"no Parquet pair file in directory {path}")
        return files
    return [path]


def _is_parquet(path: Path, open_fn: Opener) -> bool:
    if open_fn is open and path.is_dir():
        return True
    with open_fn(str(path), "rb") as f:
        return f.read(4) == b"PAR1"


def _normalise_batch(batch: pa.RecordBatch | pa.Table, where: str) -> pa.RecordBatch:
    names = batch.schema.names
    missing = [c for c in ("src", "trg") if c not in names]
    if missing:
        raise PairFileError(f"{where}: no {' and '.join(missing)} column (has: {', '.join(names)})")
    cols, out_names = [], []
    for name in ["src", "trg"] + [n for n in names if n not in ("src", "trg")]:
        col = batch.column(names.index(name))
        if name in ("src", "trg"):
            col = pc.fill_null(pc.cast(col, pa.string()), "")
        cols.append(col)
        out_names.append(name)
    if isinstance(batch, pa.Table):
        return pa.Table.from_arrays(cols, names=out_names).combine_chunks().to_batches()[0]
    return pa.RecordBatch.from_arrays(cols, names=out_names)


def _iter_parquet(path: Path, batch_rows: int, open_fn: Opener) -> Iterator[pa.RecordBatch]:
    for f in _parquet_files(path) if open_fn is open else [path]:
        try:
            pf = pq.ParquetFile(open_fn(str(f), "rb") if open_fn is not open else f)
        except (pa.ArrowInvalid, OSError) as e:
            raise PairFileError(f"{f}: not a readable Parquet file: {e}") from None
        for batch in pf.iter_batches(batch_size=batch_rows):
            yield _normalise_batch(batch, str(f))


def _raw_lines(path: Path, counter: StageCounter, open_fn: Opener) -> Iterator[tuple[bytes, bool]]:
    """Lines as bytes with ``complete`` (ends in a newline); a truncated gzip ends the stream."""
    with open_fn(str(path), "rb") as probe:
        gz = probe.read(2) == _GZIP_MAGIC
    with open_fn(str(path), "rb") as raw, gzip.GzipFile(fileobj=raw) if gz else raw as f:
        try:
            for line in f:
                yield line, line.endswith(b"\n")
        except (EOFError, zlib.error, gzip.BadGzipFile) as e:
            # Everything decompressed so far has been yielded; the cut tail is lost (counted).
            log.warning("%s: truncated or corrupt gzip (%s); keeping the readable part", path, e)
            counter.add_event(LINES, "truncated_gzip")
            yield b"", False  # marks the previous line as possibly cut


class _Layout:
    def __init__(self, names: list[str], n_fields: int, header: bool) -> None:
        self.names, self.n_fields, self.header = names, n_fields, header


def _detect_layout(fields: list[str], layout: str) -> _Layout:
    n = len(fields)
    if layout == "auto" and "src" in fields and "trg" in fields and len(set(fields)) == n:
        return _Layout(fields, n, header=True)
    if layout == "auto":
        layout = (
            "scored" if n >= 3 and _is_float(fields[0]) and not _is_float(fields[1]) else "src-trg"
        )
    if layout == "scored":
        names = list(SCORED_COLUMNS[:n]) + [f"col{i}" for i in range(len(SCORED_COLUMNS), n)]
    elif layout == "src-trg":
        names = ["src", "trg"] + [f"col{i}" for i in range(2, n)]
    else:
        raise ValueError(f"unknown pair file layout {layout!r} (auto, src-trg, scored)")
    return _Layout(names, n, header=False)


def _tsv_batch(rows: list[list[str]], lay: _Layout) -> pa.RecordBatch:
    cols = list(zip(*rows)) if rows else [() for _ in lay.names]
    arrays = {}
    for name, values in zip(lay.names, cols):
        if name in _FLOAT_COLUMNS:
            arrays[name] = pa.array([_to_float(v) for v in values], pa.float32())
        else:
            arrays[name] = pa.array(values, pa.string())
    return _normalise_batch(pa.RecordBatch.from_pydict(arrays), "tsv")


def _to_float(v: str) -> float | None:
    try:
        return float(v)
    except ValueError:
        return None


def _iter_tsv(
    path: Path, counter: StageCounter, batch_rows: int, layout: str, open_fn: Opener
) -> Iterator[pa.RecordBatch]:
    lay: _Layout | None = None
    rows: list[list[str]] = []
    pending: list[str] | None = None  # the last parsed row, held until we know it is complete
    pending_complete = True
    first = True

    def accept(fields: list[str]) -> None:
        nonlocal lay
        if lay is None:
            if len(fields) < 2:  # a one-field line cannot set the file's column count
                counter.add_dropped(LINES, "malformed")
                return
            lay = _detect_layout(fields, layout)
            if lay.header:
                counter.add_dropped(LINES, "header")
                return
        if len(fields) != lay.n_fields:
            counter.add_dropped(LINES, "malformed")
            return
        counter.add_out(LINES)
        rows.append(fields)

    for raw, complete in _raw_lines(path, counter, open_fn):
        if not raw and not complete:  # truncated gzip: the held line may be cut
            if pending is not None and not pending_complete:
                counter.add_dropped(LINES, "truncated")
                pending = None
            break
        if pending is not None:
            accept(pending)
            pending = None
            if len(rows) >= batch_rows and lay is not None:
                yield _tsv_batch(rows, lay)
                rows = []
        counter.add_in(LINES)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            counter.add_dropped(LINES, "bad_utf8")
            continue
        if first:
            text = text.removeprefix(_BOM)
            first = False
        text = text.rstrip("\r\n")
        if not text.strip():
            counter.add_dropped(LINES, "blank")
            continue
        pending, pending_complete = text.split("\t"), complete
    if pending is not None:
        accept(pending)
    if rows and lay is not None:
        yield _tsv_batch(rows, lay)


def iter_pair_batches(
    path: str | os.PathLike,
    counter: StageCounter | None = None,
    batch_rows: int = 65536,
    layout: str = "auto",
    open_fn: Opener = open,
) -> Iterator[pa.RecordBatch]:
    """Stream the pairs of ``path`` (see the module docstring). ``open_fn(path, "rb")`` opens a
    file (Beam passes ``FileSystems.open``-based openers for remote files; directories are then
    not expanded)."""
    p = Path(path) if open_fn is open else path
    if open_fn is open and not p.exists():
        raise PairFileError(f"pair file not found: {p}")
    counter = counter if counter is not None else StageCounter()
    if _is_parquet(p, open_fn):
        yield from _iter_parquet(p, batch_rows, open_fn)
    else:
        yield from _iter_tsv(p, counter, batch_rows, layout, open_fn)


def read_pairs(
    path: str | os.PathLike, counter: StageCounter | None = None, layout: str = "auto"
) -> pa.Table:
    """All pairs of ``path`` as one table; a file with no readable pair is a PairFileError."""
    batches = list(iter_pair_batches(path, counter, layout=layout))
    if not batches or sum(b.num_rows for b in batches) == 0:
        raise PairFileError(
            f"{path}: no readable pair (expected Parquet with src/trg or TSV src<TAB>trg)"
        )
    schemas = {b.schema for b in batches}
    if len(schemas) > 1:  # Parquet parts with different extra columns: keep the common ones
        common = [n for n in batches[0].schema.names if all(n in b.schema.names for b in batches)]
        batches = [b.select(common) for b in batches]
    return pa.Table.from_batches(batches).combine_chunks()


# --- writing -----------------------------------------------------------------------------------


def _clean_field(value: object) -> str:
    # A tab or newline inside a sentence would shift every later column.
    if value is None:
        return ""
    return str(value).replace("\t", " ").replace("\r", " ").replace("\n", " ")


def write_parquet(table: pa.Table, path: str | os.PathLike) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)
    return path


def write_tsv_gz(
    table: pa.Table, path: str | os.PathLike, columns: list[str] | None = None
) -> Path:
    """No header; ``src, trg`` first (readable back with ``layout="src-trg"``/auto)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    names = table.column_names
    cols = columns or (
        [c for c in ("src", "trg") if c in names] + [c for c in names if c not in ("src", "trg")]
    )
    tmp = path.with_name(path.name + ".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8", newline="\n") as f:
        for batch in table.select(cols).to_batches(65536):
            data = [batch.column(i).to_pylist() for i in range(batch.num_columns)]
            f.writelines("\t".join(_clean_field(v) for v in row) + "\n" for row in zip(*data))
    os.replace(tmp, path)
    return path


def write_pairs(
    table: pa.Table, out_dir: str | os.PathLike, stem: str = "pairs"
) -> tuple[Path, Path]:
    """``<out_dir>/<stem>.parquet`` and ``<out_dir>/<stem>.tsv.gz``."""
    out = Path(out_dir)
    return write_parquet(table, out / f"{stem}.parquet"), write_tsv_gz(
        table, out / f"{stem}.tsv.gz"
    )


class PairWriter:
    """Streaming ``<stem>.parquet`` + ``<stem>.tsv.gz`` for batches of one schema.

    Writes go to temporary names; :meth:`close` renames them into place (an interrupted run
    leaves no half file under the final names). An empty output still gets both files.
    """

    def __init__(
        self, out_dir: str | os.PathLike, stem: str, schema: pa.Schema | None = None
    ) -> None:
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.pq_path, self.tsv_path = self.dir / f"{stem}.parquet", self.dir / f"{stem}.tsv.gz"
        self._pq_tmp = self.pq_path.with_name(self.pq_path.name + ".tmp")
        self._tsv_tmp = self.tsv_path.with_name(self.tsv_path.name + ".tmp")
        self.schema = schema
        self._pq: pq.ParquetWriter | None = None
        self._tsv = gzip.open(self._tsv_tmp, "wt", encoding="utf-8", newline="\n")
        self.rows = 0

    def write(self, batch: pa.RecordBatch) -> None:
        if self.schema is None:
            self.schema = batch.schema
        if batch.schema != self.schema:
            batch = pa.RecordBatch.from_arrays(
                [batch.column(n) if n in batch.schema.names else pa.nulls(batch.num_rows, f.type)
                 for n, f in zip(self.schema.names, self.schema)], schema=self.schema)  # fmt: skip
        if self._pq is None:
            self._pq = pq.ParquetWriter(self._pq_tmp, self.schema)
        self._pq.write_batch(batch)
        data = [batch.column(i).to_pylist() for i in range(batch.num_columns)]
        self._tsv.writelines("\t".join(_clean_field(v) for v in row) + "\n" for row in zip(*data))
        self.rows += batch.num_rows

    def close(self) -> tuple[Path, Path]:
        self._tsv.close()
        if self._pq is None:
            schema = self.schema or pa.schema([("src", pa.string()), ("trg", pa.string())])
            pq.write_table(schema.empty_table(), self._pq_tmp)
        else:
            self._pq.close()
        os.replace(self._pq_tmp, self.pq_path)
        os.replace(self._tsv_tmp, self.tsv_path)
        return self.pq_path, self.tsv_path

    def discard(self) -> None:
        """Drop what was written (a failed run leaves nothing behind)."""
        self._tsv.close()
        if self._pq is not None:
            self._pq.close()
        for tmp in (self._pq_tmp, self._tsv_tmp):
            tmp.unlink(missing_ok=True)
