"""Beam job: embed sentences with a LaBSE checkpoint into an embedding store.

    python -m pipelines.embed --input 'sentences/de/*.parquet' --model DIR --output emb/de \
        [--rows-per-shard 100000 | --num-shards 8] [--dtype float16] [--batch-size 64] \
        [beam options, e.g. --runner ...]

The distributed form of the one embedding path (:mod:`labse_model.embed_store`): the same
inputs, the same chunks, the same per-chunk function and the same shard writer, so the store is
byte for byte the one ``python -m labse_model encode`` or ``python -m mining embed`` writes for
the same sentences. Row i of the store is row i of the inputs (files in sorted order); blank and
null texts, and the rows of a Parquet row group that does not decode, keep their row with a zero
vector and are counted (an input with no readable row at all is exit 2).

1. **Read**: each input file is cut into chunks of ``CHUNK_ROWS`` rows (``read_chunks``).
2. **Embed**: each worker loads the encoder once per process (``cached_encoder``; the
   :class:`LabseModelHandler` is a RunInference ``ModelHandler`` around it, called from a plain
   ParDo so that the DaskRunner runs the job too) and runs ``embed_chunk`` on every chunk.
3. **Place**: the rows per file (a side input) give each chunk its global first row; its rows are
   cut at shard boundaries and keyed by shard number.
4. **Write**: each shard's pieces, in row order, are written as ``shard_NNNNN.npy`` +
   ``.parquet`` by the store's own writer (``write_pieces``).
5. **Finish**: ``store.json`` and a balanced ``stats.json``, after every shard.

Everything is written under ``OUTPUT/_tmp-<job id>/`` and committed at the end
(``labse_common.output_dir``).
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.ml.inference.base import ModelHandler, PredictionResult

from labse_common import embedding_store as store_format
from labse_common.cli import (
    UsageError,
    add_log_level_option,
    add_output_option,
    add_overwrite_option,
    add_quantize_option,
    command_parser,
    exit_with,
    run_main,
)
from labse_common.filesystems import is_remote
from labse_common.logs import setup_logging
from labse_common.output_dir import claim_output
from labse_common.remote import check_paths, remote_paths
from labse_common.remote_cache import require_encoder_folder
from labse_common.stats import merge_counts
from labse_model import embed_store as lib
from labse_model.embed_inputs import DAMAGED, check_inputs, expand_inputs, read_chunks
from pipelines.options import new_pipeline, pipeline_options, run_pipeline
from pipelines.tagged import join_sinks, with_outputs

log = logging.getLogger("pipelines.embed")

STATS = "stats"


class LabseModelHandler(ModelHandler[list, PredictionResult, Any]):
    """RunInference handler for the PyTorch LaBSE encoder: one element is one chunk of texts,
    its inference ``(vectors, texts, counts)`` from :func:`labse_model.embed_store.embed_chunk`."""

    def __init__(
        self,
        model_dir: str,
        batch_size: int = 64,
        device: str | None = None,
        max_seq_length: int = 128,
        dtype: str = "float32",
        quantize: str = "none",
    ) -> None:
        self._model_dir = model_dir
        self._batch_size = batch_size
        self._device = device
        self._max_seq_length = max_seq_length
        self._dtype = dtype
        self._quantize = quantize

    def load_model(self) -> Any:
        # The process-wide cache: the DoFn instances of one worker share one model.
        return lib.load_model(
            self._model_dir, self._device, self._max_seq_length, quantize=self._quantize
        )

    def run_inference(
        self, batch: Sequence[list], model: Any, inference_args: dict | None = None
    ) -> Iterable[PredictionResult]:
        return [PredictionResult(texts, self.embed(model, texts)) for texts in batch]

    def embed(
        self,
        model: Any,
        texts: list,
        damaged: list[bool] | None = None,
    ) -> tuple[np.ndarray, list[str], dict[str, int]]:
        return lib.embed_chunk(model, texts, self._batch_size, self._dtype, damaged)

    def batch_elements_kwargs(self) -> dict[str, int]:
        return {"min_batch_size": 1, "max_batch_size": 1}  # elements are chunks already

    def get_metrics_namespace(self) -> str:
        return "labse_embed"


class EmbedChunks(beam.DoFn):
    """(file, first row, texts, metadata) -> (file, first row, vectors, texts, metadata), and the
    chunk's counts under the ``stats`` tag. The model loads once per worker process."""

    def __init__(self, handler: LabseModelHandler) -> None:
        self.handler = handler
        self.model = None

    def setup(self) -> None:
        self.model = self.handler.load_model()

    def process(self, chunk: tuple) -> Iterator[Any]:
        file, start, texts, meta = chunk
        vecs, clean, counts = self.handler.embed(self.model, texts, meta.get(DAMAGED))
        yield beam.pvalue.TaggedOutput(STATS, counts)
        yield file, start, vecs, clean, meta


def read_file(
    item: tuple[int, str], columns: Sequence[str], text_column: str, chunk_rows: int
) -> Iterator[tuple]:
    file, path = item
    for start, texts, meta in read_chunks(path, columns, text_column, chunk_rows, "--input"):
        yield file, start, texts, meta


def place(
    chunk: tuple,
    sizes: dict[int, int],
    columns: Sequence[str],
    rows_per_shard: int | None,
    num_shards: int | None,
) -> Iterator[tuple[int, tuple]]:
    """Cut a chunk at shard boundaries: (shard, (first global row, vectors, row-table columns))."""
    file, start, vecs, texts, meta = chunk
    first = sum(n for f, n in sizes.items() if f < file) + start
    per = lib.shard_rows(sum(sizes.values()), rows_per_shard, num_shards)
    cols = lib.row_columns(first, texts, meta, columns)
    at = 0
    while at < len(texts):
        shard = (first + at) // per
        end = min(len(texts), (shard + 1) * per - first)
        yield shard, (first + at, vecs[at:end], {k: v[at:end] for k, v in cols.items()})
        at = end


class WriteShard(beam.DoFn):
    """One shard's pieces -> ``shard_NNNNN.npy/.parquet`` with the store's writer; yields
    ``(shard, rows, dim)``."""

    def __init__(self, output: str, dtype: str) -> None:
        self.output = output
        self.dtype = dtype

    def process(self, kv: tuple[int, Iterable[tuple]]) -> Iterator[tuple[int, int, int]]:
        shard, pieces = kv
        pieces = sorted(pieces, key=lambda p: p[0])
        for (a, va, _), (b, _, _) in zip(pieces, pieces[1:]):
            if a + len(va) != b:  # every row is placed exactly once: a gap is a bug
                raise RuntimeError(f"shard {shard}: rows {a + len(va)}..{b - 1} missing")
        info = store_format.write_pieces(
            self.output, shard, [p[1] for p in pieces], [p[2] for p in pieces], self.dtype
        )
        yield shard, info.rows, int(pieces[0][1].shape[1])


def finish(
    _: Any,
    shards: list,
    counts: list,
    output: str,
    dtype: str,
    inputs: list[str],
    model: tuple[str, str | None, int, str],
    name: str,
) -> None:
    """``store.json`` (shards in order; none may be missing) and ``stats.json``."""
    shards = sorted(shards)
    if [s for s, _, _ in shards] != list(range(len(shards))):
        raise RuntimeError(
            f"store shards are not 0..{len(shards) - 1}: {[s for s, _, _ in shards]}"
        )
    dims = {d for _, _, d in shards}
    if len(dims) > 1:
        raise RuntimeError(f"shards disagree on dimension: {sorted(dims)}")
    # No row at all (a compressed text file holding nothing): the manifest still needs the dim.
    dim = dims.pop() if dims else lib.load_model(*model[:3]).dim
    store_format.write_manifest(
        output,
        dim,
        dtype,
        [store_format.ShardInfo(store_format.shard_name(s), r) for s, r, _ in shards],
    )
    report = lib.stats_report(
        merge_counts(counts),
        dim=dim,
        dtype=dtype,
        shards=len(shards),
        inputs=inputs,
        output=name,
        quantize=model[3],
    )
    lib.write_json(store_format.join(output, "stats.json"), report)


def build_pipeline(
    p: beam.Pipeline,
    inputs: Sequence[str],
    model_dir: str,
    output: str,
    *,
    columns: Sequence[str] = (),
    dtype: str = "float16",
    batch_size: int = 64,
    device: str | None = None,
    rows_per_shard: int | None = lib.ROWS_PER_SHARD,
    num_shards: int | None = None,
    chunk_rows: int | None = None,
    text_column: str = "text",
    max_seq_length: int = 128,
    name: str | None = None,
    quantize: str = "none",
) -> None:
    """The job's graph, writing the store into ``output`` (the claimed temporary folder);
    ``name``: the output as stats.json reports it (default ``output``)."""
    # Files are read by a ParDo through FileSystems (not ReadFromParquet/ReadFromText, whose
    # Read sources the DaskRunner does not translate); with_outputs and join_sinks keep the job
    # runnable there too (pipelines/tagged.py).
    chunks = (
        p
        | "Files" >> beam.Create(list(enumerate(inputs)))
        | "Spread" >> beam.Reshuffle()
        | "Read"
        >> beam.FlatMap(read_file, list(columns), text_column, chunk_rows or lib.CHUNK_ROWS)
    )
    sizes = beam.pvalue.AsDict(
        chunks
        | "ChunkRows" >> beam.Map(lambda c: (c[0], len(c[2])))
        | "FileRows" >> beam.CombinePerKey(sum)
    )
    handler = LabseModelHandler(model_dir, batch_size, device, max_seq_length, dtype, quantize)
    embedded = with_outputs(chunks, "Embed", EmbedChunks(handler), STATS, main="vectors")
    shards = (
        embedded.vectors
        | "Place" >> beam.FlatMap(place, sizes, list(columns), rows_per_shard, num_shards)
        | "Group" >> beam.GroupByKey()
        | "Write" >> beam.ParDo(WriteShard(output, dtype))
    )
    done = (
        p
        | "Last" >> beam.Create([None])
        | "Finish"
        >> beam.Map(
            finish,
            beam.pvalue.AsList(shards),
            beam.pvalue.AsList(embedded[STATS]),
            output,
            dtype,
            list(inputs),
            (model_dir, device, max_seq_length, quantize),
            name or output,
        )
    )
    join_sinks([done])


def build_parser() -> argparse.ArgumentParser:
    ap = command_parser(
        "python -m pipelines.embed",
        "Embed sentences with a LaBSE checkpoint into an embedding store as a Beam job: the same store 'labse_model encode' and 'mining embed' write.",
        "Any option not listed here is passed to Beam, e.g. --runner DaskRunner, --runner FlinkRunner, --direct_num_workers 4.",
        examples=[
            "python -m pipelines.embed --input 'sentences/de/*.parquet' --model labse/ --output emb/de",
            "python -m pipelines.embed --input sentences/de --model labse/ --output emb/de --rows-per-shard 100000 --runner DaskRunner",
        ],
    )
    ap.add_argument(
        "--input",
        required=True,
        nargs="+",
        help="Parquet files/globs/folders with a 'text' column (optional id, doc_id, "
        "url_or_title, source), text files with one sentence per line, or an embedding store",
    )
    ap.add_argument(
        "--model",
        required=True,
        help="LaBSE checkpoint directory (HF format), local or on object storage (s3://, gs://: "
        "each worker copies it once into its $XDG_CACHE_HOME/labse/models)",
    )
    add_output_option(ap, "store directory to write")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--rows-per-shard", type=int, help="rows per shard file (default 100000)")
    g.add_argument("--num-shards", type=int, help="spread the rows over this many shard files")
    ap.add_argument("--dtype", choices=list(lib.DTYPES), default="float16", help="stored precision")
    ap.add_argument("--batch-size", type=int, default=64, help="encoder batch size")
    add_quantize_option(ap)
    ap.add_argument(
        "--device", default=None, help="torch device on workers (default: cuda if present)"
    )
    ap.add_argument(
        "--max-seq-length",
        type=int,
        default=128,
        help="tokens per sentence incl. [CLS] and [SEP] (at least 3); longer ones are "
        "truncated and counted (128)",
    )
    add_overwrite_option(ap, "--output folder (old files are removed at the end)")
    add_log_level_option(ap)
    return ap


def _run(args: argparse.Namespace, beam_args: list[str]) -> int:
    if args.num_shards is not None and args.num_shards < 1:
        raise UsageError(f"--num-shards {args.num_shards}: must be >= 1")
    rows_per_shard = (
        args.rows_per_shard
        if args.rows_per_shard is not None
        else (None if args.num_shards else lib.ROWS_PER_SHARD)
    )
    # The driver checks what the workers would trip on (a short --max-seq-length included).
    lib.check_options(
        args.dtype, args.batch_size, rows_per_shard or 1, lib.CHUNK_ROWS, args.max_seq_length
    )
    if not is_remote(args.model) and not os.path.isdir(args.model):
        raise UsageError(f"--model {args.model}: model directory not found")
    lib.check_quantize(args.quantize, args.device)
    options = pipeline_options(beam_args)  # first: it gives FileSystems the S3/GCS options
    # With the job's own S3 options: missing credentials/endpoint/bucket is one line now.
    check_paths(remote_paths([*args.input, args.output, args.model]), options)
    if is_remote(args.model):  # each worker copies it (lib.load_model); it must be there
        require_encoder_folder(args.model, "--model")
    files = expand_inputs(args.input, "--input")
    columns = check_inputs(files, "text", "--input")  # before the claim: nothing written
    # Workers survive a damaged row group (its rows keep their place with zero vectors), but an
    # input of which no row decodes would be a store of zeros: decode the text columns once here
    # (cheap beside encoding), so that is one line before the claim.
    lib.check_readable(files)
    # Written under OUTPUT/_tmp-<job id>/ and committed at the end; a full disk on a worker is
    # one line, exit 2.
    with claim_output(args.output, args.overwrite) as out, new_pipeline(options) as p:
        build_pipeline(
            p,
            files,
            args.model,
            out.path,
            columns=columns,
            dtype=args.dtype,
            batch_size=args.batch_size,
            device=args.device,
            rows_per_shard=rows_per_shard,
            num_shards=args.num_shards,
            max_seq_length=args.max_seq_length,
            name=args.output,
            quantize=args.quantize,
        )
        run_pipeline(p)
    log.info("embedding store written to %s", args.output)
    return 0


def run(argv: Sequence[str] | None = None) -> int:
    args, beam_args = build_parser().parse_known_args(argv)
    setup_logging(args.log_level)
    # Remote paths are checked once the Beam options are parsed (they carry the S3 settings).
    return run_main(lambda: _run(args, beam_args), log, args=args, check_remote=False)


if __name__ == "__main__":
    exit_with(run)
