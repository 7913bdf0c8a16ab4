"""Beam job: embed sentences with a LaBSE checkpoint through RunInference into an embedding store.

    python -m pipelines.embed --input 'sentences/de/*.parquet' --model DIR --output emb/de \
        [--num-shards 8] [--dtype float16] [--batch-size 64] [beam options, e.g. --runner ...]

Each worker loads the PyTorch encoder once (RunInference's model handler), batches sentences,
and emits one unit vector per sentence. Sentences are keyed by id (the Parquet ``id`` column,
else ``doc_id:url_or_title:sha1(text)``, else ``sha1(text)`` for text input), hashed into
``--num-shards`` groups, and each group is written as ``shard_NNNNN.npy`` + ``.parquet``
(sorted by id); ``store.json`` lists them, so ``mining.embeddings.EmbeddingStore`` reads the
result and ``python -m mining mine --src-text STORE --src-emb STORE`` mines it.
"""

from __future__ import annotations

import argparse
import hashlib
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
from apache_beam.io.filesystems import FileSystems
from apache_beam.ml.inference.base import (
    KeyedModelHandler,
    ModelHandler,
    PredictionResult,
    RunInference,
)

from labse_common.cli import UsageError, add_log_level_option, add_output_option, usage_error
from labse_common.logs import setup_logging
from labse_common.stats import StageCounter, check_balanced, merge_counts, to_report, write_report
from labse_common.textio import strip_bom
from pipelines.inputs import require_columns
from pipelines.options import pipeline_options

log = logging.getLogger(__name__)

STATS = "stats"
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
        self, batch: Sequence[str], model: Any, inference_args: dict | None = None
    ) -> Iterable[PredictionResult]:
        vecs = model.encode(list(batch), batch_size=self._batch_size)
        return [PredictionResult(t, v) for t, v in zip(batch, vecs)]

    def batch_elements_kwargs(self) -> dict[str, int]:
        return {"min_batch_size": 1, "max_batch_size": self._max_batch_size}

    def get_metrics_namespace(self) -> str:
        return "labse_embed"


def _sha1(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:20]


class ToKeyed(beam.DoFn):
    """Record -> (id, text); empty or non-string text is dropped and counted."""

    def process(self, rec: Any) -> Iterator[Any]:
        counter = StageCounter()
        counter.add_in(UNIT)
        if isinstance(rec, dict):
            text = rec.get("text")
            meta = {k: rec.get(k) for k in ("id", "doc_id", "url_or_title")}
        else:
            text, meta = (strip_bom(rec) if isinstance(rec, str) else rec), {}  # a file's BOM
        if not isinstance(text, str) or not text.strip():
            counter.add_dropped(UNIT, "empty_text")
            yield beam.pvalue.TaggedOutput(STATS, counter.drain())
            return
        if meta.get("id") is not None:
            key = str(meta["id"])
        elif meta.get("doc_id") is not None:
            key = f"{meta['doc_id']}:{meta.get('url_or_title') or ''}:{_sha1(text)}"
        else:
            key = _sha1(text)
        counter.add_out(UNIT)
        yield beam.pvalue.TaggedOutput(STATS, counter.drain())
        yield key, (text, meta.get("url_or_title"))


class WriteShard(beam.DoFn):
    """One group of (id, (text, url), vector) -> shard_NNNNN.npy + .parquet; yields (name, rows)."""

    def __init__(self, output: str, dtype: str) -> None:
        self.output = output
        self.dtype = dtype

    def process(self, kv: tuple[int, Iterable[tuple[str, tuple, np.ndarray]]]) -> Iterator[Any]:
        shard, items = kv
        items = sorted(items, key=lambda it: it[0])
        name = f"shard_{shard:05d}"
        vecs = np.stack([it[2] for it in items]).astype(self.dtype)
        table = pa.table(
            {
                "id": [it[0] for it in items],
                "text": [it[1][0] for it in items],
                "url_or_title": [it[1][1] for it in items],
            }
        )
        with FileSystems.create(f"{self.output}/{name}.npy") as f:
            np.save(f, vecs)
        with FileSystems.create(f"{self.output}/{name}.parquet") as f:
            pq.write_table(table, f)
        yield name, len(items), int(vecs.shape[1])


def write_manifest(shards: list[tuple[str, int, int]], output: str, dtype: str) -> None:
    shards = sorted(shards)
    dims = {d for _, _, d in shards}
    if len(dims) > 1:
        raise ValueError(f"shards disagree on dimension: {dims}")
    manifest = {
        "dim": dims.pop() if dims else 0,
        "dtype": dtype,
        "shards": [{"name": n, "rows": r} for n, r, _ in shards],
    }
    with FileSystems.create(f"{output}/store.json") as f:
        f.write(json.dumps(manifest, indent=2).encode("utf-8"))


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
    parquet = all(i.endswith(".parquet") for i in inputs)
    if parquet:
        records = [
            p | f"Read{i}" >> beam.io.ReadFromParquet(path, columns=None)
            for i, path in enumerate(inputs)
        ]
    else:
        records = [
            p | f"Read{i}" >> beam.io.ReadFromText(path, strip_trailing_newlines=True)
            for i, path in enumerate(inputs)
        ]
    keyed = (
        tuple(records)
        | "Flatten" >> beam.Flatten()
        | "Key" >> beam.ParDo(ToKeyed()).with_outputs(STATS, main="keyed")
    )
    handler = KeyedModelHandler(LabseModelHandler(model_dir, batch_size, device))
    embedded = (
        keyed.keyed
        | "Texts" >> beam.Map(lambda kv: (kv, kv[1][0]))
        | "Embed" >> RunInference(handler)
        | "Unpack" >> beam.Map(lambda kr: (kr[0][0], kr[0][1], kr[1].inference))
    )
    shards = (
        embedded
        | "Shard" >> beam.Map(lambda it: (zlib.crc32(it[0].encode("utf-8")) % num_shards, it))
        | "Group" >> beam.GroupByKey()
        | "Write" >> beam.ParDo(WriteShard(output, dtype))
    )
    _ = (
        shards
        | "AllShards" >> beam.combiners.ToList()
        | "Manifest" >> beam.Map(write_manifest, output, dtype)
    )
    _ = (
        keyed[STATS]
        | "SumStats" >> beam.CombineGlobally(merge_counts)
        | "WriteStats" >> beam.Map(_write_stats, output)
    )


def _write_stats(counts: dict[str, int], output: str) -> None:
    report = to_report("embed", counts)
    problems = check_balanced(report)
    if problems:
        raise RuntimeError(f"unbalanced stats: {problems}")
    if "://" in output:
        with FileSystems.create(f"{output}/stats.json") as f:
            f.write(json.dumps(report, indent=2).encode("utf-8"))
    else:
        write_report(os.path.join(output, "stats.json"), report)


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
    matched = [m.path for pat in args.input for m in FileSystems.match([pat])[0].metadata_list]
    if not matched:
        log.error("no input matches %s", args.input)
        return 2
    try:
        require_columns(matched, ["text"])  # Parquet without `text`: not a store of dimension 0
    except UsageError as e:
        return usage_error(e, log)
    if "://" not in args.output:
        os.makedirs(args.output, exist_ok=True)
    options = pipeline_options(beam_args)
    with beam.Pipeline(options=options) as p:
        build_pipeline(
            p,
            sorted(matched),
            args.model,
            args.output,
            args.num_shards,
            args.dtype,
            args.batch_size,
            args.device,
        )
    log.info("embedding store written to %s", args.output)
    return 0


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
