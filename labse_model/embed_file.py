"""Embed a text or Parquet file: the older entry point, kept for callers of :func:`embed_file`.

Everything is done by the one embedding path, :mod:`labse_model.embed_store` (row i = input row
i, blank lines kept with a zero vector and counted, chunks, a store under the OutputDir claim or
one ``.npy``); new code calls :func:`~labse_model.embed_store.embed_to_store` directly.
"""

from __future__ import annotations

from labse_model import embed_store
from labse_model.encode import Encoder


def is_store_output(output: str) -> bool:
    return not str(output).endswith(".npy")


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
    common = dict(dtype="float16" if fp16 else "float32", batch_size=batch_size,
                  text_column=text_column, show_progress=show_progress)  # fmt: skip
    if is_store_output(output):
        report = embed_store.embed_to_store(
            encoder, input_path, output, overwrite=overwrite,
            rows_per_shard=shard_size or embed_store.ROWS_PER_SHARD, **common)  # fmt: skip
        if stats_path:
            embed_store.write_json(stats_path, report)
        return report
    if shard_size:
        raise ValueError("shard_size writes an embedding store folder, not a .npy file")
    return embed_store.embed_to_npy(encoder, input_path, output, stats_path=stats_path, **common)
