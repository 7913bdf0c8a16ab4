"""Beam job: hard rules (and, given a trained CDS scorer, its score) over a large candidate set.

    python -m pipelines.filter_pairs --input 'mined/*/mined.parquet' --output DIR \\
        [--src-lang de --trg-lang en] [--config demo] [--set max_ratio=2.5] [--write-dropped] \\
        [--cds-model DIR [--cds-threshold T]] [beam options, e.g. --runner FlinkRunner]

Each input file (Parquet or TSV[.gz], the formats of ``filters.bitext.pair_io``) is read by one worker
in record batches, which are reshuffled over the workers; each worker loads the rules (the LID
model) and the CDS scorer once (``DoFn.setup``) and runs the same ``PairRulesRunner`` as
``python -m filters rules``, so the kept pairs and counts are the same. Outputs, through Beam
FileSystems (local, S3, GCS):

- ``DIR/kept/part-FFFFF-BBBBB.parquet`` and ``.tsv.gz`` (one pair of files per input batch;
  ``cds_score`` added when ``--cds-model`` is given; with ``--cds-threshold`` pairs scoring
  below it are dropped as ``cds_below_threshold``);
- ``DIR/dropped/part-*.{parquet,tsv.gz}`` with ``step`` and ``reason`` (``--write-dropped``);
- ``DIR/stats.json``: lines/pairs in/out/dropped, per-step counts, and what each step kept by
  language pair and length bucket.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import logging
import sys
from collections.abc import Iterator, Sequence

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from filters.bitext.pair_io import PairFileError, iter_pair_batches
from filters.steps import chain_report
from labse_common.config import ConfigError, load, to_dict
from labse_common.logs import setup_logging
from labse_common.stats import StageCounter, check_balanced, merge_counts
from pipelines.options import UsageError, pipeline_options

log = logging.getLogger(__name__)

STAGE = "pair_rules"
STATS, SUMMARY = "stats", "summary"


def _open_raw(path: str, mode: str = "rb"):
    # pair_io detects gzip itself (and counts a truncated one), so Beam must not decompress.
    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


class ReadPairFile(beam.DoFn):
    """(file index, path) -> ((file index, batch index), RecordBatch); reader counts as stats."""

    def __init__(self, batch_rows: int, layout: str) -> None:
        self.batch_rows, self.layout = batch_rows, layout

    def process(self, item: tuple[int, str]) -> Iterator:
        fi, path = item
        counter = StageCounter()
        counter.add_in("files")
        try:
            n = 0
            for bi, batch in enumerate(
                iter_pair_batches(path, counter, self.batch_rows, self.layout, _open_raw)
            ):
                n += batch.num_rows
                yield (fi, bi), batch
            counter.add_out("files")
        except (PairFileError, OSError) as e:  # a bad file is counted, the job goes on
            log.error("%s: %s", path, e)
            counter.add_dropped("files", "unreadable")
        yield beam.pvalue.TaggedOutput(STATS, counter.drain())


class FilterBatch(beam.DoFn):
    """Rules (+ CDS) on one batch; writes its kept (and dropped) part files; emits counts."""

    def __init__(self, cfg: dict, src_lang: str, trg_lang: str, output: str, cds_model: str | None,
                 cds_threshold: float | None) -> None:  # fmt: skip
        self.cfg, self.src_lang, self.trg_lang, self.output = cfg, src_lang, trg_lang, output
        self.cds_model, self.cds_threshold = cds_model, cds_threshold
        self.runner = None

    def setup(self) -> None:
        from filters.bitext.pair_rules import CdsStep, PairRulesRunner
        from labse_common.config import from_dict
        from labse_common.sections.pair_rules import PairRulesConfig

        extra = []
        if self.cds_model:
            # filters.bitext.cds (the CDS scorer); torch is imported on the workers only
            from filters.bitext.cds.score import CdsScorer

            extra.append(CdsStep(CdsScorer.load(self.cds_model), self.cds_threshold))
        cfg = from_dict(PairRulesConfig, self.cfg, prefix=STAGE)
        self.runner = PairRulesRunner(cfg, self.src_lang, self.trg_lang, extra)

    def process(self, item: tuple[tuple[int, int], pa.RecordBatch]) -> Iterator:
        (fi, bi), batch = item
        runner = self.runner
        kept, dropped = runner.filter_batch(batch, want_dropped=bool(self.cfg.get("write_dropped")))
        name = f"part-{fi:05d}-{bi:05d}"
        _write_part(kept, f"{self.output}/kept/{name}")
        if dropped is not None:
            _write_part(dropped, f"{self.output}/dropped/{name}")
        yield beam.pvalue.TaggedOutput(STATS, runner.chain.drain())
        yield beam.pvalue.TaggedOutput(SUMMARY, dict(runner.summary.counts))
        runner.summary.counts.clear()


def _write_part(batch: pa.RecordBatch, stem: str) -> None:
    table = pa.Table.from_batches([batch])
    with FileSystems.create(f"{stem}.parquet") as f:
        pq.write_table(table, f)
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb") as gz:
        data = [c.to_pylist() for c in table.columns]
        text = "".join("\t".join("" if v is None else str(v).replace("\t", " ").replace("\n", " ")
                                 for v in row) + "\n" for row in zip(*data))  # fmt: skip
        gz.write(text.encode("utf-8"))
    with FileSystems.create(f"{stem}.tsv.gz", compression_type=CompressionTypes.UNCOMPRESSED) as f:
        f.write(buf.getvalue())


def _write_stats(
    counts: dict, summary: dict, output: str, step_order: list[str], extra: dict
) -> dict:
    from filters.steps import KeepSummary

    report = chain_report(STAGE, {k: v for k, v in counts.items()}, step_order, **extra)
    s = KeepSummary(extra["config"]["length_buckets"])
    s.merge(summary)
    report["summary"] = s.to_dict(step_order)
    problems = check_balanced(report) + check_balanced({"counts": report["steps"]})
    if problems:
        raise RuntimeError(f"unbalanced stats: {problems}")
    with FileSystems.create(f"{output}/stats.json") as f:
        f.write(json.dumps(report, indent=2, ensure_ascii=False).encode("utf-8") + b"\n")
    return report


def build_pipeline(p: beam.Pipeline, inputs: Sequence[str], output: str, cfg: dict, src_lang: str,
                   trg_lang: str, cds_model: str | None, cds_threshold: float | None,
                   batch_rows: int, layout: str) -> None:  # fmt: skip
    step_order = list(cfg["steps"]) + (["cds"] if cds_model else [])
    read = (
        p
        | "Files" >> beam.Create(list(enumerate(inputs)))
        | "Read" >> beam.ParDo(ReadPairFile(batch_rows, layout)).with_outputs(STATS, main="batches")
    )
    filtered = (
        read.batches
        | "Spread" >> beam.Reshuffle()
        | "Filter"
        >> beam.ParDo(
            FilterBatch(cfg, src_lang, trg_lang, output, cds_model, cds_threshold)
        ).with_outputs(STATS, SUMMARY)
    )
    counts = (
        (read[STATS], filtered[STATS])
        | "FlattenStats" >> beam.Flatten()
        | "SumStats" >> beam.CombineGlobally(merge_counts)
    )
    summary = filtered[SUMMARY] | "SumSummary" >> beam.CombineGlobally(merge_counts)
    extra = {"inputs": list(inputs), "config": cfg, "src_lang": src_lang, "trg_lang": trg_lang,
             "cds_model": cds_model, "cds_threshold": cds_threshold}  # fmt: skip
    _ = counts | "WriteStats" >> beam.Map(
        _write_stats, beam.pvalue.AsSingleton(summary), output, step_order, extra
    )


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m pipelines.filter_pairs",
        description="Apply the pair_rules hard rules (and optionally a trained CDS scorer) to "
        "candidate pairs with Beam. Any option not listed here is passed to Beam, e.g. --runner "
        "FlinkRunner, --direct_num_workers 4.",
    )
    ap.add_argument("--input", required=True, nargs="+",
                    help="pair files/globs: Parquet with src/trg, mining TSV.gz, or TSV src<TAB>trg")  # fmt: skip
    ap.add_argument(
        "--output", required=True, help="output directory (local or a Beam FileSystems URL)"
    )
    ap.add_argument("--src-lang", default="", help="source language code (a src_lang column wins)")
    ap.add_argument("--trg-lang", default="", help="target language code (a trg_lang column wins)")
    ap.add_argument("--config", default="demo", help="preset (demo, paper) or YAML file")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="pair_rules override (repeatable)",
    )
    ap.add_argument(
        "--write-dropped",
        action="store_true",
        default=None,
        help="write the dropped pairs with step and reason",
    )
    ap.add_argument(
        "--lid-model", help="fastText LID model path on the workers (default lid.176.ftz)"
    )
    ap.add_argument(
        "--cds-model", help="trained CDS scorer directory (filters cds-train): adds cds_score"
    )
    ap.add_argument(
        "--cds-threshold", type=float, help="with --cds-model: drop pairs scoring below this"
    )
    ap.add_argument(
        "--layout", choices=["auto", "src-trg", "scored"], default="auto", help="TSV layout"
    )
    ap.add_argument("--batch-rows", type=int, default=20000, help="pairs per batch (default 20000)")
    ap.add_argument("--log-level", default=None, help="logging level")
    return ap


def run(argv: Sequence[str] | None = None) -> int:
    args, beam_args = build_parser().parse_known_args(argv)
    setup_logging(args.log_level)
    try:
        cfg_obj = load(
            STAGE,
            args.config,
            args.set,
            {"write_dropped": args.write_dropped, "lid_model": args.lid_model},
        )
        if args.batch_rows < 1:
            raise ValueError("--batch-rows must be >= 1")
        if args.cds_threshold is not None and not args.cds_model:
            raise ValueError("--cds-threshold needs --cds-model")
        if args.cds_model:
            if not FileSystems.exists(args.cds_model):
                raise FileNotFoundError(f"CDS model directory not found: {args.cds_model}")
            try:
                import filters.bitext.cds.score  # noqa: F401
            except ImportError as e:
                raise ValueError(f"--cds-model needs filters.bitext.cds (not available: {e})") from None
        if {"script", "lang"} & set(cfg_obj.steps) and not (args.src_lang and args.trg_lang):
            log.warning("no --src-lang/--trg-lang: the script and lang rules use the input's "
                        "src_lang/trg_lang columns and skip pairs without them")  # fmt: skip
        opts = pipeline_options(beam_args)  # first: it gives FileSystems the S3/GCS options
        inputs = sorted(
            {m.path for pat in args.input for m in FileSystems.match([pat])[0].metadata_list}
        )
        if not inputs:
            raise FileNotFoundError(f"no input matches {' '.join(args.input)}")
    except (ConfigError, ValueError, FileNotFoundError, UsageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    cfg = to_dict(cfg_obj)
    with beam.Pipeline(options=opts) as p:
        build_pipeline(p, inputs, args.output.rstrip("/"), cfg, args.src_lang, args.trg_lang,
                       args.cds_model, args.cds_threshold, args.batch_rows, args.layout)  # fmt: skip
    with FileSystems.open(f"{args.output.rstrip('/')}/stats.json") as f:
        report = json.loads(f.read())
    c = report["counts"].get("pairs", {"in": 0, "out": 0})
    if not c["in"]:
        print(f"error: no readable pair in {' '.join(inputs)}", file=sys.stderr)
        return 2
    print(f"filter_pairs: {c['in']} pairs in, {c['out']} kept -> {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(run())
