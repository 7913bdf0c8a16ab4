"""alias: keep the pairs at calibrate's single-score threshold, with Moses export and rejected

``python -m filters apply --scored SCORED.parquet --threshold THRESHOLD.json --output DIR``

An alias kept for existing scripts. The final filter is ``python -m filters combine`` (which
writes every pair's keep decision itself, and ``filters export --combined`` the bitext); this
applies the threshold of its one-feature special case, ``python -m filters calibrate``
(``combine.features=[cds_score]``), to scored pairs (python -m filters cds-score): a pair is
kept when its score column is at or past the threshold in threshold.json's ``direction``
(``higher``, the default: score >= threshold; ``lower``: score <= threshold), which keeps exactly
the pairs the one-feature combined score keeps. Writes, into the claimed folder DIR (committed at
the end): DIR/kept.parquet and DIR/kept.tsv.gz (every input column: src, trg, margin, cds_score,
...; TSV without header, src and trg first), the Moses two-file export DIR/corpus.<src_lang> and
DIR/corpus.<trg_lang> (one sentence per line, line i translates line i; with several language
pairs one folder DIR/<src>-<trg>/ each), with --write-rejected DIR/rejected.{parquet,tsv.gz}
(plus step and reason columns), and DIR/stats.json: pairs in/out/dropped per reason, each step's
counts and what it kept by language pair and by length bucket. The score column must be numeric
(a column stored as text is refused, as calibrate refuses it).
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from tqdm import tqdm

from filters.bitext.cliutil import (
    add_common_options,
    check_score_type,
    run_command,
    score_values,
    section_config,
    write_stats,
)
from filters.bitext.pair_io import PairWriter, iter_pair_batches
from filters.steps import Chain, KeepSummary, Step, chain_report
from labse_common.cli import command_parser, doc_details
from labse_common.config import load
from labse_common.datafiles import LostRows, iter_parquet_surviving, parquet_file, read_json
from labse_common.errors import InputError
from labse_common.output_dir import claim_output
from labse_common.stats import StageCounter

log = logging.getLogger("filters.apply")
STAGE = "apply"
UNIT = "pairs"


class HasScore(Step):
    """Drop pairs without a finite score (NaN from a failed or skipped scoring)."""

    name = "scored"

    def __call__(self, score: float) -> str | None:
        return None if score is not None and math.isfinite(score) else "no_score"


class AtLeast(Step):
    """Keep pairs whose score is at or past the calibrated threshold (the rule calibrate used):
    ``score >= threshold``, or ``score <= threshold`` where lower scores are the better ones."""

    name = "cds_threshold"

    def __init__(self, threshold: float, direction: str = "higher") -> None:
        self.threshold = threshold
        self.higher = direction == "higher"

    def __call__(self, score: float) -> str | None:
        if self.higher:
            return None if score >= self.threshold else "below_threshold"
        return None if score <= self.threshold else "above_threshold"


def build_parser() -> argparse.ArgumentParser:
    p = command_parser(
        "python -m filters apply",
        "Keep the scored pairs at or past the single-score threshold calibrate chose, and export them (an alias kept for existing scripts: the final filter is combine).",
        doc_details(__doc__),
        examples=[
            "python -m filters apply --scored cds/scored.parquet --threshold calibrate/threshold.json --output kept/",
        ],
    )
    p.add_argument("--scored", required=True, metavar="SCORED.parquet", help="cds-score output")
    p.add_argument(
        "--threshold",
        required=True,
        metavar="THRESHOLD.json",
        help="calibrate's threshold.json (its threshold and score_column are used)",
    )
    p.add_argument(
        "--write-rejected",
        action="store_true",
        help="also write the rejected pairs with their reason",
    )
    p.add_argument(
        "--src-lang",
        default="",
        help="source language for the Moses file names when the "
        "input has no src_lang column (default: src)",
    )
    p.add_argument("--trg-lang", default="", help="target language, likewise (default: trg)")
    p.add_argument(
        "--rules-stats",
        metavar="STATS.json",
        help="stats.json of the rules step that produced these pairs: its per-step counts "
        "and summary are carried into this stats.json under 'previous'",
    )
    add_common_options(p, "cds", "output folder (kept.*, corpus.*, rejected.*, stats.json)")
    return p


def read_threshold(path: str) -> tuple[float, str, str]:
    """(threshold, score column, direction) of calibrate's threshold.json."""
    doc = read_json(path, "--threshold", expect=dict)
    if "threshold" not in doc:
        raise InputError(path, "not a calibrate threshold.json (no 'threshold' key)", "--threshold")
    raw, col = doc["threshold"], doc.get("score_column", "cds_score")
    direction = doc.get("direction", "higher")  # files written before the alias had none
    # float() would read true as 1.0 and "0.5" as 0.5: calibrate writes a JSON number, so
    # anything else means the file is not its output (bool is an int subclass, hence checked).
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise InputError(
            path,
            f"threshold {raw!r} is not a number ({type(raw).__name__}); "
            "calibrate writes a real number",
            "--threshold",
        )
    if not isinstance(col, str) or not col:
        raise InputError(path, f"score_column {col!r} is not a column name", "--threshold")
    if direction not in ("higher", "lower"):
        raise InputError(path, f"direction {direction!r} is not higher or lower", "--threshold")
    t = float(raw)
    if not math.isfinite(t):
        raise InputError(path, f"threshold {t} is not finite", "--threshold")
    return t, col, direction


def _langs(batch: pa.RecordBatch, name: str, default: str) -> list[str]:
    if name not in batch.schema.names:
        return [default] * batch.num_rows
    return [v or default for v in batch.column(batch.schema.names.index(name)).to_pylist()]


class MosesExport:
    """``corpus.<src>`` / ``corpus.<trg>`` per language pair, written to temp names first."""

    def __init__(self, out: Path, lang_pairs: list[tuple[str, str]]) -> None:
        self.out = out
        self.single = len(lang_pairs) <= 1
        self.files: dict[tuple[str, str], tuple] = {}
        self.paths: list[Path] = []
        self.newlines = 0

    def _open(self, sl: str, tl: str):
        folder = self.out if self.single else self.out / f"{sl}-{tl}"
        folder.mkdir(parents=True, exist_ok=True)
        # Same code on both sides (unknown languages): name the files by side.
        a, b = (sl, tl) if sl != tl else (f"{sl}.src", f"{tl}.trg")
        paths = (folder / f"corpus.{a}", folder / f"corpus.{b}")
        fh = tuple(open(str(p) + ".tmp", "w", encoding="utf-8", newline="\n") for p in paths)
        self.files[(sl, tl)] = fh
        self.paths += list(paths)
        return fh

    def _clean(self, text: str) -> str:
        # One sentence per line is the format: a line break inside would misalign the files.
        if "\n" in text or "\r" in text:
            self.newlines += 1
            return text.replace("\r\n", " ").replace("\n", " ").replace("\r", " ")
        return text

    def write(self, src: list[str], trg: list[str], sl: list[str], tl: list[str]) -> None:
        for s, t, a, b in zip(src, trg, sl, tl):
            fs, ft = self.files.get((a, b)) or self._open(a, b)
            fs.write(self._clean(s) + "\n")
            ft.write(self._clean(t) + "\n")

    def close(self, commit: bool) -> list[str]:
        for fh in self.files.values():
            for f in fh:
                f.close()
        for p in self.paths:
            tmp = Path(str(p) + ".tmp")
            if commit:
                os.replace(tmp, p)
            else:
                tmp.unlink(missing_ok=True)
        return [str(p) for p in self.paths]


def _language_pairs(path: str, lang_cols: list[str], default: tuple[str, str]) -> set:
    """The (src_lang, trg_lang) pairs of the file's readable rows (a damaged row group is
    skipped here and counted by the main read)."""
    seen: set = set()
    for batch in iter_parquet_surviving(path, lang_cols, "--scored"):
        if isinstance(batch, LostRows):
            continue
        n = batch.num_rows
        names = batch.schema.names
        sl = (
            batch.column(names.index("src_lang")).to_pylist()
            if "src_lang" in names
            else [default[0]] * n
        )
        tl = (
            batch.column(names.index("trg_lang")).to_pylist()
            if "trg_lang" in names
            else [default[1]] * n
        )
        seen.update((a or default[0], b or default[1]) for a, b in zip(sl, tl))
    return seen


def _previous(path: str | None) -> dict | None:
    if not path:
        return None
    doc = read_json(path, "--rules-stats", expect=dict)
    return {"stage": doc.get("stage"), "steps": doc.get("steps"), "summary": doc.get("summary")}


class Writers:
    """Where the decided pairs go: kept (Parquet + TSV.gz), Moses files, rejected (optional)."""

    def __init__(self, tmp: Path, pairs_seen: set, rejected: bool) -> None:
        self.kept = PairWriter(tmp, "kept")
        self.rejected = PairWriter(tmp, "rejected") if rejected else None
        self.moses = MosesExport(tmp, sorted(pairs_seen))

    def write(self, batch: pa.RecordBatch, outcomes: list, langs: tuple[list, list]) -> None:
        keep = pa.array([o is None for o in outcomes], pa.bool_())
        self.kept.write(batch.filter(keep))
        idx = [i for i, o in enumerate(outcomes) if o is None]
        src, trg = batch.column(0).to_pylist(), batch.column(1).to_pylist()
        self.moses.write(
            [src[i] for i in idx],
            [trg[i] for i in idx],
            [langs[0][i] for i in idx],
            [langs[1][i] for i in idx],
        )
        if self.rejected is not None:
            gone = [o for o in outcomes if o is not None]
            rej = batch.filter(pc.invert(keep))
            rej = rej.append_column("step", pa.array([o[0] for o in gone], pa.string()))
            rej = rej.append_column("reason", pa.array([o[1] for o in gone], pa.string()))
            self.rejected.write(rej)

    def close(self) -> list[str]:
        return [
            *self.kept.close(),
            *(self.rejected.close() if self.rejected is not None else ()),
            *self.moses.close(commit=True),
        ]

    def discard(self) -> None:
        self.kept.discard()
        if self.rejected is not None:
            self.rejected.discard()
        self.moses.close(commit=False)


def _decide_all(
    args: argparse.Namespace,
    chain: Chain,
    col: str,
    reader: StageCounter,
    summary: KeepSummary,
    out: Writers,
    progress: bool,
) -> None:
    """Every pair of --scored through the chain, each decision written where it belongs."""
    default = (args.src_lang or "src", args.trg_lang or "trg")
    with tqdm(unit=" pairs", desc="apply", disable=not progress) as bar:
        # A row group that does not decode costs its own pairs (counted damaged_row_group), not
        # the run: each pair's decision stands alone.
        for batch in iter_pair_batches(
            args.scored, reader, batch_rows=65536, flag="--scored", survive_damage=True
        ):
            outcomes = chain.decide(
                score_values(batch.column(batch.schema.names.index(col))).tolist()
            )
            src, trg = batch.column(0).to_pylist(), batch.column(1).to_pylist()
            langs = (_langs(batch, "src_lang", default[0]), _langs(batch, "trg_lang", default[1]))
            summary.add_outcomes(
                chain.step_names,
                outcomes,
                [f"{a}-{b}" for a, b in zip(*langs)],
                [min(len(s), len(t)) for s, t in zip(src, trg)],
            )
            out.write(batch, outcomes, langs)
            bar.update(batch.num_rows)
    if not chain.counts.get(f"{UNIT}/in"):
        raise InputError(args.scored, "no pairs", "--scored")


def _seen_language_pairs(args: argparse.Namespace, schema: pa.Schema) -> set:
    lang_cols = [c for c in ("src_lang", "trg_lang") if c in schema.names]
    if not lang_cols:
        return {("src", "trg")}
    return _language_pairs(args.scored, lang_cols, (args.src_lang or "src", args.trg_lang or "trg"))


def _report(
    args: argparse.Namespace,
    chain: Chain,
    reader: StageCounter,
    summary: KeepSummary,
    newlines: int,
    rule: tuple[float, str, str],
    extra: dict,
) -> dict:
    flat = Counter(chain.counts)
    flat.update(reader.counts)
    if newlines:
        flat[f"{UNIT}/event/line_break_replaced"] = newlines
    report = chain_report(STAGE, flat, chain.step_names)
    report["summary"] = summary.to_dict(chain.step_names)
    threshold, col, direction = rule
    report.update(
        scored=args.scored,
        threshold=threshold,
        score_column=col,
        direction=direction,
        threshold_file=args.threshold,
        **extra,
    )
    return report


def _apply(args: argparse.Namespace) -> dict:
    cfg = section_config("cds", args)
    # The rules' length buckets (the preset's; --set is for the cds keys), so the two
    # summaries line up.
    rules_cfg = load("pair_rules", args.config)
    threshold, col, direction = read_threshold(args.threshold)
    schema = parquet_file(args.scored, "--scored").schema_arrow
    check_score_type(schema, col, args.scored, "--scored")
    previous = _previous(args.rules_stats)  # a bad one stops before the output is claimed
    pairs_seen = _seen_language_pairs(args, schema)
    t0 = time.perf_counter()
    # Claimed now; committed when the block ends, removed if it raises.
    with claim_output(args.output, args.overwrite) as out:
        tmp = Path(out.tmp)
        chain = Chain([HasScore(), AtLeast(threshold, direction)], unit=UNIT)
        reader = StageCounter()  # what reading lost (damaged row groups) and the file count
        reader.add_in("files")
        summary = KeepSummary(rules_cfg.length_buckets)
        writers = Writers(tmp, pairs_seen, args.write_rejected)
        try:
            _decide_all(args, chain, col, reader, summary, writers, cfg.progress)
            files = writers.close()
        except BaseException:
            writers.discard()
            raise
        reader.add_out("files")
        outputs = [os.path.relpath(p, tmp) for p in files]
        extra = {"outputs": outputs, "seconds": round(time.perf_counter() - t0, 3)}
        if previous is not None:
            extra["previous"] = previous
        rule = (threshold, col, direction)
        report = _report(args, chain, reader, summary, writers.moses.newlines, rule, extra)
        write_stats(tmp, report)
    return report


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def body() -> int:
        report = _apply(args)
        c = report["counts"][UNIT]
        keeps = ">=" if report["direction"] == "higher" else "<="
        print(
            f"apply: {c['in']} pairs in, {c['out']} kept ({c['out'] / max(1, c['in']):.1%}) at "
            f"{report['score_column']} {keeps} {report['threshold']:.4f} -> {args.output}"
        )
        for reason, n in sorted(c["dropped"].items(), key=lambda kv: -kv[1]):
            print(f"  {reason:<24} {n}")
        return 0

    return run_command(args, body, log, "apply")
