"""The one embedding path: sentences -> embedding store, in chunks, row i = input line i.

Every entry point goes through here: ``python -m labse_model encode``, ``python -m mining
embed`` (and ``mine --model``, ``mine-many --model`` for their in-memory vectors), the Beam job
``pipelines.embed`` (its workers call :func:`read_chunks` and :func:`embed_chunk`, the driver the
same input checks) and the stage runner's ``embed`` task. So the same sentences give the same
store, byte for byte, whichever command wrote it.

The contract:

* **Inputs** (:func:`labse_model.embed_inputs.expand_inputs`): a text file (one sentence per line, ``.gz`` ok, a BOM
  honoured, invalid UTF-8 bytes replaced), a Parquet file with a ``text`` column, a folder of
  Parquet files (recursively, sorted; names starting with ``_`` or ``.`` skipped), an embedding
  store folder (its shard Parquets, in order), or a glob; local or ``s3://``/``gs://``.
* **Rows**: row i of the store is row i of the inputs, in order, always. Empty (blank) lines and
  null texts keep their row with an all-zero vector: it has no meaning to compare, and mining's
  cleaning drops zero vectors (``nan_or_zero_vector``/``empty_text``) instead of pairing blank
  lines. They are counted as events ``empty`` (and ``null``) in ``stats.json``; a sentence longer
  than ``max_seq_length`` tokens is truncated and counted as ``truncated``.
* **Chunks**: each input file is read in chunks of :data:`CHUNK_ROWS` rows (boundaries restart at
  each file) and every chunk is embedded by :func:`embed_chunk`. The encoder sorts a chunk by
  length before batching, so a sentence's vector depends on its chunk: fixed chunks are what make
  the entry points agree to the bit.
* **Row table**: ``row``, ``id`` (the Parquet ``id`` column as text, else the row number),
  ``text`` (null -> ""), then the metadata columns of :data:`META_COLUMNS` found in the inputs.
* **Output**: a store (``labse_common.embedding_store``) written under the
  :func:`~labse_common.output_dir.claim_output` claim (temporary folder, committed at the end), with
  a balanced ``stats.json`` inside; or one ``X.npy`` with its own ``X.stats.json``, claimed and
  committed together by :func:`~labse_common.output_dir.claim_output` (``files=``; a second
  writer gets exit 2; an existing file needs ``overwrite``). Both are written by the same loop
  (:func:`_embedded_chunks`). An input without any row is an
  :class:`~labse_common.errors.InputError` (nothing is written).
* **Options** are checked in one place (:func:`check_options`) by every entry point, the Beam
  driver included: ``max_seq_length`` below :data:`MIN_SEQ_LENGTH` is one line, not a worker's
  traceback.
* **One encoder per process**: models load through :func:`labse_model.encode.cached_encoder`.

torch is imported only when a model is loaded: the Beam driver imports this module without it.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from labse_common import datafiles
from labse_common import embedding_store as es
from labse_common.errors import InputError, UsageError
from labse_common.filesystems import is_remote, join
from labse_common.output_dir import claim_output
from labse_common.stats import StageCounter, check_balanced, to_report
from labse_model.embed_inputs import (
    CHUNK_ROWS,
    DAMAGED,
    check_inputs,
    count_rows,
    expand_inputs,
    is_parquet,
    read_chunks,
)

if TYPE_CHECKING:
    from labse_model.encode import Encoder


log = logging.getLogger(__name__)

STAGE = "embed"

UNIT = "sentences"

#: The shortest ``max_seq_length``: a sentence needs [CLS] and [SEP] plus at least one token.
MIN_SEQ_LENGTH = 3

#: A ``.npy`` output's own stats file: ``X.npy`` -> ``X.stats.json`` (two in a folder never share).
NPY_STATS = ".stats.json"

ROWS_PER_SHARD = 100_000

DTYPES = es.DTYPES


def load_model(
    model: str,
    device: str | None = None,
    max_seq_length: int = 128,
    flag: str | None = "--model",
    quantize: str = "none",
) -> Encoder:
    """The process's cached encoder for ``model``; a missing or unreadable checkpoint folder is an
    InputError naming it, int8 on a GPU a UsageError. A folder on object storage (``s3://…``)
    is read from this machine's copy of it (:func:`labse_common.model_init.resolve_init`): a
    Beam worker does not see the launcher's disk."""
    from labse_model.encode import cached_encoder
    from labse_model.model import CheckpointError

    check_max_seq_length(max_seq_length)
    check_quantize(quantize, device)
    if is_remote(model):  # this machine's copy (a Hugging Face cache layout: its snapshot)
        from labse_common.model_init import resolve_init

        model = str(resolve_init(model, flag))
    if not os.path.isdir(model):
        raise InputError(model, "model directory not found", flag)
    try:
        return cached_encoder(
            model, device=device, max_seq_length=max_seq_length, quantize=quantize
        )
    except CheckpointError as e:
        raise InputError(model, str(e), flag) from e


def check_quantize(quantize: str, device: str | None) -> None:
    """``--quantize`` against ``--device`` (int8 runs on the CPU only), as a UsageError: what
    every entry point checks before a model loads or an output is claimed."""
    from labse_common.sections.model import quantize_device

    try:
        quantize_device(quantize, device)
    except ValueError as e:
        raise UsageError(f"--quantize {quantize}: {e}") from e


def _no_readable_row(files: Sequence[str], lost: int, flag: str | None) -> InputError:
    return InputError(
        files[0] if len(files) == 1 else f"{len(files)} inputs",
        f"no readable row: every row group is damaged ({lost} rows)",
        flag,
    )


def require_readable(counter: StageCounter, files: Sequence[str], flag: str | None) -> None:
    """Damaged row groups are survived, but an input of which no row could be decoded would be
    a store of zero vectors: that is an error, before anything is committed."""
    lost = counter.counts.get(f"{UNIT}/event/damaged_row_group", 0)
    total = counter.counts.get(f"{UNIT}/in", 0)
    if lost and lost == total:
        raise _no_readable_row(files, lost, flag)
    blank = counter.counts.get(f"{UNIT}/event/empty", 0)  # nulls are counted empty as well
    if total and lost + blank == total:
        raise _no_text(files, blank, lost, flag)


def _no_text(files: Sequence[str], blank: int, lost: int, flag: str | None) -> InputError:
    # Every row would be a zero vector: a store that mines nothing, written with exit 0 before.
    return InputError(
        files[0] if len(files) == 1 else f"{len(files)} inputs",
        f"no text to embed: every row is null or blank ({blank} rows"
        + (f", {lost} more in damaged row groups)" if lost else ")"),
        flag,
    )


def check_readable(
    files: Sequence[str], text_column: str = "text", flag: str | None = "--input"
) -> None:
    """:func:`require_readable` before embedding, for a job that must fail before its claim
    (the Beam job): decodes the text column of every Parquet input once."""
    import pyarrow.compute as pc

    read = lost = texts = 0
    for path in files:
        if not is_parquet(path):
            return  # a text input is read with bad bytes replaced: it always has rows
        for batch in datafiles.iter_parquet_surviving(path, [text_column], flag):
            if isinstance(batch, datafiles.LostRows):
                lost += batch.rows
            else:
                read += batch.num_rows
                col = batch.column(0)
                texts += pc.sum(pc.not_equal(pc.utf8_trim_whitespace(col), "")).as_py() or 0
    if lost and not read:
        raise _no_readable_row(files, lost, flag)
    if read and not texts:
        raise _no_text(files, read, lost, flag)


def embed_chunk(
    encoder: Encoder,
    texts: Sequence[str | None],
    batch_size: int = 64,
    dtype: str = "float32",
    damaged: Sequence[bool] | None = None,
) -> tuple[np.ndarray, list[str], dict[str, int]]:
    """THE embedding step every entry point runs on every chunk.

    Returns ``(vectors in dtype, texts with None -> "", counts)``: one row per input text; blank
    and null texts get a zero vector and are counted as events (``empty``, ``null``), and so do
    the rows of a damaged row group (``damaged``, the chunk's :data:`DAMAGED` metadata), counted
    as ``damaged_row_group``."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, not {dtype!r}")
    counter = StageCounter()
    clean: list[str] = []
    keep: list[int] = []
    for i, t in enumerate(texts):
        if damaged is not None and damaged[i]:
            counter.add_event(UNIT, "damaged_row_group")
            clean.append("")
            continue
        if t is None:
            counter.add_event(UNIT, "null")
            t = ""
        if t.strip():
            keep.append(i)
        else:
            counter.add_event(UNIT, "empty")
        clean.append(t)
    vecs = np.zeros((len(clean), encoder.dim), dtype=dtype)
    if keep:
        emb, truncated = encoder.encode_counted(
            [clean[i] for i in keep], batch_size=batch_size, fp16=dtype == "float16"
        )
        vecs[keep] = emb
        if truncated:
            counter.add_event(UNIT, "truncated", truncated)
    counter.add_in(UNIT, len(clean))
    counter.add_out(UNIT, len(clean))
    return vecs, clean, counter.drain()


def row_columns(
    first_row: int, texts: Sequence[str], meta: dict[str, list], columns: Sequence[str]
) -> dict[str, list]:
    """The row-table columns of one chunk (``row``, ``id``, ``text``, metadata), in the order
    every writer uses, so the shard Parquet files are the same bytes."""
    rows = list(range(first_row, first_row + len(texts)))
    ids = meta.get("id") if "id" in columns else None
    out: dict[str, list] = {
        "row": rows,
        "id": [
            str(r) if ids is None or ids[k] is None else str(ids[k]) for k, r in enumerate(rows)
        ],
        "text": list(texts),
    }
    for c in columns:
        if c != "id":
            out[c] = list(meta[c])
    return out


def embed_texts(
    model: str | Encoder,
    texts: Sequence[str | None],
    batch_size: int = 64,
    dtype: str = "float32",
    chunk_rows: int | None = None,
) -> np.ndarray:
    """In-memory vectors of a list of sentences, chunk by chunk as the stores are written (for
    ``mining mine --model``, which keeps the vectors)."""
    encoder = load_model(model) if isinstance(model, (str, os.PathLike)) else model
    chunk_rows = chunk_rows or CHUNK_ROWS
    parts = [
        embed_chunk(encoder, texts[s : s + chunk_rows], batch_size, dtype)[0]
        for s in range(0, len(texts), chunk_rows)
    ]
    return np.concatenate(parts) if parts else np.zeros((0, encoder.dim), dtype)


def stats_report(
    counts: dict[str, int],
    *,
    dim: int,
    dtype: str,
    shards: int,
    inputs: Sequence[str],
    output: str,
    quantize: str = "none",
) -> dict:
    """The balanced ``stats.json`` of an embedding run (the local and the Beam writers'); an int8
    encoder is named (``quantize``), so its vectors are not taken for float32 ones."""
    flat = {f"{UNIT}/in": 0, f"{UNIT}/out": 0, **counts}  # the unit is there for 0 rows too
    report = to_report(
        STAGE,
        flat,
        model_dim=int(dim),
        dtype=dtype,
        shards=int(shards),
        inputs=list(inputs),
        outputs=[output],
        **({"quantize": quantize} if quantize != "none" else {}),
    )
    problems = check_balanced(report)
    if problems:
        raise RuntimeError(f"unbalanced stats: {problems}")
    return report


def write_json(path: str, doc: dict) -> None:
    es.write_bytes(path, (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))


def check_max_seq_length(max_seq_length: int, flag: str = "--max-seq-length") -> None:
    """UsageError unless a sentence fits: [CLS], [SEP] and at least one token."""
    if max_seq_length < MIN_SEQ_LENGTH:
        raise UsageError(
            f"{flag} {max_seq_length}: must be >= {MIN_SEQ_LENGTH} (a sentence "
            "needs [CLS] and [SEP] plus at least one token)"
        )


def check_options(
    dtype: str, batch_size: int, rows_per_shard: int, chunk_rows: int, max_seq_length: int = 128
) -> None:
    """The embedding options every entry point takes, checked once here (UsageError)."""
    if dtype not in DTYPES:
        raise UsageError(f"--dtype {dtype}: must be one of {', '.join(DTYPES)}")
    for flag, v in (
        ("--batch-size", batch_size),
        ("--rows-per-shard", rows_per_shard),
        ("chunk_rows", chunk_rows),
    ):
        if v < 1:
            raise UsageError(f"{flag} {v}: must be >= 1")
    check_max_seq_length(max_seq_length)


def npy_stats_path(output: str) -> str:
    """The stats file of a ``.npy`` output: ``X.npy`` -> ``X.stats.json``."""
    return (output[: -len(".npy")] if output.endswith(".npy") else output) + NPY_STATS


def _progress(show: bool):
    from tqdm import tqdm

    return tqdm(desc="embed", unit="sent", disable=not show)


def _prepare(
    model: str | Encoder,
    inputs: str | Sequence[str],
    options: tuple,
    text_column: str,
    device: str | None,
    max_seq_length: int,
    flag: str | None,
    quantize: str = "none",
) -> tuple[list[str], list[str], Encoder]:
    """What every writer does first: the options, the inputs and their columns, the model."""
    check_options(*options, max_seq_length)
    files = expand_inputs(inputs, flag)
    columns = check_inputs(files, text_column, flag)
    encoder = (
        load_model(model, device, max_seq_length, quantize=quantize)
        if isinstance(model, (str, os.PathLike))
        else model
    )
    return files, columns, encoder


def _embedded_chunks(
    encoder: Encoder,
    files: Sequence[str],
    columns: Sequence[str],
    text_column: str,
    chunk_rows: int,
    batch_size: int,
    dtype: str,
    counter: StageCounter,
    show_progress: bool,
    flag: str | None,
) -> Iterator[tuple[str, int, np.ndarray, list[str], dict[str, list]]]:
    """THE loop of the local writers: ``(file, first global row, vectors, texts, metadata)`` of
    every chunk of every input, in row order; the chunks' counts go into ``counter``."""
    bar = _progress(show_progress)
    try:
        row = 0
        for path in files:
            for _, texts, meta in read_chunks(path, columns, text_column, chunk_rows, flag):
                vecs, clean, counts = embed_chunk(
                    encoder, texts, batch_size, dtype, meta.get(DAMAGED)
                )
                counter.merge(counts)
                yield path, row, vecs, clean, meta
                row += len(clean)
                bar.update(len(clean))
    finally:
        bar.close()


def embed_to_store(
    model: str | Encoder,
    inputs: str | Sequence[str],
    output: str,
    *,
    dtype: str = "float32",
    batch_size: int = 64,
    rows_per_shard: int = ROWS_PER_SHARD,
    chunk_rows: int | None = None,
    text_column: str = "text",
    overwrite: bool = False,
    device: str | None = None,
    max_seq_length: int = 128,
    quantize: str = "none",
    show_progress: bool = False,
    flag: str | None = "--input",
) -> dict:
    """Embed ``inputs`` into the store folder ``output``; return the stats report (also written
    as ``stats.json`` in the store). See the module docstring for the contract.

    ``model``: a checkpoint folder (loaded once per process, int8 when ``quantize`` says so) or a
    loaded Encoder."""
    chunk_rows = chunk_rows or CHUNK_ROWS
    files, columns, encoder = _prepare(
        model,
        inputs,
        (dtype, batch_size, rows_per_shard, chunk_rows),
        text_column,
        device,
        max_seq_length,
        flag,
        quantize,
    )
    counter = StageCounter()
    rows = 0
    with claim_output(output, overwrite) as out:  # claim; written in out.tmp; commit
        w = es.StoreWriter(out.tmp, dim=encoder.dim, dtype=dtype, rows_per_shard=rows_per_shard)
        for _, row, vecs, clean, meta in _embedded_chunks(
            encoder,
            files,
            columns,
            text_column,
            chunk_rows,
            batch_size,
            dtype,
            counter,
            show_progress,
            flag,
        ):
            cols = row_columns(row, clean, meta, columns)
            del cols["row"]  # StoreWriter numbers the rows itself (the same numbers)
            ids = cols.pop("id")
            w.add(vecs, ids, **cols)
            rows = row + len(clean)
        require_readable(counter, files, flag)
        store = w.close()
        report = stats_report(
            counter.counts,
            dim=encoder.dim,
            dtype=dtype,
            shards=len(store.shards),
            inputs=files,
            output=str(output),
            quantize=encoder.quantize,
        )
        write_json(join(out.tmp, "stats.json"), report)
    log.info("embedded %d rows from %d file(s) into %s", rows, len(files), output)
    return report


def embed_to_npy(
    model: str | Encoder,
    inputs: str | Sequence[str],
    output: str,
    *,
    dtype: str = "float32",
    batch_size: int = 64,
    chunk_rows: int | None = None,
    text_column: str = "text",
    stats_path: str | None = None,
    overwrite: bool = False,
    device: str | None = None,
    max_seq_length: int = 128,
    quantize: str = "none",
    show_progress: bool = False,
    flag: str | None = "--input",
) -> dict:
    """The same rows as :func:`embed_to_store`, by the same loop, as one local ``.npy`` (row i
    = line i; memory-mapped, so outputs larger than RAM work) with its own ``X.stats.json``
    (:func:`npy_stats_path`; also copied to ``stats_path`` when given). Both are claimed
    (``X._CLAIM.json``: a second writer gets exit 2), written under temporary names and swapped
    in together when complete; an existing ``.npy`` needs ``overwrite``."""
    from labse_common.remote import require_local

    require_local(output, "--output")
    output = os.fspath(output)
    chunk_rows = chunk_rows or CHUNK_ROWS
    files, columns, encoder = _prepare(
        model,
        inputs,
        (dtype, batch_size, 1, chunk_rows),
        text_column,
        device,
        max_seq_length,
        flag,
        quantize,
    )
    n = sum(count_rows(p, flag) for p in files)
    npy = ".npy" if output.endswith(".npy") else ""
    counter = StageCounter()
    stem = output[: len(output) - len(npy)]
    with claim_output(stem, overwrite, files=(npy, NPY_STATS), shown=output) as out:
        arr = np.lib.format.open_memmap(out.path + npy, "w+", dtype, (n, encoder.dim))
        end = 0
        for path, row, vecs, _, _ in _embedded_chunks(
            encoder,
            files,
            columns,
            text_column,
            chunk_rows,
            batch_size,
            dtype,
            counter,
            show_progress,
            flag,
        ):
            end = row + len(vecs)
            if end > n:
                raise InputError(path, f"changed while it was read ({n} rows counted)", flag)
            arr[row:end] = vecs
        if end != n:
            raise InputError(
                files[-1], f"changed while it was read ({n} rows counted, {end} read)", flag
            )
        require_readable(counter, files, flag)
        arr.flush()
        del arr
        report = stats_report(
            counter.counts,
            dim=encoder.dim,
            dtype=dtype,
            shards=0,
            inputs=files,
            output=output,
            quantize=encoder.quantize,
        )
        write_json(out.path + NPY_STATS, report)  # out.path: a stem
    if stats_path:
        write_json(stats_path, report)
    return report


def shard_rows(total: int, rows_per_shard: int | None, num_shards: int | None) -> int:
    """Rows per shard: given, or ``total`` spread over ``num_shards`` (at least 1)."""
    if num_shards:
        return max(1, math.ceil(total / num_shards))
    return int(rows_per_shard or ROWS_PER_SHARD)


def describe(report: dict[str, Any]) -> str:
    """One line for a command's summary: rows, events, where."""
    c = report["counts"][UNIT]
    events = ", ".join(f"{k}={v}" for k, v in sorted(c.get("events", {}).items())) or "none"
    return (
        f"{c['out']} rows (dim {report['model_dim']}, {report['dtype']}, {report['shards']} "
        f"shards) -> {', '.join(report['outputs'])}; events: {events}"
    )
