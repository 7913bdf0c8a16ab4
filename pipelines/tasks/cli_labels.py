"""Gate the final filter on a person's labels, matched to the mined pairs by their text."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from labse_common.cli import (
    EXIT_NEEDS_LABELS,
    LABELS_NEEDED,
    add_log_level_option,
    add_overwrite_option,
    command_parser,
    run_main,
)
from labse_common.datafiles import read_parquet
from labse_common.logs import setup_logging
from labse_common.output_dir import claim_output
from labse_common.remote_cache import local_copy
from labse_common.stats import StageCounter, check_balanced, write_report

log = logging.getLogger("pipelines.tasks")

SUMMARY = (
    "The gate before the final filter: writes the sample into the file a person labels (prefilled\n"
    "by pair text from earlier labels), and once enough are labelled, OUTPUT/labels.tsv for\n"
    "`filters combine`."
)
DETAILS = (
    "Until enough pairs are labelled (--min-labelled, with --min-per-label GOOD and BAD) one line\n"
    "says what to label and the exit status is 3."
)
EXAMPLES = (
    "python -m pipelines.e2e_tasks labels --sample sample/sample.parquet "
    "--candidates kept_all.parquet --file labels.tsv --output labels/",
)


def _balanced(report: dict) -> None:
    errors = check_balanced(report)
    if errors:
        raise RuntimeError(f"unbalanced stats: {errors}")


def labels(
    sample: Path,
    candidates: Path,
    person_file: Path,
    earlier: Path | str | None,  # a local path or an object-store URL (combine.labels)
    out: Path,
    min_labelled: int,
    min_per_label: int,
    overwrite: bool = False,
) -> int:
    """The gate before the final filter: the sample's rows in ``person_file`` (created, or
    extended when the sample changed), prefilled from ``earlier`` labels and the person's own by
    pair text; every labelled pair matched to ``candidates`` by its text. With enough labels
    (``min_labelled``, ``min_per_label`` of GOOD and of BAD) ``OUT/labels.tsv`` is what
    ``filters combine`` reads; else one line says what to label and the exit status is
    :data:`~labse_common.cli.EXIT_NEEDS_LABELS`."""

    from filters.bitext import label_match as lm
    from filters.bitext import round_marks as rm
    from filters.bitext.calibrate import BAD, GOOD
    from filters.bitext.sample import LABEL, TSV_COLUMNS

    counter = StageCounter()
    smp = read_parquet(sample, flag="--sample", required=["src", "trg"])
    header = [c for c in TSV_COLUMNS if c in smp.column_names or c == LABEL]
    header += [c for c in LABEL_PROVENANCE if c in smp.column_names and c not in header]
    sample_rows = [{h: ("" if h == LABEL else r.get(h)) for h in header} for r in smp.to_pylist()]
    earlier_labels = {}
    if earlier is not None:
        earlier_rows = lm.read_rows(local_copy(earlier, "combine.labels"), "combine.labels")[1]
        earlier_labels = lm.known_labels(earlier_rows, counter, "earlier_labels", earlier)
    person_header, person_rows = (
        lm.read_rows(person_file, "labels file") if person_file.is_file() else (header, [])
    )
    person = lm.known_labels(person_rows, counter, "person_labels", person_file)
    # The person's marks (round two's, filters.bitext.round_marks) stay on their rows.
    merged = rm.carry_marks(lm.merge_labels(sample_rows, earlier_labels, person), person_rows)
    # The person's labels of pairs outside this sample stay in the file: a rerun may mine them
    # again; so do the rows of round two, labelled or not, in their order.
    extra = rm.kept_extra(person_rows, {lm.key_of(r["src"], r["trg"]) for r in merged})
    if lm.write_rows(
        person_file, header + [h for h in person_header if h not in header], merged + extra
    ):
        log.info(
            "%s: %d sampled pairs (%d prefilled)",
            person_file,
            len(merged),
            sum(bool(r[LABEL]) for r in merged),
        )
    cand = read_parquet(candidates, flag="--candidates", required=["src", "trg"])
    ids, labs = lm.match_to_pairs(cand, {**earlier_labels, **person}, counter, "labels")
    good, bad = labs.count(GOOD), labs.count(BAD)
    if len(ids) < min_labelled or good < min_per_label or bad < min_per_label:
        done = sum(bool(r[LABEL]) for r in merged)
        sys.stderr.write(
            f"{LABELS_NEEDED} {done} of the {len(merged)} sampled pairs in {person_file} are labelled and "
            f"{len(ids)} labels match mined pairs ({good} GOOD, {bad} BAD); the filter needs at least "
            f"{min_labelled}, with {min_per_label} of each: label them with `python -m filters label "
            f"{person_file}` (or fill its label column with GOOD or BAD in any editor)\n"
        )
        return EXIT_NEEDS_LABELS
    with claim_output(out, overwrite) as claimed:
        # With round two's marks when the file has them: combine reports its estimate.
        rm.write_labels(Path(claimed.tmp) / "labels.tsv", cand, ids, labs, person_rows)
        report = counter.to_report(
            "labels",
            person_file=str(person_file),
            good=good,
            bad=bad,
            earlier=str(earlier) if earlier else None,
        )
        _balanced(report)
        write_report(str(Path(claimed.tmp) / "stats.json"), report)
    return 0


#: Provenance shown to the person labelling (the label page lists both sides' origins).
LABEL_PROVENANCE = tuple(
    f"{side}_{name}"
    for side in ("src", "trg")
    for name in ("url_or_title", "source", "doc_id", "locator")
)


def build_parser() -> argparse.ArgumentParser:
    g = command_parser("python -m pipelines.e2e_tasks labels", SUMMARY, DETAILS, EXAMPLES)
    g.add_argument("--sample", required=True, help="sample.parquet of `filters sample`")
    g.add_argument("--candidates", required=True, help="the pairs the sample was drawn from")
    g.add_argument("--file", required=True, help="the labelling TSV a person fills (created)")
    g.add_argument("--earlier", help="labels of an earlier run (combine.labels), matched by text")
    g.add_argument("--min-labelled", type=int, default=30, help="labels needed to go on (30)")
    g.add_argument("--min-per-label", type=int, default=5, help="GOOD and BAD labels needed (5)")
    g.add_argument(
        "--output", required=True, help="folder to write labels.tsv for `filters combine`"
    )
    add_overwrite_option(g)
    add_log_level_option(g)
    return g


def run(args: argparse.Namespace) -> int:
    return labels(
        Path(args.sample),
        Path(args.candidates),
        Path(args.file),
        args.earlier,
        Path(args.output),
        args.min_labelled,
        args.min_per_label,
        args.overwrite,
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)
    return run_main(lambda: run(args), log, args=args)
