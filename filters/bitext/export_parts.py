"""The runner's bitext stage, one language pair at a time: ``filters export --pair`` writes a
pair's part (``_parts/<pair>``: kept.parquet, rejected.parquet, stats.json; a part a killed run
keeps), and :func:`assemble_parts` assembles the parts into the files the whole export
(:mod:`filters.bitext.export`) writes from the same inputs, file for file.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from filters.bitext.export import MINED, STAGE, bitext_report, split_file, write_bitext
from filters.bitext.export_verdict import Inputs, Key, as_path, is_file, load_verdict
from labse_common import filesystems
from labse_common.datafiles import read_json, read_parquet
from labse_common.errors import InputError, UsageError
from labse_common.filesystems import is_remote, join
from labse_common.output_dir import claim_output, upload_tree
from labse_common.remote import require_local
from labse_common.stats import (
    check_balanced,
    flatten,
    merge_counts,
    to_report,
    write_report,
)

log = logging.getLogger(__name__)

# The per-pair parts of the runner's bitext stage (``--pair``), under its folder until assembled.
PARTS = "_parts"


def check_pair(pair: str) -> str:
    """``--pair``: two language codes joined by ``-`` (a mine-many pair folder's name)."""
    parts = pair.split("-")
    if len(parts) != 2 or not all(parts) or "/" in pair:
        raise UsageError(f"--pair {pair!r}: expected SRC-TRG, e.g. de-en")
    return pair


def pair_file(mined: str | os.PathLike, pair: str) -> str:
    """``mined/<pair>/mined.parquet``, which must be there (local or an object-store URL)."""
    f = join(as_path(mined), pair, MINED)
    if not is_file(f):
        raise InputError(f, f"not found (the mine-many output of {pair})", "--mined")
    return f


def part_report(
    pair: str,
    counts: Mapping[str, int],
    kept: list[dict],
    rejected: list[dict],
    summary: dict,
    inputs: Inputs,
) -> dict:
    """A part's stats.json: the pair's counts (balanced), and what the assembly needs to write
    what the whole export writes: what decided, combine's summary and each table's first row's
    keys (the final tables take their columns from the first row, as ``_table`` does)."""
    report = to_report(
        STAGE,
        counts,
        pair=pair,
        source=inputs.source,
        inputs=asdict(inputs),
        summary=summary,
        first_keys={
            "kept": list(kept[0]) if kept else None,
            "rejected": list(rejected[0]) if rejected else None,
        },
    )
    problems = check_balanced(report)
    if problems:  # a bug here, not a user mistake
        raise RuntimeError(f"unbalanced bitext stats of {pair}: {problems}")
    return report


def _rows_table(rows: list[dict]) -> pa.Table:
    """Every key any row has (a missing one as null): a part keeps each row's values whole."""
    keys = list(dict.fromkeys(k for r in rows for k in r))
    return pa.Table.from_pylist([{k: r.get(k) for k in keys} for r in rows])


def write_part(
    folder: str | os.PathLike, kept: list[dict], rejected: list[dict], report: dict
) -> None:
    """One pair's part into the local ``folder``: kept.parquet, rejected.parquet, stats.json."""
    tmp = Path(folder)
    pq.write_table(_rows_table(kept), tmp / "kept.parquet")
    pq.write_table(_rows_table(rejected), tmp / "rejected.parquet")
    write_report(str(tmp / "stats.json"), report)


def export_pair(
    mined: str | os.PathLike,
    pair: str,
    output: str | os.PathLike,
    *,
    filtered: str | os.PathLike | None = None,
    combined: str | os.PathLike | None = None,
    rules: str | os.PathLike | None = None,
    min_margin: float = 1.05,
    overwrite: bool = False,
) -> dict:
    """One language pair's part of the bitext into ``output`` (read back by
    :func:`assemble_parts`); returns its stats report."""
    require_local(os.fspath(output), "--output", "filters export")
    inputs = Inputs.of(filtered, combined, rules, min_margin)
    f = pair_file(mined, pair)
    verdict = load_verdict(inputs, pair)
    kept, rejected, counts = split_file(f, verdict, min_margin)
    report = part_report(pair, counts, kept, rejected, verdict.summary, inputs)
    with claim_output(output, overwrite) as out:
        write_part(out.tmp, kept, rejected, report)
    log.info("bitext %s: %d of %d mined pairs kept", pair, len(kept), len(kept) + len(rejected))
    return report


def _first_row(rows: list[dict], keys: list[str] | None) -> None:
    """The first row back with only the keys it had (the part stored every row's keys)."""
    if rows and keys is not None:
        rows[0] = {k: rows[0].get(k) for k in keys}


def read_parts(folder: str, pairs: Sequence[str]) -> tuple[list[dict], list[dict], list[dict]]:
    """The kept rows, rejected rows and stats.json of ``folder/_parts/<pair>``, in the whole
    export's order (its mined files' order: by pair folder); ``folder`` local or a URL."""
    order = sorted(dict.fromkeys(pairs), key=lambda p: f"{p}/{MINED}")
    kept: list[dict] = []
    rejected: list[dict] = []
    reports: list[dict] = []
    firsts: dict[str, list | None] = {"kept": None, "rejected": None}
    for p in order:
        part = join(folder, PARTS, p)
        if not is_file(join(part, "stats.json")):
            raise InputError(part, "no stats.json (filters export --pair did not finish)", "DIR")
        report = read_json(join(part, "stats.json"), "DIR", expect=dict)
        if not {"first_keys", "inputs", "summary"} <= set(report):
            raise InputError(join(part, "stats.json"), "not a part (filters export --pair)", "DIR")
        for name, rows in (("kept", kept), ("rejected", rejected)):
            got = read_parquet(join(part, f"{name}.parquet"), None, "DIR").to_pylist()
            if got and not rows:
                firsts[name] = report["first_keys"][name]
            rows += got
        reports.append(report)
    _first_row(kept, firsts["kept"])
    _first_row(rejected, firsts["rejected"])
    return kept, rejected, reports


def assemble_parts(folder: str | os.PathLike, pairs: Sequence[str]) -> dict:
    """The bitext folder (module docstring) from the parts ``folder/_parts/<pair>`` that
    ``export --pair`` wrote, the files the whole export writes from the same inputs; the parts
    are removed. ``folder`` local or an object-store URL. Returns the stats report."""
    folder = as_path(folder)
    kept, rejected, reports = read_parts(folder, pairs)
    first = reports[0]
    inputs = Inputs(**first["inputs"])
    counts = merge_counts(flatten(r) for r in reports)
    report, by_pair = bitext_report(counts, kept, first["summary"], inputs)
    if is_remote(folder):
        with tempfile.TemporaryDirectory(prefix="labse-bitext-") as local:
            write_bitext(local, kept, rejected, by_pair, report, first["summary"])
            upload_tree(local, folder)
        filesystems.delete(filesystems.match(join(folder, PARTS, "**")))
    else:
        _replace_into(Path(folder), kept, rejected, by_pair, report, first["summary"])
    log.info(
        "bitext: %d of %d mined pairs kept, %d parts -> %s",
        len(kept),
        len(kept) + len(rejected),
        len(reports),
        folder,
    )
    return report


def _replace_into(
    folder: Path,
    kept: list[dict],
    rejected: list[dict],
    by_pair: dict[Key, list[dict]],
    report: dict,
    summary: dict,
) -> None:
    """Written aside in ``folder``, then moved into place: no file is ever half written."""
    staging = Path(tempfile.mkdtemp(prefix="_assemble.", dir=folder))
    try:
        write_bitext(staging, kept, rejected, by_pair, report, summary)
        for entry in sorted(staging.iterdir()):
            target = folder / entry.name
            if target.is_dir():
                shutil.rmtree(target)
            os.replace(entry, target)
        shutil.rmtree(folder / PARTS, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
