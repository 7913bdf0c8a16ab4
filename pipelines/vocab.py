"""Beam job: smoothed word counts from the monolingual corpora, then the wordpiece learner.

    python -m pipelines.vocab --input SENTENCES_DIR --output DIR --vocab-size N \
        [--smoothing 0.3] [--config demo|paper|FILE] [--set KEY=VALUE] [any Beam option]

SENTENCES_DIR is the corpus jobs' layout, ``<lang>/*.parquet`` with a ``text`` column; the
folder name is the language. The job pre-tokenises every sentence (cased BERT rules), counts
words per language, reweights each language's mass to p_lang ** alpha, drops words below the
minimum smoothed count, and writes ``DIR/word_counts.parquet`` (words in order of first
occurrence), ``DIR/heldout.parquet`` (a hashed sample kept back for evaluation) and
``DIR/languages.json``; every runner, the DaskRunner included, writes the same files. The
driver then runs the learner (``labse_model.vocab``) and writes ``vocab.txt``,
``tokenizer.json``, ``vocab_stats.json`` and ``stats.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from collections.abc import Iterator, Sequence

from apache_beam.io.filesystem import BeamIOError
from apache_beam.io.filesystems import FileSystems

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
from labse_common.datafiles import iter_parquet_batches
from labse_common.errors import InputError, UsageError
from labse_common.filesystems import is_remote
from labse_common.logs import setup_logging
from labse_common.output_dir import claim_output, upload_tree
from labse_common.sections.vocab import VocabConfig
from labse_common.stats import StageCounter
from labse_model.vocab.build import (
    COUNTS_FILE,
    HELDOUT_FILE,
    LANGS,
    SUMMARY_FILE,
    finish_vocab,
    language_summary,
    min_vocab_size_from_sample,
    read_counts,
    read_heldout,
)
from labse_model.vocab.learner import LearnerParams, VocabTooSmall
from pipelines.inputs import require_columns
from pipelines.options import check_remote, new_pipeline, pipeline_options, run_pipeline
from pipelines.spill import remove_spill
from pipelines.vocab_count import BEAM_DIR, FILES, build_pipeline

log = logging.getLogger(__name__)

# The driver's alphabet check reads this many sentences before counting (first rows of files).
SAMPLE_ROWS = 50_000
SAMPLE_ROWS_PER_FILE = 5_000


def discover_inputs(input_dir: str) -> tuple[list[str], list[tuple[str, str]]]:
    """Languages (folder names) and (lang, parquet path) pairs; a wrong path is a UsageError."""
    pattern = FileSystems.join(input_dir, "*", "*.parquet")
    try:
        found = FileSystems.match([pattern])[0].metadata_list
    except BeamIOError as e:  # unknown scheme, permissions
        raise InputError(input_dir, f"cannot be listed ({e})", "--input") from None
    files = sorted(
        (os.path.basename(os.path.dirname(m.path)), m.path) for m in found if m.size_in_bytes >= 0
    )
    langs = {lang for lang, _ in files}
    if not is_remote(input_dir):
        if not os.path.isdir(input_dir):
            raise InputError(input_dir, "folder not found", "--input")
        # A language folder without Parquet files is an empty language: counted, not an error.
        langs |= {d for d in os.listdir(input_dir) if os.path.isdir(os.path.join(input_dir, d))}
        langs -= {BEAM_DIR}
    if not files:
        raise InputError(input_dir, "no <lang>/*.parquet files in it", "--input")
    return sorted(langs), files


def _read_text(path: str) -> str:
    with FileSystems.open(path) as f:
        return f.read().decode("utf-8")


SUMMARY = "Learn a WordPiece vocabulary from monolingual sentences (a Beam job, then the learner)."

DETAILS = """\
The input is the corpus jobs' layout, <lang>/*.parquet with a text column (the folder name is
the language). The job counts the words of each language (cased BERT pre-tokenisation),
reweights each language's share to p_lang ** alpha (--smoothing), drops rare words, and writes
word_counts.parquet, heldout.parquet and languages.json into the output; the learner then
writes vocab.txt, tokenizer.json, vocab_stats.json and stats.json. Every Beam runner writes
the same files.

Any other option is passed to Apache Beam unchanged, e.g. --runner FlinkRunner --flink_master
HOST:8081. Locally the DirectRunner runs one worker per core (--direct_num_workers N to
change). To rerun only the learner on saved counts: python -m labse_model.vocab --help."""

EXAMPLES = (
    "python -m pipelines.vocab --input run/sentences/vocab --output vocab --vocab-size 8000",
    "python -m pipelines.vocab --config paper --input s3://bucket/sentences --output "
    "s3://bucket/vocab --runner DaskRunner",
)


def build_parser() -> argparse.ArgumentParser:
    p = command_parser("python -m pipelines.vocab", SUMMARY, DETAILS, EXAMPLES)
    p.add_argument(
        "--input",
        required=True,
        metavar="SENTENCES_DIR",
        help="corpus output folder holding <lang>/*.parquet with a `text` column",
    )
    add_output_option(
        p,
        "writes DIR/vocab.txt, tokenizer.json, vocab_stats.json, stats.json, "
        "word_counts.parquet, heldout.parquet, languages.json",
    )
    p.add_argument(
        "--vocab-size",
        type=int,
        metavar="N",
        help="target vocabulary size, reserved tokens included (preset: vocab_size)",
    )
    p.add_argument(
        "--smoothing",
        type=float,
        metavar="ALPHA",
        help="language smoothing exponent in [0, 1]: 1 = raw counts, 0.3 = LaBSE",
    )
    add_config_options(p, "vocab", "learner.max_unique_chars=30000")
    p.add_argument(
        "--min-count", type=float, metavar="C", help="drop words whose smoothed count is below C"
    )
    p.add_argument(
        "--max-word-length",
        type=int,
        metavar="L",
        help="drop word occurrences longer than L characters (BERT maps them to [UNK])",
    )
    p.add_argument(
        "--heldout-fraction",
        type=float,
        metavar="F",
        help="hashed fraction of sentences kept back for vocab_stats.json",
    )
    p.add_argument(
        "--max-heldout-per-lang",
        type=int,
        metavar="N",
        help="at most N held-out sentences per language are evaluated",
    )
    add_overwrite_option(p, "non-empty DIR (the old files are removed at the end)")
    add_log_level_option(p)
    return p


def resolve_config(args: argparse.Namespace) -> VocabConfig:
    """The typed ``vocab`` section: preset, then --set, then explicit flags (flags win)."""
    flags = {
        "vocab_size": args.vocab_size,
        "smoothing": args.smoothing,
        "min_count": args.min_count,
        "max_word_length": args.max_word_length,
        "heldout_fraction": args.heldout_fraction,
        "max_heldout_per_lang": args.max_heldout_per_lang,
    }
    return load_config("vocab", args, flags)


def _params(cfg: VocabConfig) -> LearnerParams:
    return LearnerParams(cfg.vocab_size, cfg.learner)


def _sample_texts(files: list[tuple[str, str]]) -> Iterator[str]:
    """Up to SAMPLE_ROWS sentences, the first rows of each file in turn (first row group only)."""
    left = SAMPLE_ROWS
    for _, path in files:
        try:
            batch = next(
                iter_parquet_batches(path, ["text"], "--input", min(left, SAMPLE_ROWS_PER_FILE)),
                None,
            )
        except InputError:  # a damaged file is the job's to count, not the sample's
            continue
        if batch is not None:
            yield from (t for t in batch.column(0).to_pylist() if isinstance(t, str))
            left -= batch.num_rows
        if left <= 0:
            return


def check_vocab_size(cfg: VocabConfig, langs: list[str], files: list[tuple[str, str]]) -> None:
    """Fail before counting when vocab_size cannot hold the alphabet a sample already needs."""
    need, n_chars = min_vocab_size_from_sample(
        _sample_texts(files),
        len(langs),
        _params(cfg),
        cfg.smoothing,
        cfg.min_count,
        cfg.max_word_length,
        cfg.heldout_fraction,
    )
    if cfg.vocab_size < need:
        raise UsageError(
            f"vocab.vocab_size={cfg.vocab_size} cannot hold the alphabet: a sample of the input "
            f"already has {n_chars} characters, which with their ## forms and the reserved tokens "
            f"need at least {need} entries; raise vocab_size or lower learner.max_unique_chars"
        )


def run(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, beam_args = parser.parse_known_args(argv)
    setup_logging(args.log_level)
    # Remote paths are checked in _run, with the job's own S3 options once they are parsed.
    return run_main(lambda: _run(args, beam_args), log, args=args, check_remote=False)


def _run(args: argparse.Namespace, beam_args: list[str]) -> int:
    cfg = resolve_config(args)
    opts = pipeline_options(beam_args)  # first: it gives FileSystems the S3/GCS options
    check_remote([args.input], opts)
    langs, files = discover_inputs(args.input)
    require_columns([path for _, path in files], ["text"])
    check_vocab_size(cfg, langs, files)
    log.info("vocab: %d languages, %d files -> %s", len(langs), len(files), args.output)
    # A useless input or a full disk on a worker aborts (nothing is left; the latter is one
    # line, exit 2); a failed learner is committed too: the counts are kept for a rerun.
    with claim_output(args.output, args.overwrite) as out:
        problem = _run_into(out.path, args.output, langs, files, cfg, opts)  # OUTPUT/_tmp-<id>/
    if problem:
        raise UsageError(problem)
    print_report(args.output)
    return 0


def _run_into(
    output: str, final: str, langs: list[str], files: list[tuple[str, str]], cfg, opts
) -> str | None:
    """The job and the learner, writing into ``output``; a learner problem as a message."""
    with new_pipeline(opts) as p:
        build_pipeline(p, files, output, cfg)
        run_pipeline(p)
    remove_spill(output)  # emptied shard folders

    beam_dir = FileSystems.join(output, BEAM_DIR)
    counter = StageCounter()
    counter.merge(json.loads(_read_text(FileSystems.join(beam_dir, "counts.json"))))
    if not counter.counts[f"{FILES}/out"]:  # every file damaged or foreign: nothing to learn
        raise InputError(
            None if len(files) > 1 else files[0][1],
            f"no readable Parquet file ({len(files)} unreadable, see the warnings above)",
            "--input",
        )
    rows = [
        json.loads(ln)
        for ln in _read_text(FileSystems.join(beam_dir, "languages.jsonl")).splitlines()
        if ln
    ]
    tables = {lang: t for lang, t in rows}
    totals = {lang: t.get("totals", 0) for lang, t in tables.items() if t.get("totals", 0) > 0}
    counter.add_in(LANGS, len(langs))
    counter.add_out(LANGS, len(totals))
    counter.add_dropped(LANGS, "empty", len(langs) - len(totals))
    for lang in sorted(set(langs) - set(totals)):
        log.warning("language %s has no words to count", lang)
    summary = language_summary(
        totals,
        {lang: t.get("sentences", 0) for lang, t in tables.items()},
        {lang: t.get("types", 0) for lang, t in tables.items()},
        cfg.smoothing,
    )
    with FileSystems.create(FileSystems.join(output, SUMMARY_FILE)) as f:
        f.write((json.dumps(summary, indent=2) + "\n").encode("utf-8"))

    extra = {
        k: getattr(cfg, k)
        for k in ("smoothing", "min_count", "max_word_length", "heldout_fraction")
    }
    try:
        if is_remote(output):
            # The learner reads and writes with local file APIs (pyarrow, tokenizers): the Beam
            # job's tables come down to a staging folder, the learner's files go up from it.
            import shutil
            import tempfile

            with tempfile.TemporaryDirectory(prefix="labse-vocab-") as local:
                for name in (COUNTS_FILE, HELDOUT_FILE):
                    with (
                        FileSystems.open(FileSystems.join(output, name)) as src,
                        open(os.path.join(local, name), "wb") as dst,
                    ):
                        shutil.copyfileobj(src, dst, 8 << 20)
                words, counts = read_counts(os.path.join(local, COUNTS_FILE))
                heldout = read_heldout(os.path.join(local, HELDOUT_FILE))
                learned = os.path.join(local, "learned")
                os.makedirs(learned)
                finish_vocab(words, counts, _params(cfg), learned, counter, heldout, summary, extra)
                upload_tree(learned, output)
        else:
            words, counts = read_counts(FileSystems.join(output, COUNTS_FILE))
            heldout = read_heldout(FileSystems.join(output, HELDOUT_FILE))
            finish_vocab(words, counts, _params(cfg), output, counter, heldout, summary, extra)
    except VocabTooSmall as e:  # the sample missed characters the whole corpus has
        return (
            f"{e} (the counts are kept: rerun only the learner with python -m "
            f"labse_model.vocab --counts {final}/{COUNTS_FILE})"
        )
    return None


def print_report(output: str) -> None:
    """A short table of the per-language coverage (CLI report, printed on purpose)."""
    stats = json.loads(_read_text(FileSystems.join(output, "vocab_stats.json")))
    print(
        f"vocab: {stats['vocab_size']} tokens (threshold {stats['threshold']:.4g}, "
        f"learned in {stats['learn_seconds']:.1f}s) -> {output}"
    )
    print(
        f"{'lang':<8}{'sentences':>10}{'raw share':>11}{'smoothed':>10}{'unk rate':>10}{'wp/word':>9}"
    )
    for lang, s in stats["languages"].items():
        h = s.get("heldout") or {}
        unk = h.get("unk_rate")
        wpw = h.get("wordpieces_per_word")
        print(
            f"{lang:<8}{s.get('sentences', 0):>10}{s.get('raw_share', 0):>11.4f}"
            f"{s.get('smoothed_share', 0):>10.4f}"
            f"{'-' if unk is None else f'{unk:.4f}':>10}{'-' if wpw is None else f'{wpw:.3f}':>9}"
        )


if __name__ == "__main__":
    exit_with(run)
