"""Beam job: hard rules (and, given a trained CDS scorer, its score) over a large candidate set.

    python -m pipelines.filter_pairs --input 'mined/*/mined.parquet' --output DIR [--overwrite] \\
        [--src-lang de --trg-lang en] [--config demo] [--set max_ratio=2.5] [--write-dropped] \\
        [--cds-model DIR [--cds-threshold T]] [--same-as rules|cds-score] \\
        [beam options, e.g. --runner FlinkRunner]

Each input file (Parquet or TSV[.gz], the formats of ``filters.bitext.pair_io``) is read by one worker
in record batches, which are reshuffled over the workers; each worker loads the rules (the LID
model) and the CDS scorer once (``DoFn.setup``) and runs the same ``PairRulesRunner`` as
``python -m filters rules``, so the kept pairs and counts are the same. Outputs, through Beam
FileSystems (local, S3, GCS), into the claimed folder DIR (``labse_common.output_dir``: written
under ``DIR/_tmp-<job>/`` and committed when the job has succeeded; a second job on the same DIR
stops with exit 2):

- ``DIR/kept/part-FFFFF-BBBBB.parquet`` and ``.tsv.gz`` (one pair of files per input batch;
  ``cds_score`` added when ``--cds-model`` is given; with ``--cds-threshold`` pairs scoring
  below it are dropped as ``cds_below_threshold``);
- ``DIR/dropped/part-*.{parquet,tsv.gz}`` with ``step`` and ``reason`` (``--write-dropped``);
- ``DIR/stats.json``: files/lines/pairs in/out/dropped, per-step counts, and what each step kept
  by language pair and length bucket.

A damaged Parquet row group (a corrupt page, footer intact) loses its pairs, counted as dropped
``damaged_row_group``; the file's other row groups are still read. A file that cannot be read
at all (no footer, every row group damaged, a TSV whose lines mostly do not fit one layout) is
counted under ``files`` (dropped ``unreadable``) and the job goes on; a cut gzip keeps the pairs
before the cut (counted by the reader). ``stats.json`` names the files behind those counts:
``unreadable`` (path, problem) and ``damaged`` (path, pairs read, row groups and pairs lost,
whether the gzip was cut), so a partial input is traced to its file, not only to a total.

``--same-as rules`` or ``--same-as cds-score`` does on Beam what that local command does and
leaves its output folder (the stage runner's ``rules`` and ``cds_score`` stages on
``beam.runner``): the parts are assembled in input order (:mod:`pipelines.pair_assembly`) into
``kept.parquet`` + ``kept.tsv.gz`` (and ``dropped.*`` with ``--write-dropped``), or into
``scored.parquet``: every input column plus every score the model gives (``cds_score``,
``xent_clean`` and, bidirectional, ``cds_score_bwd``, ``xent_clean_bwd``, ``dual_xent``), no
rule applied, the ``cds`` section of ``--config`` read (device, threads, score_batch_size;
``--set`` then sets its keys); ``stats.json`` has the local command's fields. Its default
``--batch-rows`` is the local command's (5000, 4096), so the batches are the same.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import logging
import time
from collections.abc import Iterator, Sequence

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from filters.bitext.pair_io import LAYOUTS, iter_pair_batches
from filters.bitext.score_file import with_scores
from filters.steps import chain_report
from labse_common.cli import (
    add_config_options,
    add_log_level_option,
    add_output_option,
    add_overwrite_option,
    command_parser,
    exit_with,
    load_config,
    run_main,
)
from labse_common.config import to_dict
from labse_common.datafiles import read_json
from labse_common.errors import InputError, UsageError
from labse_common.filesystems import is_remote
from labse_common.logs import setup_logging
from labse_common.output_dir import claim_output
from labse_common.remote import check_paths, remote_paths
from labse_common.stats import StageCounter, check_balanced, merge_counts, to_report
from pipelines.options import new_pipeline, pipeline_options, run_pipeline
from pipelines.pair_assembly import assemble, local_model_dir, put_json
from pipelines.score_empty import no_rows, write_empty_scored
from pipelines.tagged import join_sinks, with_outputs

log = logging.getLogger(__name__)

STAGE = "pair_rules"
STATS, SUMMARY, UNREADABLE, DAMAGED = "stats", "summary", "unreadable", "damaged"
DEVICE = "device"
RULES, CDS_SCORE = "rules", "cds-score"  # --same-as: the local command reproduced
# Each local command's default batch (filters rules, filters cds-score), else the job's own.
BATCH_ROWS = {RULES: 5000, CDS_SCORE: 4096, None: 20000}


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
            # pair_io reads remote paths through Beam FileSystems, undecompressed: it detects
            # gzip itself and counts a truncated one.
            for bi, batch in enumerate(
                iter_pair_batches(
                    path, counter, self.batch_rows, self.layout, flag="--input", survive_damage=True
                )
            ):
                n += batch.num_rows
                yield (fi, bi), batch
            counter.add_out("files")
            damage = _damage(counter.counts)
            if damage:  # read, but not whole: the report names the file beside the counts
                yield beam.pvalue.TaggedOutput(DAMAGED, {"path": path, "pairs_read": n, **damage})
        except (InputError, OSError) as e:  # a bad file is counted, the job goes on
            # A warning, not an error: the job survives it; if no input was readable at all,
            # the job's one error line says so (naming the file and this problem).
            log.warning("%s (counted as unreadable; the job goes on)", e)
            counter.add_dropped("files", "unreadable")
            yield beam.pvalue.TaggedOutput(UNREADABLE, {"path": path, "problem": _problem(e)})
        yield beam.pvalue.TaggedOutput(STATS, counter.drain())


def _damage(counts: dict) -> dict:
    """What one file's read lost to damage (not the lines the reader rejects one by one)."""
    found = {
        "row_groups_lost": counts.get("files/event/damaged_row_groups", 0),
        "pairs_lost": counts.get("pairs/dropped/damaged_row_group", 0),
        "truncated_gzip": bool(counts.get("lines/event/truncated_gzip", 0)),
    }
    return found if found["row_groups_lost"] or found["truncated_gzip"] else {}


def _problem(e: Exception) -> str:
    if isinstance(e, InputError):
        return e.problem
    return getattr(e, "strerror", None) or str(e)


class FilterBatch(beam.DoFn):
    """Rules (+ CDS) on one batch; writes its kept (and dropped) part files; emits counts."""

    def __init__(
        self,
        cfg: dict,
        src_lang: str,
        trg_lang: str,
        output: str,
        cds_model: str | None,
        cds_threshold: float | None,
        tsv: bool = True,
    ) -> None:
        self.cfg, self.src_lang, self.trg_lang, self.output = cfg, src_lang, trg_lang, output
        self.cds_model, self.cds_threshold, self.tsv = cds_model, cds_threshold, tsv
        self.runner = None

    def setup(self) -> None:
        from filters.bitext.pair_rules import CdsStep, PairRulesRunner
        from labse_common.config import from_dict
        from labse_common.sections.pair_rules import PairRulesConfig

        extra = []
        if self.cds_model:
            # filters.bitext.cds (the CDS scorer); torch is imported on the workers only
            from filters.bitext.cds.score import CdsScorer

            model = local_model_dir(self.cds_model)
            extra.append(CdsStep(CdsScorer.load(model), self.cds_threshold))
        cfg = from_dict(PairRulesConfig, self.cfg, prefix=STAGE)
        self.runner = PairRulesRunner(cfg, self.src_lang, self.trg_lang, extra)

    def process(self, item: tuple[tuple[int, int], pa.RecordBatch]) -> Iterator:
        (fi, bi), batch = item
        runner = self.runner
        kept, dropped = runner.filter_batch(batch, want_dropped=bool(self.cfg.get("write_dropped")))
        name = f"part-{fi:05d}-{bi:05d}"
        _write_part(kept, f"{self.output}/kept/{name}", self.tsv)
        if dropped is not None:
            _write_part(dropped, f"{self.output}/dropped/{name}", self.tsv)
        yield beam.pvalue.TaggedOutput(STATS, runner.chain.drain())
        yield beam.pvalue.TaggedOutput(SUMMARY, dict(runner.summary.counts))
        runner.summary.counts.clear()


class ScoreBatch(beam.DoFn):
    """``filters cds-score`` on one batch: every column plus every score the model gives
    (``with_scores``, the local command's), written as a part file; emits counts and device."""

    def __init__(self, cfg: dict, model: str, output: str) -> None:
        self.cfg, self.model, self.output = cfg, model, output
        self.scorer = None

    def setup(self) -> None:
        from filters.bitext.cds.score import CdsScorer
        from labse_common.threads import size_threads

        size_threads(self.cfg["threads"])
        self.scorer = CdsScorer.load(
            local_model_dir(self.model),
            device=self.cfg["device"],
            batch_size=self.cfg["score_batch_size"],
            progress=False,
        )

    def process(self, item: tuple[tuple[int, int], pa.RecordBatch]) -> Iterator:
        (fi, bi), batch = item
        if batch.num_rows == 0:  # as score_pairs_file: nothing to score or count
            return
        before = self.scorer.truncated
        # Columns 0 and 1 are src and trg (pair_io's batches), as score_pairs_file reads them.
        src, trg = batch.column(0).to_pylist(), batch.column(1).to_pylist()
        scored = with_scores(batch, self.scorer.score_all(src, trg))
        _write_part(scored, f"{self.output}/kept/part-{fi:05d}-{bi:05d}", tsv=False)
        n = batch.num_rows
        truncated = self.scorer.truncated - before
        yield beam.pvalue.TaggedOutput(
            STATS, {"pairs/in": n, "pairs/out": n, "pairs/event/truncated_sides": truncated}
        )
        yield beam.pvalue.TaggedOutput(DEVICE, str(self.scorer.device))


def _write_part(batch: pa.RecordBatch, stem: str, tsv: bool = True) -> None:
    table = pa.Table.from_batches([batch])
    with FileSystems.create(f"{stem}.parquet") as f:
        pq.write_table(table, f)
    if not tsv:  # --same-as: the assembled file gets the TSV (pipelines.pair_assembly)
        return
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb") as gz:
        data = [c.to_pylist() for c in table.columns]
        text = "".join(
            "\t".join(
                "" if v is None else str(v).replace("\t", " ").replace("\n", " ") for v in row
            )
            + "\n"
            for row in zip(*data)
        )
        gz.write(text.encode("utf-8"))
    with FileSystems.create(f"{stem}.tsv.gz", compression_type=CompressionTypes.UNCOMPRESSED) as f:
        f.write(buf.getvalue())


def _write_stats(
    counts: dict,
    summary: dict,
    unreadable: list[dict],
    damaged: list[dict],
    output: str,
    step_order: list[str],
    extra: dict,
) -> dict:
    from filters.steps import KeepSummary

    report = chain_report(STAGE, {k: v for k, v in counts.items()}, step_order, **extra)
    report["unreadable"] = sorted(unreadable, key=lambda u: u["path"])
    report["damaged"] = sorted(damaged, key=lambda u: u["path"])
    s = KeepSummary(extra["config"]["length_buckets"])
    s.merge(summary)
    report["summary"] = s.to_dict(step_order)
    problems = check_balanced(report) + check_balanced({"counts": report["steps"]})
    if problems:
        raise RuntimeError(f"unbalanced stats: {problems}")
    with FileSystems.create(f"{output}/stats.json") as f:
        f.write(json.dumps(report, indent=2, ensure_ascii=False).encode("utf-8") + b"\n")
    return report


def build_pipeline(
    p: beam.Pipeline,
    inputs: Sequence[str],
    output: str,
    cfg: dict,
    src_lang: str,
    trg_lang: str,
    cds_model: str | None,
    cds_threshold: float | None,
    batch_rows: int,
    layout: str,
    same_as: str | None = None,
) -> None:
    # tagged.with_outputs and join_sinks: the DaskRunner runs the job too (pipelines/tagged.py).
    files = p | "Files" >> beam.Create(list(enumerate(inputs)))
    reader = ReadPairFile(batch_rows, layout)
    read = with_outputs(files, "Read", reader, STATS, UNREADABLE, DAMAGED, main="batches")
    spread = read.batches | "Spread" >> beam.Reshuffle()
    if same_as == CDS_SCORE:
        scorer = ScoreBatch(cfg, cds_model, output)
        scored = with_outputs(spread, "Score", scorer, STATS, DEVICE, main="none")
        counts = (
            (read[STATS], scored[STATS])
            | "FlattenStats" >> beam.Flatten()
            | "SumStats" >> beam.CombineGlobally(merge_counts)
        )
        written = counts | "WriteStats" >> beam.Map(
            _write_score_stats,
            beam.pvalue.AsList(scored[DEVICE]),
            beam.pvalue.AsList(read[UNREADABLE]),
            beam.pvalue.AsList(read[DAMAGED]),
            output,
        )
        join_sinks([written])
        return
    step_order = list(cfg["steps"]) + (["cds"] if cds_model else [])
    filt = FilterBatch(cfg, src_lang, trg_lang, output, cds_model, cds_threshold, same_as is None)
    filtered = with_outputs(spread, "Filter", filt, STATS, SUMMARY, main="none")
    counts = (
        (read[STATS], filtered[STATS])
        | "FlattenStats" >> beam.Flatten()
        | "SumStats" >> beam.CombineGlobally(merge_counts)
    )
    summary = filtered[SUMMARY] | "SumSummary" >> beam.CombineGlobally(merge_counts)
    extra = {
        "inputs": list(inputs),
        "config": cfg,
        "src_lang": src_lang,
        "trg_lang": trg_lang,
        "cds_model": cds_model,
        "cds_threshold": cds_threshold,
    }
    written = counts | "WriteStats" >> beam.Map(
        _write_stats,
        beam.pvalue.AsSingleton(summary),
        beam.pvalue.AsList(read[UNREADABLE]),
        beam.pvalue.AsList(read[DAMAGED]),
        output,
        step_order,
        extra,
    )
    join_sinks([written])


def _write_score_stats(
    counts: dict, devices: list[str], unreadable: list[dict], damaged: list[dict], output: str
) -> None:
    """The job's own counts; :func:`_finish_score` turns them into cds-score's stats.json."""
    report = to_report("cds_score", counts)
    report["devices"] = sorted(set(devices))
    report["unreadable"] = sorted(unreadable, key=lambda u: u["path"])
    report["damaged"] = sorted(damaged, key=lambda u: u["path"])
    put_json(f"{output}/stats.json", report)


def build_parser() -> argparse.ArgumentParser:
    ap = command_parser(
        "python -m pipelines.filter_pairs",
        "Apply the hard rules (and, given a trained CDS scorer, its score) to candidate pairs as a Beam job: the pairs and counts of 'python -m filters rules'.",
        "Inputs and --output may be local or s3:// / gs://. Any option not listed here is passed to Beam, e.g. --runner DaskRunner, --runner FlinkRunner, --direct_num_workers 4.",
        examples=[
            "python -m pipelines.filter_pairs --input 'mined/*/mined.parquet' --output rules/ --src-lang de --trg-lang en",
            "python -m pipelines.filter_pairs --input mined.parquet --output rules/ --cds-model cds_model/ --cds-threshold 0.1 --runner DaskRunner",
        ],
    )
    ap.add_argument(
        "--input",
        required=True,
        nargs="+",
        help="pair files/globs: Parquet with src/trg, mining TSV.gz, or TSV src<TAB>trg",
    )
    add_output_option(ap, "output folder (local or a Beam FileSystems URL)")
    add_overwrite_option(ap)
    ap.add_argument("--src-lang", default="", help="source language code (a src_lang column wins)")
    ap.add_argument("--trg-lang", default="", help="target language code (a trg_lang column wins)")
    add_config_options(ap, STAGE, "max_ratio=2.5")
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
    ap.add_argument("--layout", choices=LAYOUTS, default="auto", help="TSV layout")
    ap.add_argument(
        "--same-as",
        choices=[RULES, CDS_SCORE],
        help="do what python -m filters rules (or filters cds-score: score only, no rule, the "
        "cds section of --config) does and write its output folder: kept.parquet, kept.tsv.gz, "
        "dropped.* (or scored.parquet) and stats.json, row for row as that command",
    )
    ap.add_argument(
        "--batch-rows",
        type=int,
        help="pairs per batch (default 20000; with --same-as the local command's: 5000, 4096)",
    )
    ap.add_argument(
        "--allow-empty",
        action="store_true",
        help="with --same-as cds-score: an input of Parquet files with no row gives an empty "
        "scored.parquet (its columns plus the score columns), as filters cds-score --allow-empty",
    )
    add_log_level_option(ap)
    return ap


def _check(args: argparse.Namespace, cfg_obj) -> None:
    if args.batch_rows < 1:
        raise UsageError(f"--batch-rows must be >= 1 (got {args.batch_rows})")
    if args.cds_threshold is not None and not args.cds_model:
        raise UsageError("--cds-threshold needs --cds-model")
    if args.allow_empty and args.same_as != CDS_SCORE:
        raise UsageError("--allow-empty applies to --same-as cds-score only")
    if args.same_as == CDS_SCORE:
        if not args.cds_model:
            raise UsageError("--same-as cds-score needs --cds-model")
        for flag, given in (
            ("--cds-threshold", args.cds_threshold is not None),
            ("--write-dropped", args.write_dropped),
            ("--lid-model", args.lid_model),
        ):
            if given:
                raise UsageError(f"{flag}: --same-as cds-score applies no rule and drops no pair")
    if args.cds_model:
        try:
            from filters.bitext.cds.score import check_model_dir
        except ImportError as e:
            raise UsageError(f"--cds-model needs filters.bitext.cds (not available: {e})") from None
        # Its files, once, here: a wrong folder was a long traceback from every worker.
        check_model_dir(local_model_dir(args.cds_model), "--cds-model")
    if args.same_as == CDS_SCORE:
        return
    if {"script", "lang"} & set(cfg_obj.steps) and not (args.src_lang and args.trg_lang):
        log.warning(
            "no --src-lang/--trg-lang: the script and lang rules use the input's "
            "src_lang/trg_lang columns and skip pairs without them"
        )


def _config(args: argparse.Namespace):
    if args.same_as == CDS_SCORE:  # what filters cds-score reads: device, threads, batch size
        return load_config("cds", args)
    return load_config(
        STAGE, args, {"write_dropped": args.write_dropped, "lid_model": args.lid_model}
    )


def run(argv: Sequence[str] | None = None) -> int:
    args, beam_args = build_parser().parse_known_args(argv)
    setup_logging(args.log_level)
    if args.batch_rows is None:
        args.batch_rows = BATCH_ROWS[args.same_as]

    def body() -> int:
        t0 = time.perf_counter()
        cfg_obj = _config(args)
        opts = pipeline_options(beam_args)  # first: it gives FileSystems the S3/GCS options
        # With the job's own S3 options: missing credentials/endpoint/bucket is one line now.
        check_paths(remote_paths([*args.input, args.output, args.cds_model]), opts)
        _check(args, cfg_obj)
        inputs = sorted(
            {m.path for pat in args.input for m in FileSystems.match([pat])[0].metadata_list}
        )
        if not inputs:
            raise InputError(" ".join(args.input), "no input matches", "--input")
        cfg = to_dict(cfg_obj)
        with claim_output(args.output, args.overwrite) as out:
            tmp = out.tmp.rstrip("/")
            with new_pipeline(opts) as p:
                build_pipeline(
                    p,
                    inputs,
                    tmp,
                    cfg,
                    args.src_lang,
                    args.trg_lang,
                    args.cds_model,
                    args.cds_threshold,
                    args.batch_rows,
                    args.layout,
                    args.same_as,
                )
                run_pipeline(p)
            report = _read_stats(f"{tmp}/stats.json")
            c = report["counts"].get("pairs", {"in": 0, "out": 0})
            # --allow-empty (with --same-as cds-score): a pair the rules kept nothing of
            if not c["in"] and args.allow_empty and not report.get(UNREADABLE) and no_rows(inputs):
                write_empty_scored(local_model_dir(args.cds_model), tmp, inputs[0], cfg, report)
            elif not c["in"]:
                raise InputError(" ".join(inputs), _nothing_read(report), "--input")
            if args.same_as:
                finish = _finish_rules if args.same_as == RULES else _finish_score
                finish(args, tmp, report, cfg, t0)
        print(f"filter_pairs: {c['in']} pairs in, {c['out']} kept -> {args.output}")
        return 0

    # Remote paths are checked in the body, once the Beam options (S3 endpoint, keys) are parsed.
    return run_main(body, log, args=args, check_remote=False)


def _local_fields(report: dict, *keys: str) -> dict:
    """The local command's stats.json fields; the files a partial read lost, when there are."""
    out = {k: report[k] for k in keys}
    return out | {k: report[k] for k in (UNREADABLE, DAMAGED) if report.get(k)}


def _finish_rules(args: argparse.Namespace, tmp: str, report: dict, cfg: dict, t0: float) -> None:
    """``filters rules``' folder: kept.* (dropped.*) in input order and its stats.json."""
    files = []
    for stem in ("kept", "dropped") if cfg["write_dropped"] else ("kept",):
        assemble(tmp, stem, stem, tsv=True)
        files += [f"{stem}.parquet", f"{stem}.tsv.gz"]
    stats = _local_fields(report, "stage", "counts", "steps", "summary")
    stats.update(
        input=" ".join(args.input),
        outputs=files,
        config=cfg,
        src_lang=args.src_lang,
        trg_lang=args.trg_lang,
        seconds=round(time.perf_counter() - t0, 3),
    )
    put_json(f"{tmp}/stats.json", stats)


def _finish_score(args: argparse.Namespace, tmp: str, report: dict, cfg: dict, t0: float) -> None:
    """``filters cds-score``' folder: scored.parquet in input order and its stats.json (the
    reader's line counts named ``pairs_lines``, as that command names them)."""
    assemble(tmp, "kept", "scored", tsv=False)
    counts = {("pairs_lines" if u == "lines" else u): c for u, c in report["counts"].items()}
    counts["pairs"].setdefault("events", {}).setdefault("truncated_sides", 0)
    meta = read_json(f"{local_model_dir(args.cds_model)}/cds.json", "--cds-model")
    stats = _local_fields(report, "stage") | {"counts": dict(sorted(counts.items()))}
    stats.update(
        pairs_file=" ".join(args.input),
        labelled_file=None,
        model=args.cds_model,
        outputs=["scored.parquet"],
        bidirectional="bwd" in meta.get("directions", []),
        device=",".join(report["devices"]),
        seconds=round(time.perf_counter() - t0, 3),
    )
    put_json(f"{tmp}/stats.json", stats)


def _nothing_read(report: dict) -> str:
    """Why no pair was read, in one line (the per-file warnings gave the details)."""
    bad = report.get("unreadable") or []
    n = report["counts"].get("files", {}).get("in", 0)
    if not bad:
        return "no pair in the input"
    if n == 1:
        return f"no readable input ({bad[0]['problem']})"
    return (
        f"no readable input ({len(bad)} of {n} files unreadable, e.g. {bad[0]['path']}: "
        f"{bad[0]['problem']})"
    )


def _read_stats(path: str) -> dict:
    if is_remote(path):
        with FileSystems.open(path) as f:
            return json.loads(f.read())
    return read_json(path, "stats.json")


if __name__ == "__main__":
    exit_with(run)
