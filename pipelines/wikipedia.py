"""Wikipedia pages-articles dumps -> clean monolingual sentences per language (Beam job).

    python -m pipelines.wikipedia --input 'dumps/*-pages-articles*.xml.bz2' --output out/wiki

Each dump is cut into byte ranges that decompress independently (multistream index, or bz2
stream headers found by scanning), so one 20 GB dump spreads over many workers. Pages in
namespace 0 that are not redirects go through mwparserfromhell (templates, tables, refs, files,
categories, interlanguage links and headings removed) under a per-page time limit, then the
shared cleaning chain, dedup and per-language Parquet output.
"""

from __future__ import annotations

import argparse
import bz2
import logging
import re
from collections.abc import Sequence

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from labse_common.cli import exit_with
from labse_common.config import to_dict
from labse_common.errors import InputError
from labse_common.sections.corpus import CorpusConfig
from labse_common.stats import StageCounter
from pipelines.corpus_cli import base_parser, run_cli
from pipelines.readers.wikidump import PageConverter, iter_range_pages, plan_ranges
from pipelines.sentences import finish_sentences
from pipelines.tagged import with_outputs
from pipelines.tags import STATS

log = logging.getLogger(__name__)


def _open_raw(path: str):
    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def _index_for(path: str, explicit: str | None) -> str | None:
    if explicit:
        return explicit
    if "multistream" in path and path.endswith(".xml.bz2"):
        cand = path[: -len(".xml.bz2")] + "-index.txt.bz2"
        if FileSystems.exists(cand):
            return cand
    return None


class PlanRanges(beam.DoFn):
    """One dump path -> ByteRanges (runs on a worker: scanning a big dump is real work)."""

    def __init__(self, index: str | None, streams_per_range: int) -> None:
        self.index, self.streams_per_range = index, streams_per_range

    def process(self, path: str):
        counter = StageCounter()
        counter.add_in("files")
        try:
            index_path = _index_for(path, self.index)
            with _open_raw(path) as raw:
                if index_path:
                    with _open_raw(index_path) as idx:
                        ranges = plan_ranges(path, raw, idx, self.streams_per_range)
                else:
                    ranges = plan_ranges(path, raw, None, self.streams_per_range)
            counter.add_out("files")
            log.info("%s: %d byte range(s)%s", path, len(ranges), " (index)" if index_path else "")
            yield from ranges
        except (OSError, EOFError, ValueError) as e:
            counter.add_dropped("files", "unreadable")
            log.warning("%s: unreadable: %s", path, e)
        yield beam.pvalue.TaggedOutput(STATS, counter.drain())


SPREAD = "spread"


class ReadRange(beam.DoFn):
    """ByteRange -> pages. Pages of a dump that is one range (not multistream, or tiny) go to the
    ``spread`` output, to be redistributed before parsing; pages of a range among many stay on
    this worker, fused with parsing and cleaning, so their text is never serialised."""

    def process(self, rng):
        counter = StageCounter()
        whole_file = rng.start == 0 and rng.end is None
        with _open_raw(rng.path) as raw:
            for page in iter_range_pages(raw, rng, counter):
                yield beam.pvalue.TaggedOutput(SPREAD, page) if whole_file else page
        yield beam.pvalue.TaggedOutput(STATS, counter.drain())


class ConvertPages(beam.DoFn):
    def __init__(self, timeout_s: float, max_page_chars: int) -> None:
        self.timeout_s, self.max_page_chars = timeout_s, max_page_chars
        self.converter: PageConverter | None = None

    def setup(self) -> None:
        # The time-limited helper starts on the first page (its start-up is not timed), so a
        # branch that gets no page starts none.
        self.converter = PageConverter(self.timeout_s, self.max_page_chars)

    def process(self, page):
        counter = StageCounter()
        doc = self.converter(page, counter)
        if doc is not None:
            yield doc
        yield beam.pvalue.TaggedOutput(STATS, counter.drain())

    def teardown(self) -> None:
        if self.converter is not None:
            self.converter.close()


def documents(
    p: beam.Pipeline, inputs: list[str], args: argparse.Namespace, cfg: CorpusConfig
) -> tuple[list, list]:
    """The job's documents (two branches, see below) and its readers' stats."""
    # with_outputs (pipelines/tagged.py): multi-output ParDos that the DaskRunner runs too.
    plan = with_outputs(
        p | "Paths" >> beam.Create(inputs),
        "Plan",
        PlanRanges(args.index, args.streams_per_range),
        STATS,
        main="ranges",
    )
    pages = with_outputs(
        plan.ranges | "SpreadRanges" >> beam.Reshuffle(),
        "Read",
        ReadRange(),
        STATS,
        SPREAD,
        main="pages",
    )
    # Only single-range dumps pay for a page-level shuffle: on a cluster, shuffling every page
    # of a multistream dump would move all of its uncompressed wikitext (~90 GB for enwiki)
    # for no gain in parallelism, since its thousands of ranges already spread the work.
    spread = pages[SPREAD] | "SpreadPages" >> beam.Reshuffle()
    # Two branches, not a Flatten of the pages: Beam's local engine would hold every page of a
    # Flatten fed by two stages in memory. finish_sentences joins them after its spill.
    docs = with_outputs(
        pages.pages,
        "Parse",
        ConvertPages(cfg.page_timeout_s, cfg.max_page_chars),
        STATS,
        main="docs",
    )
    docs_spread = with_outputs(
        spread,
        "ParseSpread",
        ConvertPages(cfg.page_timeout_s, cfg.max_page_chars),
        STATS,
        main="docs",
    )
    return (
        [docs.docs, docs_spread.docs],
        [plan[STATS], pages[STATS], docs[STATS], docs_spread[STATS]],
    )


def build(p: beam.Pipeline, inputs: list[str], args: argparse.Namespace, cfg: CorpusConfig) -> None:
    docs, stats = documents(p, inputs, args, cfg)
    finish_sentences(
        docs, args.output, cfg, stats, "wikipedia", {"inputs": len(inputs), "config": to_dict(cfg)}
    )


def parser() -> argparse.ArgumentParser:
    p = base_parser("python -m pipelines.wikipedia", __doc__.split("\n\n")[0])
    p.add_argument(
        "--index",
        metavar="PATH",
        help="multistream index (*-multistream-index.txt.bz2); found automatically "
        "next to a *-multistream.xml.bz2 dump when omitted",
    )
    p.add_argument(
        "--streams-per-range",
        type=int,
        default=10,
        metavar="N",
        help="bz2 streams (about 100 pages each) per parallel work item; a dump "
        "that is a single range has its pages shuffled across workers instead",
    )
    p.add_argument(
        "--page-timeout",
        type=float,
        metavar="SECONDS",
        help="per-page wikitext parse limit (config: page_timeout_s)",
    )
    return p


def check_index(path: str) -> None:
    """An explicit --index must exist and look like a multistream index (``offset:id:title``).

    Otherwise every dump would be counted ``unreadable`` and the job would end with nothing.
    """
    if not FileSystems.exists(path):
        raise InputError(path, "not found", "--index")
    try:
        with _open_raw(path) as raw:
            head = bz2.BZ2File(raw).read(4096)
    except (OSError, EOFError) as e:  # the bz2 reader's damage: not a compressed index
        raise InputError(path, f"not a bz2 multistream index ({e})", "--index") from e
    if not re.match(rb"\d+:\d+:", head):
        raise InputError(path, "not a multistream index (lines offset:id:title)", "--index")


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(
        build,
        argv,
        parser(),
        "wikipedia",
        lambda args: {"page_timeout_s": args.page_timeout},
        lambda args: check_index(args.index) if args.index else None,
        documents=documents,
    )


if __name__ == "__main__":
    exit_with(main)
