"""Pair files as the ``filters`` commands see them: tables of ``src, trg`` and more columns.

The bytes (gzip, UTF-8, a truncated file, Parquet row groups) are read by the one pair reader,
:mod:`labse_common.pair_files`; here are the TSV layouts, the columns, and the writers.

API
---
``iter_pair_batches(path, counter=None, batch_rows=65536, layout="auto", flag=None) -> Iterator[pa.RecordBatch]``
    Stream the pairs of ``path`` as record batches with string columns ``src, trg`` first, then
    any other columns of the file. ``path`` (local, or ``s3://``/``gs://`` through Beam
    FileSystems) is one of

    - Parquet (mining output ``mined.parquet`` or any Parquet with ``src`` and ``trg`` columns);
      a local directory reads ``mined.parquet`` when present, else every ``*.parquet`` in it,
      sorted;
    - TSV, gzip-compressed or not (detected by magic bytes, not by name), no quoting:
        * ``layout="src-trg"``: ``src<TAB>trg[<TAB>more...]``, extra columns named ``col2, col3...``;
        * ``layout="scored"``: the miner's ``mined.tsv.gz``, ``margin<TAB>src<TAB>trg[<TAB>src_lang
          <TAB>trg_lang<TAB>src_id<TAB>trg_id<TAB>cosine...]`` (LASER's ``score<TAB>src<TAB>trg``);
        * ``layout="auto"`` (default): a first line whose fields include ``src`` and ``trg`` is a
          header naming the columns; otherwise ``scored`` when most sampled lines have >= 3
          fields, a number first and text second; otherwise ``src-trg``.

    The number of fields is decided by the majority of the first :data:`SAMPLE_LINES` data
    lines, not by the first line alone: one stray line cannot turn every other line into a
    malformed one. Bad lines do not stop the reading: a line with another number of fields is
    dropped as ``malformed`` (a warning names the count and the first line number), a line that
    is not UTF-8 as ``bad_utf8``, a blank line as ``blank``; a truncated ``.gz`` keeps
    everything readable, drops the cut last line as ``truncated`` and counts the event
    ``truncated_gzip``. These go to ``counter`` under the unit ``lines`` (in == out + dropped).
    A file where malformed lines outnumber the good ones is not a pair file of any one layout:
    :class:`~labse_common.errors.InputError` once the file is read. A UTF-8 BOM is stripped.
    Nulls in Parquet ``src``/``trg`` read as empty strings (the rules drop them, counted).

``read_pairs(path, counter=None, layout="auto", flag=None) -> pa.Table``
    The whole file as one table (same columns as above).

``write_pairs(table, out_dir, stem="pairs") -> (parquet_path, tsv_gz_path)``
    ``<stem>.parquet`` and ``<stem>.tsv.gz`` (no header; ``src, trg`` first, then the other
    columns), each written to a temporary name and renamed at the end.
``write_parquet(table, path)`` / ``write_tsv_gz(table, path, columns=None)``: one of the two.
``PairWriter(out_dir, stem)``: the same two files, streamed batch by batch (``write``/``close``).

Errors: :class:`PairFileError`, an :class:`~labse_common.errors.InputError` naming the file and
the flag (``flag``), for a missing file, a damaged Parquet file (anywhere in it: Parquet is read
through :mod:`labse_common.datafiles`; with ``survive_damage`` only a file without a readable
footer or row group, the per-pair commands' choice), a Parquet file without ``src``/``trg``, a file with no
readable pair, or one whose lines mostly do not fit its layout; the command foundation prints it
in one line with exit status 2.
"""

from __future__ import annotations

import gzip
import logging
import os
from collections import Counter
from collections.abc import Iterator
from itertools import chain, islice
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from labse_common.datafiles import check_text_column
from labse_common.errors import InputError
from labse_common.filesystems import is_remote
from labse_common.pair_files import is_parquet, parquet_batches, surviving_lines
from labse_common.stats import StageCounter

log = logging.getLogger(__name__)

LINES = "lines"  # the stats unit of the TSV reader
PAIRS = "pairs"  # the unit a damaged Parquet row group's rows are counted in, as the rules do
# The miner's TSV order (mining/output.py); kept here so filters does not import mining.
SCORED_COLUMNS = ("margin", "src", "trg", "src_lang", "trg_lang", "src_id", "trg_id", "cosine")
LAYOUTS = ("auto", "src-trg", "scored")
#: Data lines whose majority decides a TSV's number of fields (and, with auto, its layout).
SAMPLE_LINES = 1000
_FLOAT_COLUMNS = {"margin", "cosine", "cds_score", "score"}


class PairFileError(InputError):
    """A pair file that cannot be used at all (missing, damaged, wrong columns, nothing readable)."""


# --- reading -----------------------------------------------------------------------------------


def _is_float(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def _parquet_files(path: str, flag: str | None) -> list[str]:
    if not is_remote(path) and os.path.isdir(path):
        mined = os.path.join(path, "mined.parquet")
        files = [mined] if os.path.isfile(mined) else sorted(map(str, Path(path).glob("*.parquet")))
        if not files:
            raise PairFileError(path, "no Parquet pair file in this folder", flag)
        return files
    return [path]


def _is_parquet(path: str, flag: str | None) -> bool:
    if not is_remote(path) and os.path.isdir(path):
        return True
    try:
        return is_parquet(path)
    except FileNotFoundError:
        raise PairFileError(path, "not found", flag) from None


def _normalise_batch(batch: pa.RecordBatch | pa.Table, where: str, flag: str | None = None):
    names = batch.schema.names
    missing = [c for c in ("src", "trg") if c not in names]
    if missing:
        raise PairFileError(
            where, f"no {' and '.join(missing)} column (has: {', '.join(names)})", flag
        )
    cols, out_names = [], []
    for name in ["src", "trg"] + [n for n in names if n not in ("src", "trg")]:
        col = batch.column(names.index(name))
        if name in ("src", "trg"):
            col = utf8_column(col, name, where, flag)
        cols.append(col)
        out_names.append(name)
    if isinstance(batch, pa.Table):
        return pa.Table.from_arrays(cols, names=out_names).combine_chunks().to_batches()[0]
    return pa.RecordBatch.from_arrays(cols, names=out_names)


def utf8_column(col: pa.Array, name: str, where: str, flag: str | None) -> pa.Array:
    """``col`` as strings, nulls as ""; bytes that are not UTF-8 are an error naming the file
    (pyarrow does not check string columns when it reads them, and would fail later, nameless).
    A column that is not text (numbers) is refused by the rule encode applies too."""
    check_text_column(where, name, col.type, flag)
    try:
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            col.validate(full=True)
        return pc.fill_null(pc.cast(col, pa.string()), "")
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise PairFileError(where, f"column {name!r} is not UTF-8 text ({e})", flag) from None


def _iter_parquet(
    path: str, batch_rows: int, flag: str | None, counter: StageCounter | None = None
) -> Iterator[pa.RecordBatch]:
    """``counter`` given: a damaged row group is counted (its pairs dropped
    ``damaged_row_group``) and the file's other row groups are still read. Without it, damage
    anywhere (a corrupt page, a cut footer) is an InputError naming the file when the reading
    reaches it."""
    for f in _parquet_files(path, flag):
        for batch in parquet_batches(f, counter, PAIRS, None, flag, batch_rows):
            yield _normalise_batch(batch, f, flag)


def _text_rows(path: str, counter: StageCounter) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of each non-blank UTF-8 line; blank, bad and cut lines counted."""
    for lineno, text in surviving_lines(path, counter, LINES):
        yield lineno, text.split("\t")


class _Layout:
    def __init__(self, names: list[str], n_fields: int, header: bool) -> None:
        self.names, self.n_fields, self.header = names, n_fields, header


def _decide_layout(sample: list[list[str]], layout: str) -> _Layout | None:
    """The layout most of ``sample`` (the first data lines) has; None without a 2-field line."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown pair file layout {layout!r} ({', '.join(LAYOUTS)})")
    first = sample[0]
    if layout == "auto" and "src" in first and "trg" in first and len(set(first)) == len(first):
        return _Layout(first, len(first), header=True)
    sizes = Counter(len(f) for f in sample if len(f) >= 2)
    if not sizes:
        return None
    n = sizes.most_common(1)[0][0]  # ties: the size seen first
    if layout == "auto":
        rows = [f for f in sample if len(f) == n]
        scored = sum(_is_float(f[0]) and not _is_float(f[1]) for f in rows)
        layout = "scored" if n >= 3 and 2 * scored > len(rows) else "src-trg"
    if layout == "scored":
        names = list(SCORED_COLUMNS[:n]) + [f"col{i}" for i in range(len(SCORED_COLUMNS), n)]
    else:
        names = ["src", "trg"] + [f"col{i}" for i in range(2, n)]
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
    path: str, counter: StageCounter, batch_rows: int, layout: str, flag: str | None
) -> Iterator[pa.RecordBatch]:
    it = _text_rows(path, counter)
    lay: _Layout | None = None
    malformed, first_bad, good = 0, 0, 0
    while lay is None:
        sample = list(islice(it, SAMPLE_LINES))
        if not sample:
            break
        lay = _decide_layout([f for _, f in sample], layout)
        if lay is None:  # only one-field lines so far: none of them can be a pair
            counter.add_dropped(LINES, "malformed", len(sample))
            malformed += len(sample)
            first_bad = first_bad or sample[0][0]
            continue
        if lay.header:
            counter.add_dropped(LINES, "header")
            sample = sample[1:]
        it = chain(sample, it)
    if lay is None:
        return
    rows: list[list[str]] = []
    for lineno, fields in it:
        if len(fields) != lay.n_fields:
            counter.add_dropped(LINES, "malformed")
            malformed += 1
            first_bad = first_bad or lineno
            continue
        counter.add_out(LINES)
        good += 1
        rows.append(fields)
        if len(rows) >= batch_rows:
            yield _tsv_batch(rows, lay)
            rows = []
    if rows:
        yield _tsv_batch(rows, lay)
    if malformed:
        what = (
            f"{malformed} of {malformed + good} data lines do not have the {lay.n_fields} "
            f"tab-separated fields most lines have (first: line {first_bad})"
        )
        if malformed > good:
            raise PairFileError(
                path,
                f"{what}: not a pair file of one layout (pass --layout, or fix the file)",
                flag,
            )
        log.warning("%s: %s; dropped as malformed (counted in stats.json)", path, what)


def iter_pair_batches(
    path: str | os.PathLike,
    counter: StageCounter | None = None,
    batch_rows: int = 65536,
    layout: str = "auto",
    flag: str | None = None,
    survive_damage: bool = False,
) -> Iterator[pa.RecordBatch]:
    """Stream the pairs of ``path`` (see the module docstring); ``flag`` names the option that
    gave it in error messages. ``survive_damage``: a Parquet row group that fails to decode is
    counted in ``counter`` (pairs dropped ``damaged_row_group``) and the rest is still read."""
    p = str(path)
    if not is_remote(p) and not os.path.exists(p):
        raise PairFileError(p, "not found", flag)
    counter = counter if counter is not None else StageCounter()
    if _is_parquet(p, flag):
        yield from _iter_parquet(p, batch_rows, flag, counter if survive_damage else None)
    else:
        yield from _iter_tsv(p, counter, batch_rows, layout, flag)


def read_pairs(
    path: str | os.PathLike,
    counter: StageCounter | None = None,
    layout: str = "auto",
    flag: str | None = None,
) -> pa.Table:
    """All pairs of ``path`` as one table; a file with no readable pair is a PairFileError."""
    batches = list(iter_pair_batches(path, counter, layout=layout, flag=flag))
    if not batches or sum(b.num_rows for b in batches) == 0:
        raise no_pairs(path, flag)
    schemas = {b.schema for b in batches}
    if len(schemas) > 1:  # Parquet parts with different extra columns: keep the common ones
        common = [n for n in batches[0].schema.names if all(n in b.schema.names for b in batches)]
        batches = [b.select(common) for b in batches]
    return pa.Table.from_batches(batches).combine_chunks()


def no_pairs(path: str | os.PathLike, flag: str | None = None) -> PairFileError:
    return PairFileError(
        path, "no readable pair (expected Parquet with src/trg or TSV src<TAB>trg)", flag
    )


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
                [
                    batch.column(n) if n in batch.schema.names else pa.nulls(batch.num_rows, f.type)
                    for n, f in zip(self.schema.names, self.schema)
                ],
                schema=self.schema,
            )
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
