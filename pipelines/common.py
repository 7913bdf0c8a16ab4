"""What both corpus jobs share: options, input expansion, the cleaning DoFn, dedup, writers, stats.

Stats travel through the pipeline as small ``{"unit/field": n}`` dicts on a tagged output and
are summed with a combiner, so they are exact on any runner (Beam metrics are not guaranteed to
be committed on every runner) and cheap (combiner lifting sums them before the shuffle).
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import logging
import sys
import zlib
from collections.abc import Iterable, Sequence

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from filters.cleaner import CleanerConfig, Document, SentenceCleaner
from filters.dedup import dedup_key
from filters.langid import default_lid_model_path, load_fasttext_model
from filters.quality import QualityScorer
from labse_common.config import resolve_section
from labse_common.logs import setup_logging
from labse_common.stats import StageCounter, check_balanced, merge_counts, to_report
from pipelines.options import UsageError, pipeline_options

log = logging.getLogger(__name__)

STATS = "stats"
DROPPED = "dropped"

# The columns of DESIGN.md's sentence contract; kept and dropped rows share them.
_ROW_FIELDS = [
    ("text", pa.string()),
    ("lang", pa.string()),
    ("lang_score", pa.float32()),
    ("quality_score", pa.float32()),
    ("source", pa.string()),
    ("doc_id", pa.string()),
    ("url_or_title", pa.string()),
]
SENTENCE_SCHEMA = pa.schema([*_ROW_FIELDS, ("dup_count", pa.int32())])
DROPPED_SCHEMA = pa.schema([*_ROW_FIELDS, ("reason", pa.string()), ("unit", pa.string())])


# ---------------------------------------------------------------------------------------------
# Command line


def base_parser(prog: str, description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "Any other option is passed to Apache Beam unchanged, e.g. --runner FlinkRunner "
            "--flink_master HOST:8081 --environment_type DOCKER --environment_config IMAGE, or "
            "--runner DataflowRunner --project P --region R --temp_location gs://... "
            "--sdk_container_image IMAGE. Locally the DirectRunner runs in multi_processing mode "
            "with one worker per core (--direct_num_workers N to change)."
        ),
    )
    p.add_argument("--input", action="append", required=True, metavar="PATTERN",
                   help="input glob or Beam filesystem path (gs://, s3://, hdfs://); repeatable")
    p.add_argument("--output", required=True, metavar="DIR",
                   help="output folder: DIR/<lang>/*.parquet and DIR/stats.json")
    p.add_argument("--config", default="demo", metavar="PRESET|FILE",
                   help="preset (demo, paper) or YAML file; its `corpus` section gives defaults")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override any `corpus` config key, e.g. --set lid_threshold=0.3")
    p.add_argument("--lid-model", metavar="PATH",
                   help="fastText LID model (default: lid.176.ftz shipped in filters/models/)")
    p.add_argument("--lid-threshold", type=float, metavar="P",
                   help="drop sentences whose top language probability is below P")
    p.add_argument("--langs", metavar="xx,yy", help="keep only these language labels")
    p.add_argument("--quality-model", metavar="PATH",
                   help="fastText content/boilerplate model from `python -m pipelines.quality "
                   "train` (default: the rule-based scorer in filters/boilerplate.py)")
    p.add_argument("--quality-threshold", type=float, metavar="P",
                   help="drop sentences whose content probability is below P")
    p.add_argument("--min-chars", type=int, help="minimum line/sentence length in characters")
    p.add_argument("--max-chars", type=int, help="maximum line/sentence length in characters")
    p.add_argument("--no-dedup", action="store_true",
                   help="skip the job-wide exact deduplication of normalised sentences")
    p.add_argument("--write-dropped", action="store_true",
                   help="also write dropped lines/sentences with their reason to DIR/_dropped/")
    p.add_argument("--rows-per-file", type=int, help="rows per output Parquet file")
    p.add_argument("--shards-per-language", type=int,
                   help="dedup/write groups per language; one group's distinct rows are held "
                   "by one worker, so use about rows-per-language / 1M at scale")
    p.add_argument("--overwrite", action="store_true",
                   help="replace existing output in DIR instead of refusing to run")
    p.add_argument("--log-level", default=None, help="DEBUG, INFO (default), WARNING")
    return p


def resolve_config(args: argparse.Namespace) -> dict:
    """Preset section, then --set overrides, then explicit flags (flags win)."""
    flags = {
        "lid_model": args.lid_model,
        "lid_threshold": args.lid_threshold,
        "langs": args.langs.split(",") if args.langs else None,
        "quality_model": args.quality_model,
        "quality_threshold": args.quality_threshold,
        "min_chars": args.min_chars,
        "max_chars": args.max_chars,
        "rows_per_file": args.rows_per_file,
        "shards_per_language": args.shards_per_language,
    }
    try:
        cfg = resolve_section(args.config, "corpus", args.set, flags)
    except (FileNotFoundError, ValueError) as e:
        raise UsageError(str(e)) from e
    if args.no_dedup:
        cfg["dedup"] = False
    if args.write_dropped:
        cfg["write_dropped"] = True
    return cfg


def validate_models(cfg: dict) -> None:
    """Load the models once on the driver: a wrong path fails here, not on 1000 workers."""
    try:
        load_fasttext_model(cfg.get("lid_model") or default_lid_model_path())
        if cfg.get("quality_model"):
            QualityScorer(cfg["quality_model"])
    except (FileNotFoundError, ValueError) as e:
        raise UsageError(str(e)) from e


def _read_paths_file(path: str) -> list[str]:
    with FileSystems.open(path) as f:
        data = f.read()
    if path.endswith(".gz"):
        data = gzip.decompress(data)
    return [ln.strip() for ln in data.decode("utf-8").splitlines() if ln.strip()]


def expand_inputs(patterns: Iterable[str], paths_prefix: str = "") -> list[str]:
    """Glob every pattern; a ``*.paths``/``*.paths.gz`` file lists inputs (CommonCrawl style).

    A pattern that matches nothing is a usage error: a typo must not produce an empty corpus.
    """
    out: list[str] = []
    for pat in patterns:
        if pat.endswith((".paths", ".paths.gz")):
            listed = [p if "://" in p or p.startswith("/") else paths_prefix + p
                      for p in _read_paths_file(pat)]  # fmt: skip
            out.extend(expand_inputs(listed) if listed else [])
            continue
        try:
            res = FileSystems.match([pat])[0]
        except Exception as e:  # BeamIOError for unknown schemes / permissions
            raise UsageError(f"cannot list input {pat!r}: {e}") from e
        found = sorted(m.path for m in res.metadata_list)
        if not found:
            raise UsageError(f"input not found: {pat!r} matches no file")
        out.extend(found)
    return sorted(set(out))


def prepare_output(output: str, overwrite: bool) -> None:
    existing = FileSystems.match([FileSystems.join(output, "**")])[0].metadata_list
    if existing and not overwrite:
        raise UsageError(f"output {output!r} is not empty; pass --overwrite to replace it")
    if existing:
        FileSystems.delete([m.path for m in existing])


# ---------------------------------------------------------------------------------------------
# Transforms


_ROW_NAMES = tuple(n for n, _ in _ROW_FIELDS)
_TEXT, _SOURCE, _DOC_ID = (_ROW_NAMES.index(n) for n in ("text", "source", "doc_id"))


def _shard_of(dkey: str | None, text: str, shards: int) -> int:
    if dkey is not None:
        return int(dkey[:8], 16) % shards  # the dedup key is already a uniform hash
    # crc32 spreads rows as well as the dedup hash at a fraction of its cost.
    return zlib.crc32(text.encode("utf-8", "replace")) % shards


class CleanDocuments(beam.DoFn):
    """Document -> kept rows batched per (language, shard); stats and dropped rows as side outputs.

    A kept row leaves as a tuple in a per-document batch keyed ``"<lang>\t<shard>"``, where the
    shard comes from the row's dedup key: every copy of a sentence lands in the same group, and
    Beam moves one element per document and group instead of one per sentence (per-element
    overhead was a third of the Wikipedia job's CPU when rows travelled one by one).
    """

    def __init__(self, cfg: dict) -> None:
        self.cfg = cfg
        self.dedup = bool(cfg.get("dedup", True))
        self.shards = max(1, int(cfg.get("shards_per_language", 1)))
        self.cleaner: SentenceCleaner | None = None

    def setup(self) -> None:
        # Models load once per worker process, not per element.
        self.cleaner = SentenceCleaner(CleanerConfig.from_dict(self.cfg))

    def process(self, doc: Document):
        counter = StageCounter()
        res = self.cleaner.clean(doc, counter, keep_dropped=bool(self.cfg.get("write_dropped")))
        groups: dict[str, list] = {}
        for r in res.kept:
            dkey = dedup_key(r["text"]) if self.dedup else None
            group = f"{r['lang']}\t{_shard_of(dkey, r['text'], self.shards)}"
            groups.setdefault(group, []).append((dkey, tuple(r[n] for n in _ROW_NAMES)))
        yield from groups.items()
        for row in res.dropped:
            yield beam.pvalue.TaggedOutput(DROPPED, row)
        yield beam.pvalue.TaggedOutput(STATS, counter.drain())


def _rank(row: tuple) -> tuple:
    # The deterministic representative of a duplicate group: first by (source, doc_id, text).
    return (row[_SOURCE], row[_DOC_ID], row[_TEXT])


class DedupShard(beam.CombineFn):
    """Merges the row batches of one (language, shard) group, collapsing exact duplicates.

    The accumulator maps dedup key -> [representative row, copies, collapsed rows or None].
    Combiner lifting merges each bundle's batches before the shuffle, so duplicates inside a
    worker never cross the network. The collapsed rows themselves are kept only when asked for
    (``--write-dropped``). Without dedup every row is its own entry. One group's distinct rows
    are held in memory by one worker: size ``shards_per_language`` so that (rows per language /
    shards) fits, e.g. 1M rows (~0.5 GB) per shard.
    """

    def __init__(self, dedup: bool = True, keep_collapsed: bool = False) -> None:
        self.dedup, self.keep_collapsed = dedup, keep_collapsed

    def create_accumulator(self) -> dict:
        return {}

    def _add(self, acc: dict, dkey, row: tuple, n: int, collapsed: list | None) -> None:
        if not self.dedup:
            acc[len(acc)] = [row, n, None]
            return
        cur = acc.get(dkey)
        if cur is None:
            acc[dkey] = [row, n, collapsed]
            return
        cur[1] += n
        loser = row
        if _rank(row) < _rank(cur[0]):
            loser, cur[0] = cur[0], row
        if self.keep_collapsed:
            if cur[2] is None:
                cur[2] = []
            cur[2].append(loser)
            cur[2].extend(collapsed or ())

    def add_input(self, acc: dict, batch: list) -> dict:
        for dkey, row in batch:
            self._add(acc, dkey, row, 1, None)
        return acc

    def merge_accumulators(self, accs) -> dict:
        it = iter(accs)
        out = next(it)
        for acc in it:
            for dkey, (row, n, collapsed) in acc.items():
                self._add(out, dkey, row, n, collapsed)
        return out

    def extract_output(self, acc: dict) -> dict:
        return acc


class _WriteSentenceShard(beam.DoFn):
    """Writes one deduplicated (language, shard) group; reports the duplicates it collapsed."""

    def __init__(self, output: str, rows_per_file: int) -> None:
        self.output, self.rows_per_file = output, rows_per_file

    def process(self, kv):
        key, acc = kv
        lang, shard = key.split("\t")
        # Sorted rows and deterministic names: a retried bundle rewrites the same files.
        entries = sorted(acc.values(), key=lambda e: e[0][_TEXT])
        dups = 0
        for part, lo in enumerate(range(0, len(entries), self.rows_per_file)):
            chunk = entries[lo : lo + self.rows_per_file]
            cols = list(zip(*(e[0] for e in chunk)))
            arrays = [pa.array(c, type=t) for c, (_, t) in zip(cols, _ROW_FIELDS)]
            counts = [e[1] for e in chunk]
            dups += sum(counts) - len(counts)
            table = pa.Table.from_arrays([*arrays, pa.array(counts, pa.int32())],
                                         schema=SENTENCE_SCHEMA)  # fmt: skip
            yield _write_table(table, FileSystems.join(
                self.output, lang, f"part-{int(shard):05d}-{part:05d}.parquet"))
        for e in entries:
            for row in e[2] or ():
                yield beam.pvalue.TaggedOutput(
                    DROPPED, {**dict(zip(_ROW_NAMES, row)), "reason": "duplicate",
                              "unit": "sentences"})  # fmt: skip
        if dups:
            yield beam.pvalue.TaggedOutput(
                STATS, {"sentences/out": -dups, "sentences/dropped/duplicate": dups})


def _write_table(table: pa.Table, path: str) -> str:
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    with FileSystems.create(path) as f:
        f.write(buf.getvalue())
    return path


class _WriteParquetGroup(beam.DoFn):
    """Writes one (folder, shard) group as Parquet files of at most ``rows_per_file`` rows."""

    def __init__(self, output: str, schema: pa.Schema, rows_per_file: int,
                 subdir: str | None = None) -> None:  # fmt: skip
        self.output, self.schema, self.subdir = output, schema, subdir
        self.rows_per_file = rows_per_file

    def process(self, kv):
        key, rows = kv
        folder, shard = key.split("\t")
        batch: list[dict] = []
        part = 0
        # GroupByKey values are streamed on distributed runners: never materialise a group.
        for row in rows:
            batch.append(row)
            if len(batch) >= self.rows_per_file:
                yield self._write(folder, int(shard), part, batch)
                batch, part = [], part + 1
        if batch:
            yield self._write(folder, int(shard), part, batch)

    def _write(self, folder: str, shard: int, part: int, rows: list[dict]) -> str:
        # Sorted rows and deterministic names: a retried bundle rewrites the same file.
        rows.sort(key=lambda r: r["text"])
        table = pa.Table.from_pylist(rows, schema=self.schema)
        name = f"part-{shard:05d}-{part:05d}.parquet"
        return _write_table(table, FileSystems.join(self.output, self.subdir or folder, name))


class WriteParquet(beam.PTransform):
    """Rows -> DIR/<folder>/part-*.parquet, with folder = row[key] (the language) or fixed.

    Rows are spread over ``shards`` groups per folder by their text hash; each group is written
    by one worker. GroupByKey rather than GroupIntoBatches: the latter uses timers, which make
    the DirectRunner fall back to its single-process engine.
    """

    def __init__(self, output: str, schema: pa.Schema, rows_per_file: int, shards: int,
                 key: str = "lang", subdir: str | None = None) -> None:  # fmt: skip
        super().__init__()
        self.output, self.schema, self.key, self.subdir = output, schema, key, subdir
        self.rows_per_file, self.shards = rows_per_file, max(1, shards)

    def expand(self, rows):
        key, shards, names = self.key, self.shards, self.schema.names

        def keyed(r):
            folder = (r.get(key) or "und") if self.subdir is None else ""
            shard = _shard_of(None, r["text"], shards)
            return (f"{folder}\t{shard}", {n: r.get(n) for n in names})

        return (
            rows
            | "ByShard" >> beam.Map(keyed)
            | "Group" >> beam.GroupByKey()
            | "Write" >> beam.ParDo(
                _WriteParquetGroup(self.output, self.schema, self.rows_per_file, self.subdir))
        )  # fmt: skip


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

    return (
        stats_pcolls
        | "FlattenStats" >> beam.Flatten()
        | "SumStats" >> beam.CombineGlobally(_StatsCombine())
        | "WriteStats" >> beam.Map(_write)
    )


def finish_sentences(docs, output: str, cfg: dict, stats: list, stage: str, extra: dict) -> None:
    """Clean -> dedup per (language, shard) -> Parquet per language; stats -> DIR/stats.json."""
    cleaned = docs | "Clean" >> beam.ParDo(CleanDocuments(cfg)).with_outputs(
        STATS, DROPPED, main="kept"
    )
    keep_dropped = bool(cfg.get("write_dropped"))
    written = (
        cleaned.kept
        | "Dedup" >> beam.CombinePerKey(DedupShard(bool(cfg.get("dedup", True)), keep_dropped))
        | "WriteSentences" >> beam.ParDo(
            _WriteSentenceShard(output, int(cfg.get("rows_per_file", 100_000)))
        ).with_outputs(STATS, DROPPED, main="files")
    )  # fmt: skip
    stats = [*stats, cleaned[STATS], written[STATS]]
    if keep_dropped:
        (
            (cleaned[DROPPED], written[DROPPED])
            | "AllDropped" >> beam.Flatten()
            | "WriteDropped" >> WriteParquet(
                output, DROPPED_SCHEMA, int(cfg.get("rows_per_file", 100_000)), 1,
                subdir="_dropped")
        )  # fmt: skip
    write_stats(stats, output, stage, extra)


def report_and_exit(output: str, stage: str) -> int:
    """Read the job's stats.json back, check the balance, warn about bad input; exit code."""
    path = FileSystems.join(output, "stats.json")
    with FileSystems.open(path) as f:
        report = json.loads(f.read().decode("utf-8"))
    problems = check_balanced(report)
    for p in problems:
        log.error("stats do not balance: %s", p)
    for unit, c in report["counts"].items():
        log.info("%s %s: in=%d out=%d dropped=%s", stage, unit, c["in"], c["out"], c["dropped"])
    bad = {r: n for u in ("files", "file_ranges", "documents") for r, n in
           report["counts"].get(u, {}).get("dropped", {}).items()
           if r in BAD_INPUT_REASONS}  # fmt: skip
    if bad:
        log.warning("bad input was skipped (see %s): %s", path, bad)
    return 1 if problems else 0


BAD_INPUT_REASONS = frozenset(
    {"truncated_archive", "corrupt_archive", "empty_file", "not_warc", "not_xml", "unreadable",
     "malformed_record", "malformed_page_xml", "parser_error", "parser_timeout", "page_too_large",
     "corrupt_member", "corrupt_block"}
)  # fmt: skip


def run_cli(build, argv: Sequence[str] | None, parser: argparse.ArgumentParser, stage: str) -> int:
    """Parse, validate, build and run a corpus job; map usage errors to exit status 2."""
    args, beam_args = parser.parse_known_args(argv)
    setup_logging(args.log_level)
    try:
        cfg = resolve_config(args)
        validate_models(cfg)
        inputs = expand_inputs(args.input, getattr(args, "paths_prefix", "") or "")
        prepare_output(args.output, args.overwrite)
        opts = pipeline_options(beam_args)
    except UsageError as e:
        log.error("%s", e)
        return 2
    log.info("%s: %d input file(s) -> %s", stage, len(inputs), args.output)
    with beam.Pipeline(options=opts) as p:
        build(p, inputs, args, cfg)
    return report_and_exit(args.output, stage)


def main_wrapper(fn) -> None:
    sys.exit(fn())
