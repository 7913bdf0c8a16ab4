"""stats.json for Beam jobs: counts travel as small dicts on a tagged output and are summed.

Exact on any runner (Beam metrics are not guaranteed to be committed on every runner) and cheap
(combiner lifting sums them before the shuffle).
"""

from __future__ import annotations

import json
import logging

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from labse_common.stats import check_balanced, merge_counts, to_report

log = logging.getLogger(__name__)


class _StatsCombine(beam.CombineFn):
    def create_accumulator(self):
        return {}

    def add_input(self, acc, d):
        return merge_counts([acc, d])

    def merge_accumulators(self, accs):
        return merge_counts(accs)

    def extract_output(self, acc):
        return acc


def write_stats(stats_pcolls: list, output: str, stage: str, extra: dict):
    def _write(flat):
        report = to_report(stage, {k: v for k, v in flat.items() if v}, **extra)
        with FileSystems.create(FileSystems.join(output, "stats.json")) as f:
            f.write(json.dumps(report, indent=2, ensure_ascii=False).encode("utf-8") + b"\n")
        return report

    # Each input is summed on its own first: the sum is lifted into the stage that produces the
    # counts (one dict per bundle leaves it). A Flatten of per-document dicts from several
    # stages would be materialised whole by Beam's local engine: ~1 KB per document.
    # without_defaults: the default-injecting form needs a side input, which the DaskRunner
    # evaluates by recomputing its producer; every job has stats anyway.
    partial = [
        pc | f"SumStats{i}" >> beam.CombineGlobally(_StatsCombine()).without_defaults()
        for i, pc in enumerate(stats_pcolls)
    ]
    return (
        partial
        | "FlattenStats" >> beam.Flatten()
        | "SumStats" >> beam.CombineGlobally(_StatsCombine()).without_defaults()
        | "WriteStats" >> beam.Map(_write)
    )


def report_and_exit(output: str, stage: str, shown_as: str | None = None) -> int:
    """Read the job's stats.json back, check the balance, warn about bad input; exit code.

    ``shown_as``: the folder messages name (the committed output, when ``output`` is the job's
    temporary folder, which the commit removes)."""
    path = FileSystems.join(output, "stats.json")
    shown = FileSystems.join(shown_as, "stats.json") if shown_as else path
    with FileSystems.open(path) as f:
        report = json.loads(f.read().decode("utf-8"))
    problems = check_balanced(report)
    for p in problems:
        log.error("stats do not balance: %s", p)
    for unit, c in report["counts"].items():
        log.info("%s %s: in=%d out=%d dropped=%s", stage, unit, c["in"], c["out"], c["dropped"])
    bad = {
        r: n
        for u in ("files", "file_ranges", "documents")
        for r, n in report["counts"].get(u, {}).get("dropped", {}).items()
        if r in BAD_INPUT_REASONS
    }
    if bad:
        log.warning("bad input was skipped (see %s): %s", shown, bad)
    return 1 if problems else 0


BAD_INPUT_REASONS = frozenset(
    {
        "truncated_archive",
        "corrupt_archive",
        "empty_file",
        "not_warc",
        "not_xml",
        "unreadable",
        "malformed_record",
        "malformed_page_xml",
        "parser_error",
        "parser_timeout",
        "page_too_large",
        "corrupt_member",
        "corrupt_block",
    }
)
