"""The inputs of the one embedding path (:mod:`labse_model.embed_store`): which files an input
names, that they can be embedded, and their rows read in chunks.

* :func:`expand_inputs`: a text file (one sentence per line, ``.gz`` ok, a BOM honoured, invalid
  UTF-8 bytes replaced), a Parquet file with a ``text`` column, a folder of Parquet files
  (recursively, sorted; names starting with ``_`` or ``.`` skipped), an embedding store folder
  (its shard Parquets, in order), or a glob; local or ``s3://``/``gs://``.
* :func:`check_inputs`: every file opens and has its text column, before anything is claimed.
* :func:`read_chunks`: each file in chunks of :data:`CHUNK_ROWS` rows (boundaries restart at each
  file), with the metadata columns of :data:`META_COLUMNS`; a damaged Parquet row group keeps its
  rows' places (:data:`DAMAGED`).
"""

from __future__ import annotations

import glob
import logging
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa

from labse_common import datafiles, filesystems
from labse_common import embedding_store as es
from labse_common.errors import InputError
from labse_common.filesystems import is_remote, join

log = logging.getLogger(__name__)

CHUNK_ROWS = 8192  # rows embedded together: enough for length-sorted batches to pad little

#: Parquet columns carried into the store's row table (``id`` as text), when an input has them.
META_COLUMNS = ("id", "url_or_title", "source", "doc_id")

_GLOB = ("*", "?", "[")

# Chunk = (first row within its file, texts as read (None for a null), metadata columns).
Chunk = tuple[int, list, dict[str, list]]

#: Metadata of a Parquet chunk: True for each row of a row group that could not be decoded.
#: Such a row keeps its place with an empty text and a zero vector (row i of the store stays row
#: i of the input), counted as ``damaged_row_group``; it is not a store column.
DAMAGED = "_damaged"


def _hidden(rel: str) -> bool:
    return any(part.startswith(("_", ".")) for part in rel.replace("\\", "/").split("/"))


def _store_parquets(path: str, flag: str | None) -> list[str]:
    store = es.EmbeddingStore(path, flag)
    return [store.shard_path(i, "parquet") for i in range(len(store.shards))]


def _expand_local(spec: str, flag: str | None) -> list[str]:
    if os.path.isdir(spec):
        if os.path.isfile(os.path.join(spec, es.MANIFEST)):
            return _store_parquets(spec, flag)
        found = glob.glob(os.path.join(glob.escape(spec), "**", "*.parquet"), recursive=True)
        files = sorted(p for p in found if not _hidden(os.path.relpath(p, spec)))
        if not files:
            raise InputError(spec, "folder holds no Parquet files (*.parquet)", flag)
        return files
    if any(c in spec for c in _GLOB):
        out: list[str] = []
        for p in sorted(glob.glob(spec, recursive=True)):
            out += _expand_local(p, flag) if os.path.isdir(p) else [p]
        if not out:
            raise InputError(spec, "matches no file", flag)
        return out
    if not os.path.exists(spec):
        raise InputError(spec, "not found", flag)
    return [spec]


def _expand_remote(spec: str, flag: str | None) -> list[str]:
    fs = filesystems
    if any(c in spec for c in _GLOB):
        found = sorted(fs.match(spec))
    elif fs.exists(join(spec, es.MANIFEST)):
        return _store_parquets(spec, flag)
    elif fs.exists(spec):
        return [spec]
    else:  # a "folder": every Parquet object under the prefix
        prefix = spec.rstrip("/")
        found = sorted(
            p
            for p in fs.match(prefix + "/**")
            if p.endswith(".parquet") and not _hidden(p[len(prefix) + 1 :])
        )
    if not found:
        raise InputError(spec, "matches no file", flag)
    return found


def expand_inputs(
    specs: str | os.PathLike | Sequence[str], flag: str | None = "--input"
) -> list[str]:
    """The input files, in row order: each spec expanded (sorted), duplicates dropped."""
    if isinstance(specs, (str, os.PathLike)):
        specs = [os.fspath(specs)]
    out: list[str] = []
    seen: set[str] = set()
    for spec in map(os.fspath, specs):
        for p in _expand_remote(spec, flag) if is_remote(spec) else _expand_local(spec, flag):
            if p not in seen:
                seen.add(p)
                out.append(p)
    return out


def is_parquet(path: str) -> bool:
    return path.endswith(".parquet")


def _text_type(t: pa.DataType) -> bool:
    # The rule every reader of text columns shares (filters' pair reader too).
    return datafiles.is_text_type(t)


def _schema(path: str, text_column: str, flag: str | None) -> tuple[list[str], int]:
    pf = datafiles.parquet_file(path, flag)
    schema = pf.schema_arrow
    if text_column not in schema.names:
        raise InputError(
            path,
            f"has no column {text_column!r} (columns: {', '.join(schema.names) or 'none'})",
            flag,
        )
    t = schema.field(text_column).type
    if not _text_type(t):
        raise InputError(path, f"column {text_column!r} holds {t}, not text", flag)
    return schema.names, pf.metadata.num_rows


def check_inputs(
    files: Sequence[str], text_column: str = "text", flag: str | None = "--input"
) -> list[str]:
    """Check every input before anything is embedded; return the metadata columns to carry.

    Parquet files must have a text column (only their footers are read, in parallel); an input
    with no row at all is an InputError (an empty store is no result)."""
    parquet = [p for p in files if is_parquet(p)]
    with ThreadPoolExecutor(max_workers=min(16, max(1, len(parquet)))) as pool:
        schemas = list(pool.map(lambda p: _schema(p, text_column, flag), parquet))
    names = {n for cols, _ in schemas for n in cols}
    rows = sum(n for _, n in schemas)
    if not rows and not any(_text_size(p) for p in files if not is_parquet(p)):
        where = files[0] if len(files) == 1 else f"{files[0]} (and {len(files) - 1} more)"
        raise InputError(where, "no sentences to embed (empty input)", flag)
    return [c for c in META_COLUMNS if c in names and c != text_column]


def _text_size(path: str) -> int:
    if is_remote(path):
        from apache_beam.io.filesystems import FileSystems

        return FileSystems.match([path])[0].metadata_list[0].size_in_bytes
    return os.path.getsize(path)


def _open_text(path: str):
    from labse_common.textio import open_text, wrap_text

    if not is_remote(path):
        return open_text(path)  # .gz decompressed, BOM honoured, bad bytes replaced
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    return wrap_text(FileSystems.open(path, compression_type=CompressionTypes.AUTO))


def read_chunks(
    path: str,
    columns: Sequence[str] = (),
    text_column: str = "text",
    chunk_rows: int | None = None,
    flag: str | None = "--input",
) -> Iterator[Chunk]:
    """``(first row in the file, texts, metadata)`` of ``chunk_rows`` rows each (default
    :data:`CHUNK_ROWS`, read when called; the last chunk may be shorter). ``columns``: metadata
    columns to carry (None where this file lacks one)."""
    chunk_rows = chunk_rows or CHUNK_ROWS
    if is_parquet(path):
        have = datafiles.parquet_file(path, flag).schema_arrow.names
        meta_cols = [c for c in columns if c in have]
        texts: list = []
        meta: dict[str, list] = {c: [] for c in [*columns, DAMAGED]}
        start = 0
        for batch in datafiles.iter_parquet_surviving(
            path, [text_column, *meta_cols], flag, batch_size=chunk_rows
        ):
            if isinstance(batch, datafiles.LostRows):
                log.warning(
                    "%s: row group %d damaged: its %d rows get empty texts and zero vectors (%s)",
                    path,
                    batch.row_group,
                    batch.rows,
                    batch.problem,
                )
                texts += [""] * batch.rows
                for c in columns:
                    meta[c] += [None] * batch.rows
                meta[DAMAGED] += [True] * batch.rows
            else:
                d = batch.to_pydict()
                texts += d[text_column]
                for c in columns:
                    meta[c] += d[c] if c in d else [None] * batch.num_rows
                meta[DAMAGED] += [False] * batch.num_rows
            while len(texts) >= chunk_rows:  # batches can end early at row groups: re-cut
                yield start, texts[:chunk_rows], {c: v[:chunk_rows] for c, v in meta.items()}
                texts = texts[chunk_rows:]
                meta = {c: v[chunk_rows:] for c, v in meta.items()}
                start += chunk_rows
        if texts:
            yield start, texts, meta
        return
    try:
        f = _open_text(path)
    except FileNotFoundError:
        raise InputError(path, "not found", flag) from None
    with f:
        chunk: list = []
        start = 0
        for line in f:
            chunk.append(line.rstrip("\n").rstrip("\r"))
            if len(chunk) == chunk_rows:
                yield start, chunk, {c: [None] * len(chunk) for c in columns}
                start += len(chunk)
                chunk = []
        if chunk:
            yield start, chunk, {c: [None] * len(chunk) for c in columns}


def count_rows(path: str, flag: str | None = "--input") -> int:
    """Rows of one input: the Parquet footer, or the lines of a text file (read once)."""
    if is_parquet(path):
        return datafiles.parquet_file(path, flag).metadata.num_rows
    return sum(len(texts) for _, texts, _ in read_chunks(path, flag=flag))
