"""Train (and try) the fastText main-content vs boilerplate classifier from the jobs' own output.

The bootstrap, step by step (each step's output can be opened and read):

1. ``python -m pipelines.wikipedia --input DUMP --output wiki``            Wikipedia sentences
2. ``python -m pipelines.commoncrawl --input WET --output cc --write-dropped``
   With no quality model, CommonCrawl lines are scored by the rules in filters/mono/boilerplate.py:
   kept lines are content-like, ``cc/_dropped`` rows with reason ``low_quality`` are
   boilerplate-like (menus, share buttons, cookie and legal notices, dates).
   Rows dropped because LID was unsure are often boilerplate too ("Skip to main content"), so
   they count as negatives when the rules also score them <= --negative-max-rule-score.
3. ``python -m pipelines.quality train --positive wiki --positive cc --negative cc --output q.bin``
   The model is claimed by ``q.bin._CLAIM.json`` beside it (a second writer of the same model
   stops with exit 2) and its files are written under temporary names, renamed into place only
   when training has succeeded, so a failed run leaves no half model.
   Positives: sentences of the given output folders (``DIR/<lang>/*.parquet``), optionally only
   those with quality_score >= --positive-min-score. Negatives: ``DIR/_dropped`` rows with the
   given reasons. Classes are balanced; 10% is held out and precision/recall are written to
   ``q.bin.report.json``; the exact training lines are kept in ``q.bin.train.txt``.
4. ``python -m pipelines.commoncrawl ... --quality-model q.bin``            re-clean with the model

``python -m pipelines.quality score --model q.bin "some line" ...`` prints the scores.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import logging
import os
import sys
from collections.abc import Iterable, Sequence

from filters.mono.boilerplate import heuristic_quality
from filters.mono.quality import (
    QualityScorer,
    QualityTrainParams,
    TrainReport,
    train_quality_model,
)
from labse_common.cli import (
    add_log_level_option,
    add_output_option,
    command_parser,
    doc_details,
    exit_with,
    run_main,
    sub_command,
)
from labse_common.datafiles import read_parquet
from labse_common.errors import InputError, UsageError
from labse_common.logs import setup_logging
from labse_common.output_dir import claim_output
from labse_common.remote import require_local

log = logging.getLogger(__name__)

# What train writes: MODEL plus these files beside it (filters.mono.quality.train_quality_model).
MODEL_SUFFIXES = (".train.txt", ".test.txt", ".report.json", "")
# The training flags' defaults are the library's (one place).
TRAIN_DEFAULTS = QualityTrainParams()


def _parquet_files(pattern: str) -> list[str]:
    return sorted(glob.glob(pattern))


def read_positive(dirs: Iterable[str], min_score: float) -> list[str]:
    texts: list[str] = []
    for d in dirs:
        files = [
            f
            for f in _parquet_files(os.path.join(d, "*", "*.parquet"))
            if os.path.basename(os.path.dirname(f)) != "_dropped"
        ]
        if not files:
            raise InputError(d, "no sentence Parquet files in <lang>/", "--positive")
        for f in files:
            t = read_parquet(
                f, ["text", "quality_score"], "--positive", required=["text", "quality_score"]
            ).to_pydict()
            texts += [x for x, q in zip(t["text"], t["quality_score"]) if (q or 0) >= min_score]
    return texts


def read_negative(dirs: Iterable[str], reasons: set[str], max_rule_score: float) -> list[str]:
    texts: list[str] = []
    for d in dirs:
        files = _parquet_files(os.path.join(d, "_dropped", "*.parquet"))
        if not files:
            raise InputError(
                d, "no dropped rows in _dropped/ (run the job with --write-dropped)", "--negative"
            )
        for f in files:
            t = read_parquet(
                f, ["text", "reason"], "--negative", required=["text", "reason"]
            ).to_pydict()
            texts += [
                x
                for x, r in zip(t["text"], t["reason"])
                if r in reasons and heuristic_quality(x) <= max_rule_score
            ]
    return texts


def parser() -> argparse.ArgumentParser:
    p = command_parser(
        "python -m pipelines.quality",
        "Train (and try) the fastText classifier of main content against boilerplate from the "
        "corpus jobs' own output.",
        doc_details(__doc__),
        examples=[
            "python -m pipelines.quality train --positive wiki --positive cc --negative cc "
            "--output q.bin",
            "python -m pipelines.quality score --model q.bin 'Accept all cookies'",
        ],
    )
    add_log_level_option(p)
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub_command(
        sub,
        "train",
        "Train the classifier from corpus-job output folders.",
        examples=[
            "python -m pipelines.quality train --positive wiki --positive cc --negative cc "
            "--output q.bin"
        ],
    )
    t.add_argument(
        "--positive",
        action="append",
        required=True,
        metavar="DIR",
        help="corpus output folder whose kept sentences are content (repeatable)",
    )
    t.add_argument(
        "--negative",
        action="append",
        required=True,
        metavar="DIR",
        help="corpus output folder whose _dropped rows give boilerplate (repeatable)",
    )
    add_output_option(t, "where to write the model", metavar="MODEL")
    add_log_level_option(t, subcommand=True)
    t.add_argument(
        "--negative-reasons",
        default="low_quality,lang_low_confidence",
        metavar="R1,R2",
        help="drop reasons whose rows may be boilerplate "
        "(default: low_quality,lang_low_confidence)",
    )
    t.add_argument(
        "--negative-max-rule-score",
        type=float,
        default=0.5,
        metavar="Q",
        help="a dropped row is a negative only if the rule-based score is <= Q, so "
        "content dropped for other reasons does not teach the model (default 0.5)",
    )
    t.add_argument(
        "--positive-min-score",
        type=float,
        default=0.0,
        metavar="Q",
        help="only positives whose quality_score >= Q (default 0: all kept sentences)",
    )
    d = TRAIN_DEFAULTS
    t.add_argument("--max-per-class", type=int, default=d.max_per_class, help="cap per class")
    t.add_argument("--epoch", type=int, default=d.epoch, help="fastText epochs")
    t.add_argument("--dim", type=int, default=d.dim, help="fastText vector size")
    t.add_argument("--word-ngrams", type=int, default=d.word_ngrams, help="fastText word n-grams")
    t.add_argument(
        "--quantize", action="store_true", default=d.quantize, help="write a small quantized model"
    )
    t.add_argument("--seed", type=int, default=d.seed)
    s = sub_command(
        sub,
        "score",
        "Print the content scores of lines, with a trained model or the rule-based scorer.",
        examples=["python -m pipelines.quality score --model q.bin 'Accept all cookies'"],
    )
    s.add_argument("--model", help="model path (default: the rule-based scorer)")
    s.add_argument("lines", nargs="+", help="lines to score")
    add_log_level_option(s, subcommand=True)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    setup_logging(args.log_level)
    # One error mapping; every s3:// / gs:// value is preflighted before the command runs.
    return run_main(lambda: _score(args) if args.cmd == "score" else _train(args), log, args=args)


def _scorer(path: str | None) -> QualityScorer:
    if path is None:
        return QualityScorer(None)
    require_local(path, "--model", "reading a fastText model")
    if not os.path.isfile(path):
        raise InputError(path, "not found", "--model")
    try:  # fastText reports a foreign or damaged model as ValueError with its C++ message
        return QualityScorer(path)
    except ValueError as e:
        raise InputError(path, f"not a usable quality model ({e})", "--model") from None


def _score(args: argparse.Namespace) -> int:
    scorer = _scorer(args.model)
    for line, q in zip(args.lines, scorer.score(args.lines)):
        sys.stdout.write(f"{q:.3f}\t{line}\n")
    return 0


def _train(args: argparse.Namespace) -> int:
    # fastText writes the model and its report with local file APIs: say so before any work.
    require_local(args.output, "--output", "python -m pipelines.quality train")
    # An existing model is replaced (the command always has): overwrite=True.
    with claim_output(args.output, True, files=MODEL_SUFFIXES) as claimed:
        tmp = claimed.path
        report = _train_into(args, tmp)
        # The report names the model by the path it is renamed to, not the temporary one.
        report.model = args.output
        with open(f"{tmp}.report.json", "w", encoding="utf-8") as f:
            json.dump(report.__dict__, f, indent=2)
    log.info("trained %s", json.dumps(report.__dict__))
    return 0


def _train_into(args: argparse.Namespace, tmp: str) -> TrainReport:
    pos = read_positive(args.positive, args.positive_min_score)
    neg = read_negative(
        args.negative, set(args.negative_reasons.split(",")), args.negative_max_rule_score
    )
    for flag, texts in (("--positive", pos), ("--negative", neg)):
        if not texts:
            raise UsageError(
                f"{flag}: no training rows selected (check the folders and the "
                "score/reason options)"
            )
    params = dataclasses.replace(
        TRAIN_DEFAULTS,
        max_per_class=args.max_per_class,
        epoch=args.epoch,
        dim=args.dim,
        word_ngrams=args.word_ngrams,
        quantize=args.quantize,
        seed=args.seed,
    )
    return train_quality_model(pos, neg, tmp, params)


if __name__ == "__main__":
    exit_with(main)
