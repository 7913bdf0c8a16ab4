"""Embed a text file (one sentence per line) or a Parquet file (``text`` column) to ``.npy``.

Row i of the output is sentence i of the input, always: empty lines and null texts are embedded
too (and counted as events), so downstream code can align embeddings with the input by index.
Input is processed in chunks and written into memory-mapped ``.npy`` files, so files larger
than memory work; ``shard_size`` splits the output into ``<stem>.00000.npy``, ... shards.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import numpy as np
import pyarrow.parquet as pq

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


def output_paths(output: str, n: int, shard_size: int) -> list[tuple[str, int, int]]:
    """(path, start, stop) of each output file."""
    if shard_size <= 0 or n <= shard_size:
        return [(output, 0, n)]
    stem = output[:-4] if output.endswith(".npy") else output
    return [
        (f"{stem}.{i:05d}.npy", start, min(start + shard_size, n))
        for i, start in enumerate(range(0, n, shard_size))
    ]


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
) -> dict:
    """Embed ``input_path`` into ``output`` (.npy, or shards); write and return stats."""
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
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    dtype = np.float16 if fp16 else np.float32
    files = output_paths(output, n, shard_size)
    if n == 0:
        log.warning("%s is empty: writing an empty embedding array", input_path)
        np.save(output, np.empty((0, encoder.dim), dtype=dtype))
    # Memory-mapped outputs: files larger than RAM fill chunk by chunk.
    arrays = [
        np.lib.format.open_memmap(p, mode="w+", dtype=dtype, shape=(stop - start, encoder.dim))
        for p, start, stop in files
        if stop > start
    ]
    counter = StageCounter()
    counter.add_in(UNIT, 0)  # the unit appears in stats.json even for an empty input
    counter.add_out(UNIT, 0)
    row = 0
    for chunk in chunks:
        texts = []
        for t in chunk:
            if t is None:
                counter.add_event(UNIT, "null")
                t = ""
            if not t.strip():
                counter.add_event(UNIT, "empty")
            texts.append(t)
        emb = encoder.encode(texts, batch_size=batch_size, fp16=fp16, show_progress=show_progress)
        counter.add_in(UNIT, len(texts))
        counter.add_out(UNIT, len(texts))
        if encoder.last_truncated:
            counter.add_event(UNIT, "truncated", encoder.last_truncated)
        # Scatter the chunk over the shard files it spans.
        for (_p, start, stop), arr in zip([f for f in files if f[2] > f[1]], arrays):
            lo, hi = max(start, row), min(stop, row + len(texts))
            if lo < hi:
                arr[lo - start : hi - start] = emb[lo - row : hi - row]
        row += len(texts)
    if row != n:
        raise RuntimeError(f"{input_path}: counted {n} rows but read {row}")
    for arr in arrays:
        arr.flush()
    report = counter.to_report(
        "encode",
        model_dim=encoder.dim,
        outputs=[p for p, _, _ in files],
        dtype=np.dtype(dtype).name,
    )
    problems = check_balanced(report)
    if problems:
        raise RuntimeError(f"unbalanced stats: {problems}")
    write_report(
        stats_path or os.path.join(os.path.dirname(os.path.abspath(output)), "stats.json"), report
    )
    return report
