"""The one reader of pair files: TSV, Parquet and Moses, local or remote, damage counted.

Every module that reads pairs (the runner's sources, the ``filters`` commands, training) reads
their bytes here, and so do the training's sentence files (the same TSV/text/Parquet shards). The
callers keep what is theirs: which columns a TSV has (``filters.bitext.pair_io``'s layouts), how
a record is validated and counted (``labse_model.stream``), which files a glob names
(:mod:`labse_common.sources`). Parquet's decoding and damage live one step below, in
:mod:`labse_common.datafiles`.

Paths are local or any URL Beam's FileSystems serves (``s3://``, ``gs://``), through
:mod:`labse_common.filesystems` (imported lazily: Beam is slow to import).

Three ways to meet damage, one per promise the callers make (and their stats keys):

* :func:`read_pairs_file` (sources, the runner's own-data stages): strict. Bytes that are not
  UTF-8, a damaged gzip, Moses files of different lengths: an InputError naming the file (and the
  line); the rest is counted (``blank``, ``malformed``, ``header``, ``empty_side``,
  ``damaged_row_group``).
* :func:`surviving_lines` (filters): a bad line is counted (``bad_utf8``, ``blank``), a truncated
  gzip keeps everything readable, drops the cut last line (``truncated``) and counts the event
  ``truncated_gzip``.
* :func:`text_lines` (training): bad bytes are replaced (one character, not the file), with byte
  offsets to come back to a block; a truncated gzip raises one of :data:`GZIP_DAMAGE` after its
  last complete line, which the scan counts.
"""

from __future__ import annotations

import gzip
import logging
import os
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from itertools import zip_longest
from typing import BinaryIO

import pyarrow as pa

from labse_common import datafiles
from labse_common.errors import InputError
from labse_common.filesystems import is_remote
from labse_common.stats import StageCounter
from labse_common.textio import sniff_bom, wrap_text

log = logging.getLogger(__name__)

FORMATS = ("tsv", "parquet", "moses")
PAIR_COLUMNS = ["src", "trg"]
#: What a cut or corrupt gzip raises once its readable part is read.
GZIP_DAMAGE = (EOFError, zlib.error, gzip.BadGzipFile)
_GZIP_MAGIC = b"\x1f\x8b"
_BOM = "\ufeff"
_READ_CHUNK = 1 << 20


@dataclass(frozen=True)
class PairFile:
    """One source of pairs: ``paths`` is one file, or for Moses ``(src_path, trg_path)``;
    ``pattern`` is the user's pattern that found it (for messages)."""

    src_lang: str
    trg_lang: str
    fmt: str  # "tsv" | "parquet" | "moses"
    paths: tuple[str, ...]
    pattern: str


# --- bytes -------------------------------------------------------------------------------------


def open_binary(path: str) -> BinaryIO:
    """A seekable binary file for ``path`` (no decompression); FileNotFoundError as open's."""
    if not is_remote(path):
        return open(path, "rb")  # noqa: SIM115 - the caller closes it
    from labse_common import filesystems

    return filesystems.open_read(path)


def path_exists(path: str) -> bool:
    if not is_remote(path):
        return os.path.exists(path)
    from labse_common import filesystems

    return filesystems.exists(path)


def _head(path: str, n: int) -> bytes:
    with open_binary(path) as f:
        return f.read(n)


def is_parquet(path: str) -> bool:
    """Whether the file starts as Parquet does (``PAR1``), whatever its name."""
    return _head(path, 4) == b"PAR1"


def gzip_by_name(path: str) -> bool:
    return path.lower().endswith(".gz")


# --- lines -------------------------------------------------------------------------------------


def raw_lines(path: str, start: int = 0, gz: bool | None = None) -> Iterator[tuple[bytes, int]]:
    """(line with its end, byte offset of the next line) from ``start``; offsets are -1 in a
    gzip (``gz``: by the name when None). A damaged gzip raises one of :data:`GZIP_DAMAGE`
    after its last readable line."""
    gz = gzip_by_name(path) if gz is None else gz
    with open_binary(path) as raw:
        if gz:
            for b in gzip.GzipFile(fileobj=raw):
                yield b, -1
            return
        raw.seek(start)
        pos = start
        for b in raw:
            pos += len(b)
            yield b, pos


def text_lines(path: str, start_offset: int = 0) -> Iterator[tuple[str, int]]:
    """(line, byte offset of the next line) as training reads them: bytes that are not UTF-8
    replaced, a truncated ``.gz`` raising after its last complete line (:func:`raw_lines`)."""
    for b, pos in raw_lines(path, start_offset):
        # errors="replace": a stray invalid byte costs one character, not the file.
        yield b.decode("utf-8", errors="replace"), pos


def surviving_lines(path: str, counter: StageCounter, unit: str) -> Iterator[tuple[int, str]]:
    """(line number, text without its end) of each non-blank UTF-8 line, gzip found by its magic
    bytes, a UTF-8 BOM stripped. Every line is counted in ``counter`` under ``unit``: those not
    given are dropped ``bad_utf8`` or ``blank``; a truncated gzip keeps its readable part, drops
    the cut last line ``truncated`` and counts the event ``truncated_gzip``. The caller counts
    what it keeps or drops of the lines given."""
    pending: tuple[int, str, bool] | None = None  # held until we know it is complete
    lineno = 0
    for raw, complete in _lines_to_cut(path, counter, unit):
        if not raw and not complete:  # truncated gzip: the held line may be cut
            if pending is not None and not pending[2]:
                counter.add_dropped(unit, "truncated")
                pending = None
            break
        if pending is not None:
            yield pending[0], pending[1]
            pending = None
        lineno += 1
        counter.add_in(unit)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            counter.add_dropped(unit, "bad_utf8")
            continue
        if lineno == 1:
            text = text.removeprefix(_BOM)
        text = text.rstrip("\r\n")
        if not text.strip():
            counter.add_dropped(unit, "blank")
            continue
        pending = (lineno, text, complete)
    if pending is not None:
        yield pending[0], pending[1]


def _lines_to_cut(path: str, counter: StageCounter, unit: str) -> Iterator[tuple[bytes, bool]]:
    """Lines with ``complete`` (ends in a newline); a damaged gzip ends them with ``b"", False``."""
    try:
        for line, _ in raw_lines(path, gz=_head(path, 2) == _GZIP_MAGIC):
            yield line, line.endswith(b"\n")
    except GZIP_DAMAGE as e:
        # Everything decompressed so far has been yielded; the cut tail is lost (counted).
        log.warning("%s: truncated or corrupt gzip (%s); keeping the readable part", path, e)
        counter.add_event(unit, "truncated_gzip")
        yield b"", False  # marks the previous line as possibly cut


def _strict_raw(path: str, flag: str | None, use: Callable[[BinaryIO], Iterator]) -> Iterator:
    """``use`` applied to the file's bytes (gunzipped for ``.gz``); damage is an InputError."""
    with ExitStack() as stack:
        try:
            raw = stack.enter_context(open_binary(path))
        except FileNotFoundError:
            raise InputError(path, "not found", flag) from None
        except IsADirectoryError:
            raise InputError(path, "is a folder, expected a file", flag) from None
        if gzip_by_name(path):
            raw = stack.enter_context(gzip.GzipFile(fileobj=raw))
        try:
            yield from use(raw)
        except GZIP_DAMAGE as e:
            raise InputError(path, f"damaged gzip ({e})", flag) from None


def strict_lines(path: str, flag: str | None = None) -> Iterator[tuple[int, str]]:
    """(line number, line without its end) of a text file, lines ending at ``\\n`` as in
    :func:`labse_common.textio.wrap_text`; bytes that are not UTF-8 (or not the UTF-16/32 its
    BOM names): an InputError naming the line."""

    def lines(raw: BinaryIO) -> Iterator[tuple[int, str]]:
        enc, n = sniff_bom(raw.read(4))
        if enc in (None, "utf-8"):  # line by line, so that an error names its line
            raw.seek(n)
            for lineno, data in enumerate(raw, 1):
                try:
                    text = data.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise InputError(
                        path,
                        f"not UTF-8 text (line {lineno}, byte {e.start + 1} "
                        f"of the line: {e.reason})",
                        flag,
                    ) from None
                yield lineno, text.rstrip("\n").rstrip("\r")
            return
        raw.seek(0)
        lineno = 0
        try:
            for lineno, line in enumerate(wrap_text(raw, errors="strict"), 1):  # noqa: B007
                yield lineno, line.rstrip("\n").rstrip("\r")
        except UnicodeDecodeError as e:
            raise InputError(
                path,
                f"not {enc} text as its byte-order mark says (after line {lineno}: {e.reason})",
                flag,
            ) from None

    return _strict_raw(path, flag, lines)


def count_lines(path: str, flag: str | None = None) -> int:
    """The number of lines :func:`strict_lines` gives, counted on the bytes for UTF-8."""

    def count(raw: BinaryIO) -> Iterator[int]:
        enc, _ = sniff_bom(raw.read(4))
        raw.seek(0)
        if enc not in (None, "utf-8"):
            yield sum(1 for _ in strict_lines(path, flag))
            return
        n, last = 0, b"\n"
        while chunk := raw.read(_READ_CHUNK):
            n += chunk.count(b"\n")
            last = chunk
        yield n + (not last.endswith(b"\n"))

    (n,) = _strict_raw(path, flag, count)
    return n


# --- Parquet -----------------------------------------------------------------------------------

Columns = Callable[[Sequence[str]], list[str]]


def rows_of(batch: pa.RecordBatch | pa.Table) -> Iterator:
    """A batch's rows as Python: ``(a, b)`` tuples for two columns (pairs), values for one."""
    if batch.num_columns == 2:
        yield from zip(batch.column(0).to_pylist(), batch.column(1).to_pylist())
    else:
        yield from batch.column(0).to_pylist()


def parquet_groups(path: str, columns: Columns) -> Iterator[tuple[int, pa.Table | object]]:
    """(row group, its ``columns(schema names)`` as a table, or a :class:`datafiles.LostRows`
    for a group that fails to decode: the file's other groups are still read)."""
    import pyarrow.parquet as pq

    with open_binary(path) as fh:
        pf = pq.ParquetFile(fh)
        cols = columns(pf.schema_arrow.names)
        for rg in range(pf.num_row_groups):
            yield rg, datafiles.read_row_group_surviving(pf, rg, cols)


def parquet_rows(path: str, rg: int, columns: Columns, start: int = 0, rows: int = 4096):
    """Row group ``rg``'s rows from row ``start`` (:func:`rows_of`), decoded ``rows`` at a time.

    Not ``read_row_group``: that decodes the whole group (a corpus file's 100k-200k rows) for
    every block read from it, so the decode buffers followed the writer's row-group size, and
    the rows after the block were decoded for nothing (bench/HISTORY.md "Where pretraining's memory
    goes")."""
    import pyarrow.parquet as pq

    with open_binary(path) as fh:
        pf = pq.ParquetFile(fh, pre_buffer=False, buffer_size=datafiles.STREAM_BUFFER)
        cols = columns(pf.schema_arrow.names)
        skip = start
        for batch in pf.iter_batches(
            batch_size=rows, row_groups=[rg], columns=cols, use_threads=False
        ):
            if skip >= batch.num_rows:
                skip -= batch.num_rows
                continue
            yield from rows_of(batch.slice(skip))
            skip = 0


def parquet_batches(
    path: str,
    counter: StageCounter | None,
    unit: str,
    columns: list[str] | None = None,
    flag: str | None = None,
    batch_rows: int = 65536,
) -> Iterator[pa.RecordBatch]:
    """The file's batches. ``counter`` given: a damaged row group is counted (its rows dropped
    ``damaged_row_group`` under ``unit``) and the other groups are read; without it, damage
    anywhere is an InputError naming the file when the reading reaches it."""
    if counter is None:
        yield from datafiles.iter_parquet_batches(path, columns, flag, batch_rows)
    else:
        yield from datafiles.iter_parquet_counted(path, counter, unit, columns, flag, batch_rows)


# --- pairs, strictly (the runner's sources) ------------------------------------------------------


def read_pairs_file(
    pf: PairFile, counter: StageCounter, unit: str = "pairs", *, flag: str | None = None
) -> Iterator[tuple[str, str]]:
    """The ``(src, trg)`` pairs of ``pf``, whitespace stripped, in file order. Every record is
    counted in ``counter`` under ``unit`` (in == out + dropped): a pair with an empty side is
    dropped ``empty_side``; a TSV line without a tab ``malformed``, a blank one ``blank``, a first
    line ``src<TAB>trg`` ``header``; a damaged Parquet row group ``damaged_row_group`` (the other
    groups are read). InputError naming the file: not found, not UTF-8 (after a BOM, which picks
    the encoding and is removed), damaged gzip, a Parquet file that cannot be opened or lacks
    ``src``/``trg``, Moses files of different lengths (checked before the first pair)."""
    if pf.fmt == "tsv":
        return _read_tsv(pf.paths[0], counter, unit, flag)
    if pf.fmt == "parquet":
        return _read_parquet(pf.paths[0], counter, unit, flag)
    if pf.fmt == "moses":
        return _read_moses(pf.paths, counter, unit, flag)
    raise ValueError(f"unknown pair file format {pf.fmt!r} (known: {', '.join(FORMATS)})")


def _emit(src: str, trg: str, counter: StageCounter, unit: str) -> tuple[str, str] | None:
    src, trg = src.strip(), trg.strip()
    if not src or not trg:
        counter.add_dropped(unit, "empty_side")
        return None
    counter.add_out(unit)
    return src, trg


def _read_tsv(path: str, counter: StageCounter, unit: str, flag) -> Iterator[tuple[str, str]]:
    for lineno, line in strict_lines(path, flag):
        counter.add_in(unit)
        fields = line.split("\t")
        if len(fields) < 2:
            counter.add_dropped(unit, "blank" if not line.strip() else "malformed")
            continue
        if lineno == 1 and [f.strip() for f in fields[:2]] == PAIR_COLUMNS:
            counter.add_dropped(unit, "header")
            continue
        pair = _emit(fields[0], fields[1], counter, unit)
        if pair is not None:
            yield pair


def _read_moses(
    paths: tuple[str, ...], counter: StageCounter, unit: str, flag
) -> Iterator[tuple[str, str]]:
    src_path, trg_path = paths
    n_src, n_trg = count_lines(src_path, flag), count_lines(trg_path, flag)
    if n_src != n_trg:
        raise InputError(
            src_path,
            f"Moses files of different lengths: {n_src} lines here, "
            f"{n_trg} lines in {trg_path}: line i of one must translate line i of "
            "the other",
            flag,
        )
    done = object()
    for a, b in zip_longest(
        strict_lines(src_path, flag), strict_lines(trg_path, flag), fillvalue=done
    ):
        if a is done or b is done:  # changed since it was counted
            raise InputError(src_path, f"Moses file and {trg_path} changed length while read", flag)
        counter.add_in(unit)
        pair = _emit(a[1], b[1], counter, unit)
        if pair is not None:
            yield pair


def _read_parquet(path: str, counter: StageCounter, unit: str, flag) -> Iterator[tuple[str, str]]:
    schema = datafiles.parquet_file(path, flag).schema_arrow
    lacking = [c for c in PAIR_COLUMNS if c not in schema.names]
    if lacking:
        raise InputError(
            path,
            f"has no column {' or '.join(map(repr, lacking))} (columns: {', '.join(schema.names)})",
            flag,
        )
    for c in PAIR_COLUMNS:
        t = schema.field(c).type
        if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t)):
            raise InputError(path, f"column {c!r} is {t}, not text", flag)
    for batch in parquet_batches(path, counter, unit, PAIR_COLUMNS, flag):
        cols = []
        for c in PAIR_COLUMNS:
            col = batch.column(batch.schema.get_field_index(c))
            try:
                col.validate(full=True)
            except pa.ArrowInvalid as e:
                raise InputError(path, f"column {c!r} is not UTF-8 text ({e})", flag) from None
            cols.append(col.to_pylist())
        for s, t in zip(*cols):
            counter.add_in(unit)
            pair = _emit(s or "", t or "", counter, unit)
            if pair is not None:
                yield pair
