"""Beam job: embed sentences with a LaBSE checkpoint into an embedding store.

    python -m pipelines.embed --input 'sentences/de/*.parquet' --model DIR --output emb/de \
        [--num-shards 8] [--dtype float16] [--batch-size 64] [beam options, e.g. --runner ...]

Each worker loads the PyTorch encoder once (a RunInference ``ModelHandler``, called from a
plain ParDo so that the DaskRunner runs the job too), embeds the sentences in the batches they
were read in, and emits one unit vector per sentence. Sentences are keyed by id (the Parquet ``id`` column,
else ``doc_id:url_or_title:sha1(text)``, else ``sha1(text)`` for text input), hashed into
``--num-shards`` groups, and each group is written as ``shard_NNNNN.npy`` + ``.parquet``
(sorted by id); ``store.json`` lists them, so ``labse_common.embedding_store.EmbeddingStore``
reads the result and ``python -m mining mine --src-text STORE --src-emb STORE`` mines it.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import logging
import os
import sys
import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.ml.inference.base import (
    ModelHandler,
    PredictionResult,
)

from labse_common import embedding_store as store_format
from labse_common.cli import UsageError, add_log_level_option, add_output_option, usage_error
from labse_common.logs import setup_logging
from labse_common.stats import StageCounter, check_balanced, merge_counts, to_report
from labse_common.textio import strip_bom
from pipelines.inputs import require_columns
from pipelines.options import pipeline_options, run_pipeline
from pipelines.outputs import claim_output
from pipelines.tagged import join_sinks, with_outputs

log = logging.getLogger(__name__)

STATS = "stats"
READ_BATCH = 512  # sentences read and embedded together (one RunInference element)
UNIT = "sentences"


class LabseModelHandler(ModelHandler[str, PredictionResult, Any]):
    """RunInference handler for the PyTorch LaBSE encoder (tokenisation included)."""

    def __init__(
        self,
        model_dir: str,
        batch_size: int = 64,
        device: str | None = None,
        max_seq_length: int = 128,
        max_batch_size: int = 512,
    ) -> None:
        self._model_dir = model_dir
        self._batch_size = batch_size
        self._device = device
        self._max_seq_length = max_seq_length
        self._max_batch_size = max_batch_size

    def load_model(self) -> Any:
        from labse_model.encode import Encoder  # torch is imported on the worker only

        return Encoder.from_pretrained(
            self._model_dir, device=self._device, max_seq_length=self._max_seq_length
        )

    def run_inference(
        self, batch: Sequence[list], model: Any, inference_args: dict | None = None
    ) -> Iterable[PredictionResult]:
        # Each element is already a batch: a list of (id, (text, url)) read together.
        texts = [text for chunk in batch for _, (text, _) in chunk]
        vecs = model.encode(texts, batch_size=self._batch_size)
        out, at = [], 0
        for chunk in batch:
            out.append(PredictionResult(chunk, vecs[at : at + len(chunk)]))
            at += len(chunk)
        return out

    def batch_elements_kwargs(self) -> dict[str, int]:
        return {"min_batch_size": 1, "max_batch_size": 1}  # elements are batches already

    def get_metrics_namespace(self) -> str:
        return "labse_embed"


def _sha1(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:20]


class EmbedBatches(beam.DoFn):
    """Runs the model handler on each pre-built batch; the model loads once per DoFn instance.

    The same handler works with ``RunInference``; the job calls it from a plain ParDo because
    Beam 2.77's DaskRunner cannot run RunInference (its multi-output exception handling and its
    batching's finish_bundle outputs are lost there), and the batches are already built.
    """

    def __init__(self, handler: LabseModelHandler) -> None:
        self.handler = handler
        self.model = None

    def setup(self) -> None:
        self.model = self.handler.load_model()

    def process(self, chunk: list) -> Iterator[PredictionResult]:
        yield from self.handler.run_inference([chunk], self.model)


class ToKeyed(beam.DoFn):
    """A list of records -> one list of (id, (text, url)); empty or non-string text is dropped
    and counted."""

    def process(self, recs: list) -> Iterator[Any]:
        counter = StageCounter()
        keyed = []
        for rec in recs:
            counter.add_in(UNIT)
            if isinstance(rec, dict):
                text = rec.get("text")
                meta = {k: rec.get(k) for k in ("id", "doc_id", "url_or_title")}
            else:
                text, meta = (strip_bom(rec) if isinstance(rec, str) else rec), {}  # BOM
            if not isinstance(text, str) or not text.strip():
                counter.add_dropped(UNIT, "empty_text")
                continue
            if meta.get("id") is not None:
                key = str(meta["id"])
            elif meta.get("doc_id") is not None:
                key = f"{meta['doc_id']}:{meta.get('url_or_title') or ''}:{_sha1(text)}"
            else:
                key = _sha1(text)
            counter.add_out(UNIT)
            keyed.append((key, (text, meta.get("url_or_title"))))
        yield beam.pvalue.TaggedOutput(STATS, counter.drain())
        if keyed:
            yield keyed


class WriteShard(beam.DoFn):
    """One group of (id, (text, url), vector) -> a store shard (``labse_common.embedding_store``);
    yields (name, rows, dim)."""

    def __init__(self, output: str, dtype: str) -> None:
        self.output = output
        self.dtype = dtype

    def process(self, kv: tuple[int, Iterable[tuple[str, tuple, np.ndarray]]]) -> Iterator[Any]:
        shard, items = kv
        items = sorted(items, key=lambda it: it[0])
        vecs = np.stack([it[2] for it in items]).astype(self.dtype)
        table = pa.table(
            {
                "id": [it[0] for it in items],
                "text": [it[1][0] for it in items],
                "url_or_title": [it[1][1] for it in items],
            }
        )
        info = store_format.write_shard(self.output, store_format.shard_name(shard), vecs, table)
        yield info.name, info.rows, int(vecs.shape[1])


def write_manifest(shards: list[tuple[str, int, int]], output: str, dtype: str) -> None:
    shards = sorted(shards)
    dims = {d for _, _, d in shards}
    if len(dims) > 1:
        raise ValueError(f"shards disagree on dimension: {dims}")
    store_format.write_manifest(output, dims.pop() if dims else 0, dtype,
                                [store_format.ShardInfo(n, r) for n, r, _ in shards])  # fmt: skip


def build_pipeline(
    p: beam.Pipeline,
    inputs: Sequence[str],
    model_dir: str,
    output: str,
    num_shards: int,
    dtype: str,
    batch_size: int,
    device: str | None,
) -> None:
    # Files are read by a ParDo through FileSystems (not ReadFromParquet/ReadFromText, whose
    # Read sources the DaskRunner does not translate); with_outputs and join_sinks keep the job
    # runnable there too (pipelines/tagged.py).
    records = (
        p
        | "Files" >> beam.Create(list(inputs))
        | "Spread" >> beam.Reshuffle()
        | "Read" >> beam.FlatMap(read_records, READ_BATCH)
    )
    keyed = with_outputs(records, "Key", ToKeyed(), STATS, main="keyed")
    handler = LabseModelHandler(model_dir, batch_size, device)
    embedded = (
        keyed.keyed
        | "Embed" >> beam.ParDo(EmbedBatches(handler))
        | "Unpack" >> beam.FlatMap(
            lambda r: ((k, meta, v) for (k, meta), v in zip(r.example, r.inference)))
    )
    shards = (
        embedded
        | "Shard" >> beam.Map(lambda it: (zlib.crc32(it[0].encode("utf-8")) % num_shards, it))
        | "Group" >> beam.GroupByKey()
        | "Write" >> beam.ParDo(WriteShard(output, dtype))
    )
    manifest = (
        shards
        | "OneKey" >> beam.Map(lambda s: (None, s))
        | "AllShards" >> beam.GroupByKey()
        | "Manifest" >> beam.Map(lambda kv: write_manifest(list(kv[1]), output, dtype))
    )
    stats = (
        keyed[STATS]
        | "SumStats" >> beam.CombineGlobally(merge_counts).without_defaults()
        | "WriteStats" >> beam.Map(_write_stats, output)
    )
    join_sinks([manifest, stats])


def read_records(path: str, batch_rows: int = 512) -> Iterator[list]:
    """Lists of at most ``batch_rows`` rows of a Parquet file (dicts) or lines of a text file,
    streamed through FileSystems: each list is embedded as one batch."""
    with FileSystems.open(path, compression_type=CompressionTypes.AUTO) as f:
        if path.endswith(".parquet"):
            for batch in pq.ParquetFile(f).iter_batches(batch_size=batch_rows):
                yield batch.to_pylist()
            return
        chunk: list[str] = []
        for line in io.TextIOWrapper(f, encoding="utf-8", errors="replace", newline="\n"):
            chunk.append(line.rstrip("\r\n"))
            if len(chunk) == batch_rows:
                yield chunk
                chunk = []
        if chunk:
            yield chunk


def _write_stats(counts: dict[str, int], output: str) -> None:
    report = to_report("embed", counts)
    problems = check_balanced(report)
    if problems:
        raise RuntimeError(f"unbalanced stats: {problems}")
    with FileSystems.create(FileSystems.join(output, "stats.json")) as f:
        f.write(json.dumps(report, indent=2).encode("utf-8"))


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m pipelines.embed",
        description="Embed sentences into an embedding store with Beam RunInference (a PyTorch "
        "LaBSE model handler). Any option not listed here is passed to Beam, e.g. --runner "
        "FlinkRunner, --direct_num_workers 4.",
    )
    ap.add_argument(
        "--input",
        required=True,
        nargs="+",
        help="Parquet files/globs with a 'text' column (optional id, doc_id, url_or_title), "
        "or text files with one sentence per line",
    )
    ap.add_argument("--model", required=True, help="LaBSE checkpoint directory (HF format)")
    add_output_option(ap, "store directory to write")
    ap.add_argument("--num-shards", type=int, default=1, help="store shards (default 1)")
    ap.add_argument(
        "--dtype", choices=["float16", "float32"], default="float16", help="stored precision"
    )
    ap.add_argument("--batch-size", type=int, default=64, help="encoder batch size")
    ap.add_argument(
        "--device", default=None, help="torch device on workers (default: cuda if present)"
    )
    ap.add_argument("--overwrite", action="store_true",
                    help="replace a non-empty --output (old files are removed at the end)")
    add_log_level_option(ap)
    return ap


def run(argv: Sequence[str] | None = None) -> int:
    args, beam_args = build_parser().parse_known_args(argv)
    setup_logging(args.log_level)
    if not os.path.isdir(args.model):
        log.error("model directory not found: %s", args.model)
        return 2
    if args.num_shards < 1:
        log.error("--num-shards must be >= 1")
        return 2
    try:
        options = pipeline_options(beam_args)  # first: it gives FileSystems the S3/GCS options
    except UsageError as e:
        return usage_error(e, log)
    matched = [m.path for pat in args.input for m in FileSystems.match([pat])[0].metadata_list]
    if not matched:
        log.error("no input matches %s", args.input)
        return 2
    try:
        require_columns(matched, ["text"])  # Parquet without `text`: not a store of dimension 0
        out = claim_output(args.output, args.overwrite)
    except UsageError as e:
        return usage_error(e, log)
    try:  # the job writes under OUTPUT/_tmp-<job id>/, committed at the end
        p = beam.Pipeline(options=options)
        build_pipeline(p, sorted(matched), args.model, out.tmp, args.num_shards, args.dtype,
                       args.batch_size, args.device)  # fmt: skip
        run_pipeline(p)
    except BaseException:
        out.abort()
        raise
    out.commit()
    log.info("embedding store written to %s", args.output)
    return 0


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
