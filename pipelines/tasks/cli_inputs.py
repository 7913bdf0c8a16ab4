"""Read the sources' pairs, alignments and text into what a run trains on and measures against.

The training pairs as one TSV (src, trg, src_lang, trg_lang) and again one folder per
``<source>.<src>-<trg>`` (:data:`TRAIN_GROUPS`), an even sample of them as the CDS scorer's
trusted pairs, the known alignment as ``gold.tsv``, and the training sentences per language (both
sides of the pairs and the plain text) for the vocabulary and MLM.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from labse_common.cli import (
    add_log_level_option,
    add_overwrite_option,
    command_parser,
    run_main,
)
from labse_common.datafiles import read_text
from labse_common.errors import InputError
from labse_common.logs import setup_logging
from labse_common.output_dir import claim_output
from labse_common.stats import StageCounter, check_balanced, write_report
from pipelines.tasks import log_result
from pipelines.tasks.cli_score import GOLD_HEADER

log = logging.getLogger("pipelines.tasks")

SUMMARY = (
    "Read the sources' training pairs, known alignments and plain text into what a run trains on\n"
    "and measures against: train_pairs.tsv, train_groups/, trusted_pairs.tsv, gold.tsv and\n"
    "train_sentences/<lang>/."
)
DETAILS = (
    "Pair files carry {src}-{trg} in their name (TSV, Parquet, or Moses files suffixed {lang});\n"
    "text files {lang}, else each line's language is detected."
)
EXAMPLES = (
    "python -m pipelines.e2e_tasks inputs --pairs 'pairs/*.de-en.tsv' "
    "--eval 'gold/*.tsv' --text 'text/*.txt' --output inputs/",
)


def _balanced(report: dict) -> None:
    errors = check_balanced(report)
    if errors:
        raise RuntimeError(f"unbalanced stats: {errors}")


def inputs(
    pairs: list[str],
    evals: list[str],
    texts: list[str],
    out: Path,
    trusted: int,
    lid_model: str | None = None,
    lid_threshold: float = 0.5,
    overwrite: bool = False,
    demo: Path | None = None,
) -> dict:
    """What the run trains on and measures against, from the ``sources`` globs: the training pairs
    as one TSV (src, trg, src_lang, trg_lang), an even sample of them as the CDS scorer's trusted
    pairs, the known alignment as ``gold.tsv``, and the training sentences per language (both
    sides of the pairs and the plain text) for the vocabulary and MLM."""
    if demo is not None:  # the demo builder's output; it has text only where --data has UD
        from pipelines import demo_data

        pairs = [*pairs, str(demo / demo_data.PAIRS)]
        evals = [*evals, str(demo / demo_data.EVAL)]
        texts = [
            *texts,
            *([str(demo / demo_data.TEXT)] if list((demo / "text").glob("*.txt")) else []),
        ]
    with claim_output(out, overwrite) as claimed:  # written aside, committed at the end
        return _inputs_into(
            pairs, evals, texts, Path(claimed.tmp), trusted, lid_model, lid_threshold
        )


def _inputs_into(
    pairs: list[str],
    evals: list[str],
    texts: list[str],
    out: Path,
    trusted: int,
    lid_model: str | None,
    lid_threshold: float,
) -> dict:
    counter = StageCounter()
    files: list[dict] = []  # one entry per file read, for stats.json
    rows, by_lang, groups = _training_pairs(pairs, counter, files)
    (out / "train_pairs.tsv").write_text(
        "".join("\t".join(p) + "\n" for p in rows), encoding="utf-8"
    )
    # The same pairs as one folder per <source>.<src>-<trg>: the trainer mixes them by the
    # documented rule (train.source_weights between sources, mix_alpha between languages).
    for group, ranges in groups.items():
        (out / TRAIN_GROUPS / group).mkdir(parents=True)
        with open(out / TRAIN_GROUPS / group / "pairs.tsv", "w", encoding="utf-8") as f:
            for start, stop in ranges:
                f.writelines("\t".join(p) + "\n" for p in rows[start:stop])
    # The CDS scorer's trusted data: an even sample, so its training time stays bounded.
    step = max(1, -(-len(rows) // trusted))
    (out / "trusted_pairs.tsv").write_text(
        "".join("\t".join(p) + "\n" for p in rows[::step]), encoding="utf-8"
    )
    gold = _eval_pairs(evals, counter, files)
    # A header, so every pair reader (`filters sample --planted`, `score`) reads it by name.
    (out / "gold.tsv").write_text(
        "\t".join(GOLD_HEADER) + "\n" + "".join("\t".join(g) + "\n" for g in gold), encoding="utf-8"
    )
    text_by_lang = _text_sentences(texts, counter, files, lid_model, lid_threshold)
    for name, table in (("pairs", by_lang), ("text", text_by_lang)):
        for lang, sents in table.items():
            (out / "train_sentences" / lang).mkdir(parents=True, exist_ok=True)
            pq.write_table(
                pa.table(
                    {"text": sents, "lang": [lang] * len(sents), "source": [name] * len(sents)}
                ),
                out / "train_sentences" / lang / f"{name}.parquet",
            )
    (out / "train_sentences").mkdir(exist_ok=True)
    report = counter.to_report(
        "inputs",
        files=files,
        training_pairs=len(rows),
        eval_pairs=len(gold),
        trusted_pairs=len(rows[::step]),
    )
    _balanced(report)
    write_report(str(out / "stats.json"), report)
    return report


#: The training pairs again, one folder per ``<source>.<src>-<trg>`` (the train stage's input).
TRAIN_GROUPS = "train_groups"
_EXTENSIONS = (".tsv.gz", ".txt.gz", ".tsv", ".txt", ".parquet")


def train_group(pf) -> str:
    """The training group of a pair file: ``<source>.<src>-<trg>``, the source being what its
    file name holds before the language pair (``pud.de-en.tsv``: ``pud``; ``de-en.tsv``: none,
    the group is ``de-en``). ``train.source_weights`` weighs the sources by these names."""
    name = os.path.basename(pf.paths[0])
    if pf.fmt == "moses":
        name = name.rsplit(".", 1)[0]  # the side's own language suffix
    else:
        name = next((name[: -len(e)] for e in _EXTENSIONS if name.endswith(e)), name)
    pair = re.search(r"[A-Za-z0-9_]+-[A-Za-z0-9_]+$", name)
    source = re.sub(r"[^A-Za-z0-9_-]+", "_", name[: pair.start()] if pair else name).strip("_-")
    return f"{source}.{pf.src_lang}-{pf.trg_lang}" if source else f"{pf.src_lang}-{pf.trg_lang}"


def _training_pairs(
    pairs: list[str], counter: StageCounter, files: list[dict]
) -> tuple[list[tuple[str, str, str, str]], dict[str, list[str]], dict[str, list[tuple[int, int]]]]:
    """The training pairs of ``--pairs`` as (src, trg, src_lang, trg_lang), each side's
    sentences by language, and the row ranges of each training group (:func:`train_group`)."""
    from labse_common.pair_files import read_pairs_file
    from labse_common.sources import expand_pairs

    rows: list[tuple[str, str, str, str]] = []
    by_lang: dict[str, list[str]] = {}
    groups: dict[str, list[tuple[int, int]]] = {}
    for pf in expand_pairs(pairs, None, "--pairs") if pairs else []:
        n0 = len(rows)
        for s, t in read_pairs_file(pf, counter, "pairs"):
            rows.append((s, t, pf.src_lang, pf.trg_lang))
            by_lang.setdefault(pf.src_lang, []).append(s)
            by_lang.setdefault(pf.trg_lang, []).append(t)
        if len(rows) > n0:
            groups.setdefault(train_group(pf), []).append((n0, len(rows)))
        files.append(
            {
                "kind": "pairs",
                "paths": list(pf.paths),
                "pair": f"{pf.src_lang}-{pf.trg_lang}",
                "rows": len(rows) - n0,
            }
        )
    if pairs and not rows:
        raise InputError(pairs[0], "no usable training pair in any file it matches", "--pairs")
    return rows, by_lang, groups


def _eval_pairs(
    evals: list[str], counter: StageCounter, files: list[dict]
) -> list[tuple[str, str, str, str]]:
    """The known alignment of ``--eval`` as (src_lang, trg_lang, src, trg)."""
    from labse_common.pair_files import read_pairs_file
    from labse_common.sources import expand_pairs

    gold = []
    for pf in expand_pairs(evals, None, "--eval") if evals else []:
        n0 = len(gold)
        gold += [
            (pf.src_lang, pf.trg_lang, s, t) for s, t in read_pairs_file(pf, counter, "eval_pairs")
        ]
        files.append(
            {
                "kind": "eval",
                "paths": list(pf.paths),
                "pair": f"{pf.src_lang}-{pf.trg_lang}",
                "rows": len(gold) - n0,
            }
        )
    return gold


def _text_sentences(
    texts: list[str],
    counter: StageCounter,
    files: list[dict],
    lid_model: str | None,
    lid_threshold: float,
) -> dict[str, list[str]]:
    """The sentences of ``--text`` by language (the file's, else detected per line)."""
    from filters.langid import detect_lines
    from labse_common.sources import expand_texts

    text_by_lang: dict[str, list[str]] = {}
    for tf in expand_texts(texts, None, "--text") if texts else []:
        lines = [ln.strip() for ln in read_text(tf.path, "--text").splitlines()]
        counter.add_in("text_sentences", len(lines))
        kept = [ln for ln in lines if ln]
        counter.add_dropped("text_sentences", "empty", len(lines) - len(kept))
        langs = [tf.lang] * len(kept) if tf.lang else detect_lines(kept, lid_model, lid_threshold)
        for ln, lang in zip(kept, langs):
            if lang is None:
                counter.add_dropped("text_sentences", "language_unsure")
            else:
                counter.add_out("text_sentences")
                text_by_lang.setdefault(lang, []).append(ln)
        files.append(
            {"kind": "text", "paths": [tf.path], "lang": tf.lang or "detected", "rows": len(kept)}
        )
    return text_by_lang


def build_parser() -> argparse.ArgumentParser:
    p = command_parser("python -m pipelines.e2e_tasks inputs", SUMMARY, DETAILS, EXAMPLES)
    p.add_argument(
        "--pairs",
        action="append",
        default=[],
        metavar="GLOB",
        help="training pairs, {src}-{trg} in the name (TSV, Parquet, Moses {lang})",
    )
    p.add_argument(
        "--eval",
        action="append",
        default=[],
        metavar="GLOB",
        help="known alignments, the same formats",
    )
    p.add_argument(
        "--text",
        action="append",
        default=[],
        metavar="GLOB",
        help="plain text; {lang} in the name, else each line's language is detected",
    )
    p.add_argument("--demo", help="the demo builder's folder (python -m pipelines.demo_data)")
    p.add_argument(
        "--trusted", type=int, default=2000, help="trusted pairs for the CDS scorer (2000)"
    )
    p.add_argument("--lid-model", help="fastText LID model (default: the bundled lid.176.ftz)")
    p.add_argument(
        "--lid-threshold",
        type=float,
        default=0.5,
        help="a detected line below this probability is dropped (0.5)",
    )
    p.add_argument("--output", required=True, help="folder to write")
    add_overwrite_option(p)
    add_log_level_option(p)
    return p


def run(args: argparse.Namespace) -> int:
    rep = inputs(
        args.pairs,
        args.eval,
        args.text,
        Path(args.output),
        args.trusted,
        args.lid_model,
        args.lid_threshold,
        args.overwrite,
        Path(args.demo) if args.demo else None,
    )
    log_result("inputs", rep)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)
    return run_main(lambda: run(args), log, args=args)
