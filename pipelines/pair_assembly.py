"""The local commands' single files from a Beam job's part files, for the stage runner's engine.

``python -m pipelines.filter_pairs --same-as rules|cds-score`` writes its pairs as part files
(``DIR/kept/part-FFFFF-BBBBB.parquet``, one per input batch, in any order); the stages after
``rules`` and ``cds_score`` read what ``python -m filters rules`` and ``filters cds-score``
write. This module turns the one into the other, in the job's claimed folder before it is
committed: the parts in input order (file, then batch: the order the local command writes them)
into one ``kept.parquet`` + ``kept.tsv.gz`` (``filters.bitext.pair_io.PairWriter``, the local
command's writer) or ``scored.parquet``, and ``stats.json`` with the local command's fields.
Everything goes through Beam's FileSystems, so the folder may be on object storage.

``python -m pipelines.pair_assembly concat FILE... --output FILE [beam options]`` is
``pipelines.e2e_tasks concat`` for files that may be object-store URLs (the runner's
``rules/kept_all.parquet`` on a remote run folder): the same table, the same order.

``python -m pipelines.pair_assembly scored DIR --pairs PAIR... [beam options]`` is the runner's
``cds_score`` stage's last step: the pairs' ``DIR/<pair>/scored.parquet`` (one ``filters
cds-score`` per pair, each a unit a killed run keeps) as ``DIR/scored.parquet``, in the order
given (the rules' ``kept_all.parquet`` order), and ``DIR/stats.json``, the pairs' counts summed
with ``shards``. DIR may be an object-store URL.

``python -m pipelines.pair_assembly bitext DIR --pairs PAIR... [beam options]`` is the runner's
``bitext`` stage's last step: the parts ``DIR/_parts/<pair>`` (one ``filters export --pair`` or
``pipelines.export --pair`` per pair, each a unit a killed run keeps) as the folder the whole
export writes (``filters.bitext.export_parts.assemble_parts``); the parts are removed. DIR may be an
object-store URL.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from labse_common import filesystems
from labse_common.cli import (
    add_log_level_option,
    add_overwrite_option,
    command_parser,
    exit_with,
    run_main,
    sub_command,
)
from labse_common.datafiles import read_parquet
from labse_common.errors import InputError
from labse_common.filesystems import is_remote, join
from labse_common.logs import setup_logging
from labse_common.output_dir import claim_output
from labse_common.stats import StageCounter, sum_reports

log = logging.getLogger(__name__)

_PART = re.compile(r"part-(\d+)-(\d+)\.parquet$")


def part_files(folder: str) -> list[str]:
    """The Parquet parts under ``folder`` in input order (file index, then batch index; the
    names' zero padding is not relied on)."""
    found = [p for p in filesystems.match(join(folder, "part-*.parquet")) if _PART.search(p)]
    return sorted(found, key=lambda p: tuple(int(g) for g in _PART.search(p).groups()))


def _batches(path: str):
    return read_parquet(path, flag="--output").to_batches()


def assemble(folder: str, part_dir: str, stem: str, tsv: bool) -> int:
    """``folder/part_dir/part-*.parquet`` as ``folder/<stem>.parquet`` (and ``<stem>.tsv.gz``
    when ``tsv``, as ``filters rules`` writes it); the parts are removed. Returns the rows."""
    from filters.bitext.pair_io import PairWriter

    parts = part_files(join(folder, part_dir))
    local = folder if not is_remote(folder) else tempfile.mkdtemp(prefix="labse-assemble-")
    rows = 0
    try:
        if tsv:
            w = PairWriter(local, stem)
            for p in parts:
                for b in _batches(p):
                    w.write(b)
            w.close()
            rows = w.rows
        else:  # filters cds-score: one ParquetWriter with the first scored batch's schema
            writer = None
            for p in parts:
                for b in _batches(p):
                    writer = writer or pq.ParquetWriter(
                        os.path.join(local, f"{stem}.parquet"), b.schema
                    )
                    writer.write_batch(b)
                    rows += b.num_rows
            if writer is not None:
                writer.close()
        if local != folder:
            names = [f"{stem}.parquet"] + ([f"{stem}.tsv.gz"] if tsv else [])
            for name in names:
                with open(os.path.join(local, name), "rb") as src:
                    with filesystems.create(join(folder, name)) as dst:
                        shutil.copyfileobj(src, dst, 8 << 20)
    finally:
        if local != folder:
            shutil.rmtree(local, ignore_errors=True)
    _remove_parts(join(folder, part_dir))
    return rows


def _remove_parts(part_dir: str) -> None:
    if is_remote(part_dir):
        filesystems.delete(filesystems.match(join(part_dir, "**")))
    else:
        shutil.rmtree(part_dir, ignore_errors=True)


def put_json(path: str, report: dict) -> None:
    """``stats.json`` as the local commands write it (``labse_common.stats.write_report``)."""
    with filesystems.create(path) as f:
        f.write(json.dumps(report, indent=2, ensure_ascii=False).encode("utf-8") + b"\n")


_MODELS: dict[str, str] = {}


def local_model_dir(path: str, flag: str = "--cds-model") -> str:
    """A model folder on local disk: ``path`` itself, or for an object-store URL a copy
    downloaded once per process (the CDS scorer and its tokenizer load with local file APIs)."""
    if not is_remote(path):
        return path
    if path not in _MODELS:
        base = path.rstrip("/")
        files = filesystems.match(base + "/**")
        if not files:
            raise InputError(path, "not found (a folder written by filters cds-train)", flag)
        dest = tempfile.mkdtemp(prefix="labse-model-")
        for f in files:
            target = os.path.join(dest, *f[len(base) + 1 :].split("/"))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with filesystems.open_read(f) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst, 8 << 20)
        _MODELS[path] = dest
    return _MODELS[path]


def concat(inputs: Sequence[str], output: str, overwrite: bool = False) -> dict:
    """Several pair Parquet files as one, in the order given (``e2e_tasks concat``'s table)."""
    counter = StageCounter()
    tables = []
    for f in inputs:
        tables.append(read_parquet(f, flag="inputs"))
        counter.add_in("pairs", tables[-1].num_rows)
        counter.add_out("pairs", tables[-1].num_rows)
    table = pa.concat_tables(tables, promote_options="default")
    if is_remote(output):  # one object: it appears whole when its upload completes
        with filesystems.create(output) as f:
            pq.write_table(table, f)
    else:
        with claim_output(output, overwrite, files=("",)) as claimed:
            pq.write_table(table, claimed.path)
    return counter.to_report("concat")


def _read_report(path: str) -> dict:
    try:
        with filesystems.open_read(path) as f:
            return json.loads(f.read())
    except (OSError, ValueError) as e:
        raise InputError(path, f"no readable stats.json ({e})", "DIR") from None


def _schema(path: str) -> pa.Schema:
    with filesystems.open_read(path) as f:
        return pq.read_schema(f)


def _write_table(path: str, files: Sequence[str]) -> int:
    """The Parquet ``files`` as one at ``path``, in the order given: streamed batch by batch
    when they share a schema, else one table with their schemas unified (the rules' concat)."""
    schemas = [_schema(f) for f in files]
    local = path if not is_remote(path) else os.path.join(tempfile.mkdtemp(), "t.parquet")
    tmp = f"{local}.tmp"
    rows = 0
    try:
        if all(s.equals(schemas[0]) for s in schemas):
            with pq.ParquetWriter(tmp, schemas[0]) as writer:
                for f in files:
                    for b in _batches(f):
                        writer.write_batch(b)
                        rows += b.num_rows
        else:
            tables = [read_parquet(f, flag="DIR") for f in files]
            table = pa.concat_tables(tables, promote_options="default")
            pq.write_table(table, tmp)
            rows = table.num_rows
        os.replace(tmp, local)  # whole or absent
        if local != path:
            with open(local, "rb") as src, filesystems.create(path) as dst:
                shutil.copyfileobj(src, dst, 8 << 20)
    finally:
        if local != path:
            shutil.rmtree(os.path.dirname(local), ignore_errors=True)
        elif os.path.exists(tmp):
            os.remove(tmp)
    return rows


def assemble_scored(folder: str, pairs: Sequence[str]) -> dict:
    """``folder/<pair>/scored.parquet`` (each pair's ``filters cds-score`` folder) as
    ``folder/scored.parquet`` in the order of ``pairs``, and ``folder/stats.json`` with their
    counts summed; returns that report."""
    missing = [p for p in pairs if not filesystems.exists(join(folder, p, "scored.parquet"))]
    if missing:
        raise InputError(join(folder, missing[0]), "no scored.parquet (filters cds-score)", "DIR")
    reports = [_read_report(join(folder, p, "stats.json")) for p in pairs]
    rows = _write_table(
        join(folder, "scored.parquet"), [join(folder, p, "scored.parquet") for p in pairs]
    )
    report = sum_reports(
        "cds_score",
        reports,
        pairs=list(pairs),
        shards=len(pairs),
        model=reports[0].get("model"),
        outputs=["scored.parquet"],
        bidirectional=reports[0].get("bidirectional"),
        device=",".join(sorted({str(r.get("device")) for r in reports})),
        seconds=round(sum(r.get("seconds", 0) for r in reports), 3),
    )
    if report["counts"].get("pairs", {}).get("out") != rows:  # a bug here, not an input
        raise RuntimeError(f"scored.parquet has {rows} rows, the pairs' stats say otherwise")
    put_json(join(folder, "stats.json"), report)
    return report


def build_parser() -> argparse.ArgumentParser:
    ap = command_parser(
        "python -m pipelines.pair_assembly",
        "Assemble pair files: several pair Parquet files as one (concat), the cds_score stage's "
        "pairs as one file (scored), the bitext stage's parts as the bitext folder (bitext).",
        "Paths may be local or object-store URLs. Other options are Beam's (the S3/GCS ones reach "
        "the file system).",
        examples=[
            "python -m pipelines.pair_assembly concat a.parquet b.parquet --output all.parquet",
            "python -m pipelines.pair_assembly scored run/cds_score --pairs de-en fr-en",
            "python -m pipelines.pair_assembly bitext run/bitext --pairs de-en fr-en",
        ],
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    k = sub_command(sub, "concat", "Several pair Parquet files as one, in the order given.")
    k.add_argument("inputs", nargs="+", help="Parquet files with src, trg (paths or URLs)")
    k.add_argument("--output", required=True, help="Parquet file to write (path or URL)")
    add_overwrite_option(k, "the output file")
    add_log_level_option(k)
    s = sub_command(
        sub,
        "scored",
        "DIR/<pair>/scored.parquet (filters cds-score per pair) as DIR/scored.parquet, "
        "in the order given, and DIR/stats.json with their counts summed.",
    )
    s.add_argument("folder", metavar="DIR", help="the cds_score stage folder (path or URL)")
    s.add_argument("--pairs", nargs="+", required=True, help="language pairs, in output order")
    add_log_level_option(s)
    b = sub_command(
        sub,
        "bitext",
        "DIR/_parts/<pair> (filters export --pair per pair) as the bitext folder "
        "filters export writes (bitext.parquet, bitext.tsv.gz, Moses files, hf/, "
        "rejected.parquet, stats.json); the parts are removed.",
    )
    b.add_argument("folder", metavar="DIR", help="the bitext stage folder (path or URL)")
    b.add_argument("--pairs", nargs="+", required=True, help="the language pairs exported")
    add_log_level_option(b)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args, beam_args = build_parser().parse_known_args(argv)
    setup_logging(args.log_level)

    def body() -> int:
        from apache_beam.options.pipeline_options import PipelineOptions

        from labse_common.remote import check_paths, remote_paths

        # The S3/GCS options of the run's beam: section, else $LABSE_BEAM_OPTIONS.
        filesystems.configure(beam_args or None)
        opts = PipelineOptions(list(beam_args)) if beam_args else None
        # A dead endpoint, missing bucket or credentials: one line now, not a traceback later.
        if args.cmd == "bitext":
            from filters.bitext.export_parts import assemble_parts

            check_paths(remote_paths([args.folder]), opts)
            report = assemble_parts(args.folder, args.pairs)
            kept = report["counts"].get("pairs", {}).get("out", 0)
            print(f"bitext: {kept} pairs -> {args.folder}")
            return 0
        if args.cmd == "scored":
            check_paths(remote_paths([args.folder]), opts)
            report = assemble_scored(args.folder, args.pairs)
            print(f"scored: {report['counts']['pairs']['out']} pairs -> {args.folder}")
            return 0
        check_paths(remote_paths([*args.inputs, args.output]), opts)
        report = concat(args.inputs, args.output, args.overwrite)
        print(f"concat: {report['counts']['pairs']['out']} pairs -> {args.output}")
        return 0

    return run_main(body, log, args=args, check_remote=False)


if __name__ == "__main__":
    exit_with(main)
