"""``python -m filters apply``: keep the scored pairs at or above the calibrated threshold."""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from tqdm import tqdm

from filters.bitext.cds.cliutil import (
    add_config_args,
    load_config,
    run_cli,
)
from filters.bitext.pair_io import PairFileError, PairWriter, iter_pair_batches
from filters.steps import Chain, KeepSummary, Step, chain_report
from labse_common.config import load
from labse_common.output_dir import OutputDir
from labse_common.stats import check_balanced, write_report

log = logging.getLogger("filters.apply")
STAGE = "apply"
UNIT = "pairs"


class HasScore(Step):
    """Drop pairs without a finite score (NaN from a failed or skipped scoring)."""

    name = "scored"

    def __call__(self, score: float) -> str | None:
        return None if score is not None and math.isfinite(score) else "no_score"


class AtLeast(Step):
    """Keep pairs whose score is at least the calibrated threshold (the rule calibrate used)."""

    name = "cds_threshold"

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold

    def __call__(self, score: float) -> str | None:
        return None if score >= self.threshold else "below_threshold"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m filters apply",
        description=(
            "Apply a calibrated threshold (python -m filters calibrate) to scored pairs "
            "(python -m filters cds-score). Writes DIR/kept.parquet and DIR/kept.tsv.gz (every "
            "input column: src, trg, margin, cds_score, ...; TSV without header, src and trg "
            "first), the Moses two-file export DIR/corpus.<src_lang> and DIR/corpus.<trg_lang> "
            "(one sentence per line, line i translates line i; with several language pairs one "
            "folder DIR/<src>-<trg>/ each), with --write-rejected DIR/rejected.{parquet,tsv.gz} "
            "(plus step and reason columns), and DIR/stats.json: pairs in/out/dropped per reason, "
            "each step's counts and what it kept by language pair and by length bucket."
        ),
    )
    p.add_argument("--scored", required=True, metavar="SCORED.parquet", help="cds-score output")
    p.add_argument("--threshold", required=True, metavar="THRESHOLD.json",
                   help="calibrate's threshold.json (its threshold and score_column are used)")  # fmt: skip
    p.add_argument("--output", required=True, metavar="DIR", help="output directory")
    p.add_argument("--write-rejected", action="store_true", help="also write the rejected pairs with their reason")
    p.add_argument("--src-lang", default="", help="source language for the Moses file names when the "
                   "input has no src_lang column (default: src)")  # fmt: skip
    p.add_argument("--trg-lang", default="", help="target language, likewise (default: trg)")
    p.add_argument("--rules-stats", metavar="STATS.json",
                   help="stats.json of the rules step that produced these pairs: its per-step counts "
                   "and summary are carried into this stats.json under 'previous'")  # fmt: skip
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty DIR")
    add_config_args(p)
    return p


def read_threshold(path: str) -> tuple[float, str]:
    if not Path(path).is_file():
        raise FileNotFoundError(f"--threshold file not found: {path}")
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
        t, col = float(doc["threshold"]), str(doc.get("score_column", "cds_score"))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"--threshold {path}: not a calibrate threshold.json ({e})") from None
    if not math.isfinite(t):
        raise ValueError(f"--threshold {path}: threshold {t} is not finite")
    return t, col


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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def body() -> int:
        cfg = load_config(args)
        threshold, col = read_threshold(args.threshold)
        if not Path(args.scored).is_file():
            raise FileNotFoundError(f"--scored file not found: {args.scored}")
        try:
            schema = pq.read_schema(args.scored)
        except (pa.ArrowInvalid, OSError) as e:
            raise PairFileError(f"--scored {args.scored}: not a Parquet file ({e})") from None
        if col not in schema.names:
            raise PairFileError(f"--scored {args.scored}: no {col!r} column; run python -m filters cds-score first")
        previous = None
        if args.rules_stats:
            previous = json.loads(Path(args.rules_stats).read_text(encoding="utf-8"))
        lang_cols = [c for c in ("src_lang", "trg_lang") if c in schema.names]
        default = (args.src_lang or "src", args.trg_lang or "trg")
        pairs_seen = {("src", "trg")}
        if lang_cols:
            t = pq.read_table(args.scored, columns=lang_cols)
            sl = t.column("src_lang").to_pylist() if "src_lang" in lang_cols else [default[0]] * t.num_rows
            tl = t.column("trg_lang").to_pylist() if "trg_lang" in lang_cols else [default[1]] * t.num_rows
            pairs_seen = {(a or default[0], b or default[1]) for a, b in zip(sl, tl)}
        t0 = time.perf_counter()
        # Claimed now; committed when the block ends, removed if it raises.
        with OutputDir(args.output, args.overwrite).open() as out:
            tmp = Path(out.tmp)
            chain = Chain([HasScore(), AtLeast(threshold)], unit=UNIT)
            # The same length buckets as the rules step, so the two summaries line up.
            summary = KeepSummary(load("pair_rules", args.config).length_buckets)
            kept_w = PairWriter(tmp, "kept")
            rej_w = PairWriter(tmp, "rejected") if args.write_rejected else None
            moses = MosesExport(tmp, sorted(pairs_seen))
            ok = False
            try:
                with tqdm(unit=" pairs", desc="apply", disable=not cfg.progress) as bar:
                    for batch in iter_pair_batches(args.scored, batch_rows=65536):
                        scores = batch.column(batch.schema.names.index(col)).to_pylist()
                        outcomes = chain.decide(scores)
                        src = batch.column(0).to_pylist()
                        trg = batch.column(1).to_pylist()
                        sl = _langs(batch, "src_lang", default[0])
                        tl = _langs(batch, "trg_lang", default[1])
                        summary.add_outcomes(chain.step_names, outcomes, [f"{a}-{b}" for a, b in zip(sl, tl)],
                                             [min(len(s), len(t)) for s, t in zip(src, trg)])  # fmt: skip
                        keep = pa.array([o is None for o in outcomes], pa.bool_())
                        kept = batch.filter(keep)
                        kept_w.write(kept)
                        idx = [i for i, o in enumerate(outcomes) if o is None]
                        moses.write([src[i] for i in idx], [trg[i] for i in idx],
                                    [sl[i] for i in idx], [tl[i] for i in idx])  # fmt: skip
                        if rej_w is not None:
                            gone = [o for o in outcomes if o is not None]
                            rej = batch.filter(pc.invert(keep))
                            rej = rej.append_column("step", pa.array([o[0] for o in gone], pa.string()))
                            rej = rej.append_column("reason", pa.array([o[1] for o in gone], pa.string()))
                            rej_w.write(rej)
                        bar.update(batch.num_rows)
                if not chain.counts.get(f"{UNIT}/in"):
                    raise PairFileError(f"--scored {args.scored}: no pairs")
                files = [*kept_w.close(), *(rej_w.close() if rej_w is not None else ()),
                         *moses.close(commit=True)]
                ok = True
            finally:
                if not ok:
                    kept_w.discard()
                    if rej_w is not None:
                        rej_w.discard()
                    moses.close(commit=False)
            flat = dict(chain.counts)
            if moses.newlines:
                flat[f"{UNIT}/event/line_break_replaced"] = moses.newlines
            report = chain_report(STAGE, flat, chain.step_names)
            report["summary"] = summary.to_dict(chain.step_names)
            report.update(
                scored=args.scored, threshold=threshold, score_column=col, threshold_file=args.threshold,
                outputs=[os.path.join(args.output, os.path.relpath(p, tmp)) for p in files],
                seconds=round(time.perf_counter() - t0, 3),
            )
            if previous is not None:
                report["previous"] = {"stage": previous.get("stage"), "steps": previous.get("steps"),
                                      "summary": previous.get("summary")}  # fmt: skip
            problems = check_balanced(report) + check_balanced({"counts": report["steps"]})
            if problems:
                raise RuntimeError("unbalanced counts: " + "; ".join(problems))
            write_report(str(tmp / "stats.json"), report)
        c = report["counts"][UNIT]
        print(f"apply: {c['in']} pairs in, {c['out']} kept ({c['out'] / max(1, c['in']):.1%}) at "
              f"{col} >= {threshold:.4f} -> {args.output}")  # fmt: skip
        for reason, n in sorted(c["dropped"].items(), key=lambda kv: -kv[1]):
            print(f"  {reason:<24} {n}")
        return 0

    return run_cli("apply", body)
