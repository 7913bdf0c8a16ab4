"""Embed a text file (one sentence per line) or a Parquet file (``text`` column) to ``.npy``.

Row i of the output is sentence i of the input, always: empty lines and null texts are embedded
too (and counted as events), so downstream code can align embeddings with the input by index.
Input is processed in chunks. An output ending in ``.npy`` is one memory-mapped ``.npy`` (files
larger than memory work); any other output is an embedding store folder
(``labse_common.embedding_store``: ``store.json`` + ``shard_NNNNN.npy``/``.parquet`` with ids and
texts, ``shard_size`` rows per shard, 100,000 by default) that ``mining mine``, ``load_vectors``
and ``pipelines.mine`` read. The store is written under ``OUT/_tmp-<job id>/`` and committed at
the end (``labse_common.output_dir``). Older ``<stem>.00000.npy`` shards are still read.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import numpy as np
import pyarrow.parquet as pq

from labse_common.embedding_store import StoreWriter
from labse_common.output_dir import exclusive_output
from labse_common.stats import StageCounter, check_balanced, write_report
from labse_model.encode import Encoder

log = logging.getLogger(__name__)

UNIT = "sentences"
CHUNK = 50_000


def _count_lines(path: str) -> int:
    n = 0
    last = b"\n"
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            n += block.count(b"\n")
            last = block[-1:]
    return n + (0 if last == b"\n" else 1)


def _text_chunks(path: str) -> Iterator[list[str]]:
    chunk: list[str] = []
    with open(path, encoding="utf-8", errors="replace", newline="\n") as f:
        for line in f:
            chunk.append(line.rstrip("\r\n"))
            if len(chunk) == CHUNK:
                yield chunk
                chunk = []
    if chunk:
        yield chunk


def _parquet_chunks(path: str, column: str) -> Iterator[list[str | None]]:
    pf = pq.ParquetFile(path)
    if column not in pf.schema_arrow.names:
        raise ValueError(f"{path}: no column {column!r} (has {pf.schema_arrow.names})")
    for batch in pf.iter_batches(batch_size=CHUNK, columns=[column]):
        yield batch.column(0).to_pylist()


def is_store_output(output: str) -> bool:
    return not str(output).endswith(".npy")


def _counted(chunk: list, counter: StageCounter) -> list[str]:
    texts = []
    for t in chunk:
        if t is None:
            counter.add_event(UNIT, "null")
            t = ""
        if not t.strip():
            counter.add_event(UNIT, "empty")
        texts.append(t)
    return texts


def embed_file(
    encoder: Encoder,
    input_path: str,
    output: str,
    batch_size: int = 64,
    fp16: bool = False,
    text_column: str = "text",
    shard_size: int = 0,
    stats_path: str | None = None,
    show_progress: bool = True,
    overwrite: bool = False,
) -> dict:
    """Embed ``input_path`` into ``output`` (a .npy, or a store folder); write and return stats."""
    if not os.path.isfile(input_path):
        raise FileNotFoundError(f"input file not found: {input_path}")
    parquet = input_path.endswith(".parquet")
    if parquet:
        pf = pq.ParquetFile(input_path)
        if text_column not in pf.schema_arrow.names:
            raise ValueError(
                f"{input_path}: no column {text_column!r} (has {pf.schema_arrow.names})"
            )
        n = pf.metadata.num_rows
    else:
        n = _count_lines(input_path)
    chunks = _parquet_chunks(input_path, text_column) if parquet else _text_chunks(input_path)
    dtype = np.float16 if fp16 else np.float32
    counter = StageCounter()
    counter.add_in(UNIT, 0)  # the unit appears in stats.json even for an empty input
    counter.add_out(UNIT, 0)
    if is_store_output(output):
        return _embed_to_store(encoder, chunks, n, output, dtype, batch_size, shard_size,
                               counter, overwrite, show_progress, input_path)  # fmt: skip
    if shard_size:
        raise ValueError("--shard-size writes an embedding store folder: give --output DIR "
                         "(not a .npy file)")  # fmt: skip
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    if n == 0:
        log.warning("%s is empty: writing an empty embedding array", input_path)
        np.save(output, np.empty((0, encoder.dim), dtype=dtype))
    # Memory-mapped output: files larger than RAM fill chunk by chunk.
    arr = (np.lib.format.open_memmap(output, mode="w+", dtype=dtype, shape=(n, encoder.dim))
           if n else None)  # fmt: skip
    row = 0
    for chunk in chunks:
        texts = _counted(chunk, counter)
        emb = encoder.encode(texts, batch_size=batch_size, fp16=fp16, show_progress=show_progress)
        counter.add_in(UNIT, len(texts))
        counter.add_out(UNIT, len(texts))
        if encoder.last_truncated:
            counter.add_event(UNIT, "truncated", encoder.last_truncated)
        arr[row : row + len(texts)] = emb
        row += len(texts)
    if row != n:
        raise RuntimeError(f"{input_path}: counted {n} rows but read {row}")
    if arr is not None:
        arr.flush()
    files = [output]
    report = counter.to_report(
        "encode",
        model_dim=encoder.dim,
        outputs=files,
        dtype=np.dtype(dtype).name,
    )
    problems = check_balanced(report)
    if problems:
        raise RuntimeError(f"unbalanced stats: {problems}")
    write_report(
        stats_path or os.path.join(os.path.dirname(os.path.abspath(output)), "stats.json"), report
    )
    return report


def _embed_to_store(encoder: Encoder, chunks, n: int, output: str, dtype, batch_size: int,
                    shard_size: int, counter: StageCounter, overwrite: bool, show_progress: bool,
                    input_path: str) -> dict:  # fmt: skip
    """Chunks -> an embedding store (ids = row numbers, texts kept) with stats.json inside."""
    with exclusive_output(output, overwrite) as out:
        w = StoreWriter(out.tmp, dim=encoder.dim, dtype=np.dtype(dtype).name,
                        rows_per_shard=shard_size or 100_000)  # fmt: skip
        row = 0
        for chunk in chunks:
            texts = _counted(chunk, counter)
            emb = encoder.encode(texts, batch_size=batch_size, fp16=dtype == np.float16,
                                 show_progress=show_progress)  # fmt: skip
            counter.add_in(UNIT, len(texts))
            counter.add_out(UNIT, len(texts))
            if encoder.last_truncated:
                counter.add_event(UNIT, "truncated", encoder.last_truncated)
            w.add(emb, [str(i) for i in range(row, row + len(texts))], text=texts)
            row += len(texts)
        if row != n:
            raise RuntimeError(f"{input_path}: counted {n} rows but read {row}")
        store = w.close()
        report = counter.to_report("encode", model_dim=encoder.dim, outputs=[output],
                                   dtype=store.dtype, shards=len(store.shards))  # fmt: skip
        problems = check_balanced(report)
        if problems:
            raise RuntimeError(f"unbalanced stats: {problems}")
        write_report(os.path.join(out.tmp, "stats.json"), report)
    return report
