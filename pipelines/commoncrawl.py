"""CommonCrawl WET/WARC files -> clean monolingual sentences per language (Beam job).

    python -m pipelines.commoncrawl --input 'data/*.warc.wet.gz' --output out/cc [options]

Input patterns are globs or any Beam filesystem path; a ``wet.paths.gz`` file lists inputs
(relative entries get --paths-prefix). Files are spread over workers; each worker reads its
files with warcio, cleans each document (filters/mono/cleaner.py), and the job deduplicates and writes
``out/<lang>/*.parquet`` plus ``out/stats.json``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from labse_common.cli import exit_with
from labse_common.config import to_dict
from labse_common.sections.corpus import CorpusConfig
from labse_common.stats import StageCounter
from pipelines.corpus_cli import base_parser, run_cli
from pipelines.readers.warc import iter_warc_documents
from pipelines.sentences import finish_sentences
from pipelines.tagged import with_outputs
from pipelines.tags import STATS


class ReadWarcFile(beam.DoFn):
    """One WARC/WET path -> Documents; file-level problems are counted, never raised."""

    def process(self, path: str):
        counter = StageCounter()
        try:
            # UNCOMPRESSED: the reader sniffs gzip itself so truncation is detected and counted.
            with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as raw:
                yield from iter_warc_documents(raw, path, counter)
        except OSError as e:
            counter.add_dropped("files", "unreadable")
            counter.add_in("files")
            import logging

            logging.getLogger(__name__).warning("%s: unreadable: %s", path, e)
        yield beam.pvalue.TaggedOutput(STATS, counter.drain())


def documents(
    p: beam.Pipeline, inputs: list[str], args: argparse.Namespace, cfg: CorpusConfig
) -> tuple[list, list]:
    """The job's documents (one branch) and its readers' stats, before the shared tail."""
    paths = p | "Paths" >> beam.Create(inputs) | "Spread" >> beam.Reshuffle()
    # with_outputs (pipelines/tagged.py): a multi-output ParDo that the DaskRunner runs too.
    read = with_outputs(paths, "Read", ReadWarcFile(), STATS, main="docs")
    return [read.docs], [read[STATS]]


def build(p: beam.Pipeline, inputs: list[str], args: argparse.Namespace, cfg: CorpusConfig) -> None:
    docs, stats = documents(p, inputs, args, cfg)
    finish_sentences(
        docs,
        args.output,
        cfg,
        stats,
        "commoncrawl",
        {"inputs": len(inputs), "config": to_dict(cfg)},
    )


def parser() -> argparse.ArgumentParser:
    p = base_parser("python -m pipelines.commoncrawl", __doc__.split("\n\n")[0])
    p.add_argument(
        "--paths-prefix",
        default="",
        metavar="URL",
        help="prefix for relative entries of a *.paths(.gz) list, e.g. s3://commoncrawl/",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(build, argv, parser(), "commoncrawl", documents=documents)


if __name__ == "__main__":
    exit_with(main)
