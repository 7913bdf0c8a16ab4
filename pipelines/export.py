"""Beam job: the final bitext, ``python -m filters export``'s folder on any Beam runner.

    python -m pipelines.export --mined MINE_DIR [--combined DIR | --filtered DIR] [--rules DIR] \\
        [--min-margin 1.05] --output DIR [--overwrite] [beam options, e.g. --runner DaskRunner]

The same folder as ``filters export`` from the same inputs, row for row and file for file
(:mod:`filters.bitext.export` makes every decision; this module only distributes it):

* the driver lists ``MINE_DIR/<pair>/mined.parquet``, checks each file's footer and columns, and
  reads what the filters decided (``--combined``/``--filtered``/``--rules``), once; that verdict
  reaches the workers as a side input;
* one element per mined pair file: a worker reads it and splits its pairs into kept and
  rejected (with the reason), counting them;
* one final step puts the files' pairs back in the local export's order (by language pair, then
  the file's own order) and writes ``bitext.parquet``, ``bitext.tsv.gz``, the Moses files,
  ``hf/``, ``rejected.parquet`` and ``stats.json`` through Beam's FileSystems, so ``--output``
  and every input may be ``s3://`` or ``gs://`` (the stage runner passes its run folder's URLs).

With ``--pair SRC-TRG`` the job reads only that pair's mined file and the filters' verdict about
it, and writes its part (``kept.parquet``, ``rejected.parquet``, ``stats.json``: what ``filters
export --pair`` writes), which ``python -m pipelines.pair_assembly bitext`` assembles with the
other pairs' into the folder above (the stage runner's bitext stage: each pair a unit a killed
run keeps).

The output is claimed and committed as every command's (:mod:`labse_common.output_dir`). A
damaged mined file found by a worker is one line naming it and exit status 2, as locally.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
from collections.abc import Iterator, Sequence

import apache_beam as beam

from filters.bitext.cli_export import add_input_options
from filters.bitext.export import (
    bitext_report,
    check_mined_file,
    mined_files,
    split_file,
    write_bitext,
)
from filters.bitext.export_parts import check_pair, pair_file, part_report, write_part
from filters.bitext.export_verdict import Inputs, Verdict, load_verdict
from labse_common import filesystems
from labse_common.cli import (
    add_log_level_option,
    add_output_option,
    add_overwrite_option,
    command_parser,
    exit_with,
    run_main,
)
from labse_common.errors import UsageError
from labse_common.logs import setup_logging
from labse_common.output_dir import claim_output, upload_tree
from labse_common.stats import merge_counts
from pipelines.options import check_remote, new_pipeline, pipeline_options, run_pipeline

log = logging.getLogger(__name__)

# Written instead of the bitext when a worker found an unusable mined file (the driver reports
# it as the local export would, and the claim is rolled back).
PROBLEMS_FILE = "_problems.json"


class SplitFile(beam.DoFn):
    """(file index, path) -> (file index, kept rows, rejected rows, counts, problem): the
    problem (None, or why the file was unusable) travels with the file's part in one output:
    on the DaskRunner a side input made of a tagged output also received the main output."""

    def __init__(self, min_margin: float) -> None:
        self.min_margin = min_margin

    def process(self, item: tuple[int, str], verdict: Verdict) -> Iterator:
        index, path = item
        try:
            kept, rejected, counts = split_file(path, verdict, self.min_margin)
        except UsageError as e:  # damage past the footer: the driver says it in one line
            yield index, [], [], {}, str(e)
            return
        yield index, kept, rejected, counts, None


Part = tuple[int, list, list, dict, "str | None"]


def _problems(parts: list[Part], output: str) -> bool:
    """When a file was unusable, only what went wrong is written."""
    problems = [part[4] for part in parts if part[4] is not None]
    if problems:
        with filesystems.create(f"{output}/{PROBLEMS_FILE}") as f:
            f.write(json.dumps(problems).encode("utf-8"))
    return bool(problems)


def write_folder(
    parts: list[Part], summary: dict, inputs: Inputs, output: str, pair: str | None = None
) -> None:
    """Every file's pairs in the local export's order, written into ``output`` (local or a
    URL) through a local staging folder; with ``pair``, that pair's part (``write_part``)."""
    parts = sorted(parts, key=lambda part: part[0])
    if _problems(parts, output):
        return
    if pair is not None:
        [(_, kept, rejected, counts, _)] = parts
        report = part_report(pair, counts, kept, rejected, summary, inputs)
        with tempfile.TemporaryDirectory(prefix="labse-export-") as local:
            write_part(local, kept, rejected, report)
            upload_tree(local, output)
        return
    kept: list[dict] = []
    rejected: list[dict] = []
    for _, k, r, _, _ in parts:
        kept += k
        rejected += r
    counts = merge_counts(part[3] for part in parts)
    report, by_pair = bitext_report(counts, kept, summary, inputs)
    # The writers (pyarrow, gzip, the dataset card) take local paths: staged, then copied.
    with tempfile.TemporaryDirectory(prefix="labse-export-") as local:
        write_bitext(local, kept, rejected, by_pair, report, summary)
        upload_tree(local, output)


def build_pipeline(
    p: beam.Pipeline,
    files: Sequence[str],
    verdict: Verdict,
    inputs: Inputs,
    output: str,
    pair: str | None = None,
) -> None:
    side = beam.pvalue.AsSingleton(p | "Verdict" >> beam.Create([verdict]))
    _ = (
        p
        | "Files" >> beam.Create(list(enumerate(files)))
        | "Spread" >> beam.Reshuffle()
        | "Split" >> beam.ParDo(SplitFile(inputs.min_margin), side)
        | "Gather" >> beam.combiners.ToList()
        | "Write" >> beam.Map(write_folder, verdict.summary, inputs, output, pair)
    )


def build_parser() -> argparse.ArgumentParser:
    p = command_parser(
        "python -m pipelines.export",
        "Write the final bitext as a Beam job: the folder 'python -m filters export' writes (bitext.parquet, bitext.tsv.gz, Moses files, hf/, rejected.parquet, stats.json), each mined pair file decided by a worker.",
        "Inputs and --output may be local or s3:// / gs://. Any option not listed here is passed to Beam, e.g. --runner DaskRunner, --runner FlinkRunner, --direct_num_workers 4.",
        examples=[
            "python -m pipelines.export --mined mined/ --combined combined/ --output bitext/",
            "python -m pipelines.export --mined s3://bucket/run/mine --combined s3://bucket/run/combine --output s3://bucket/run/bitext --runner DaskRunner",
        ],
    )
    add_input_options(p)
    add_output_option(p, "folder to write (local or a Beam FileSystems URL)")
    add_overwrite_option(p)
    add_log_level_option(p)
    return p


def _outcome(tmp: str) -> dict:
    """The job's stats.json, or the first problem a worker met as one InputError-like line."""
    problems = f"{tmp}/{PROBLEMS_FILE}"
    if filesystems.exists(problems):
        with filesystems.open_read(problems) as f:
            raise UsageError(json.loads(f.read())[0])
    with filesystems.open_read(f"{tmp}/stats.json") as f:
        return json.loads(f.read())


def main(argv: Sequence[str] | None = None) -> int:
    args, beam_args = build_parser().parse_known_args(argv)
    setup_logging(args.log_level)

    def body() -> int:
        opts = pipeline_options(beam_args)  # first: it gives FileSystems the S3/GCS options
        check_remote([args.mined, args.filtered, args.combined, args.rules, args.output], opts)
        inputs = Inputs.of(args.filtered, args.combined, args.rules, args.min_margin)
        pair = None if args.pair is None else check_pair(args.pair)
        files = mined_files(args.mined) if pair is None else [pair_file(args.mined, pair)]
        for f in files:  # a truncated file or a missing column: one line now, not in a worker
            check_mined_file(f)
        verdict = load_verdict(inputs, pair)
        with claim_output(args.output, args.overwrite) as out:
            tmp = out.tmp.rstrip("/")
            with new_pipeline(opts) as p:
                build_pipeline(p, files, verdict, inputs, tmp, pair)
                run_pipeline(p)
            report = _outcome(tmp)
        c = report["counts"].get("pairs", {"in": 0, "out": 0})
        log.info(
            "export: %d of %d pairs kept (%s) -> %s", c["out"], c["in"], inputs.source, args.output
        )
        if report.get("warning"):
            log.warning("export: %s", report["warning"])
        return 0

    # Remote paths are checked in the body, once the Beam options (S3 endpoint, keys) are parsed.
    return run_main(body, log, args=args, check_remote=False)


if __name__ == "__main__":
    exit_with(main)
