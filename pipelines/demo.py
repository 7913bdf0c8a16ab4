"""`make demo`: every stage end to end on an embedded default input, on one laptop (CPU).

Uses ../shared/data when it is there (the real samples), else the small samples bundled in
pipelines/sample_data for the corpus stages. Steps:

1. Wikipedia job, CommonCrawl job (rule-based quality, dropped rows kept);
2. the fastText quality classifier trained from those outputs, CommonCrawl again with it;
3. with the Tatoeba sample (../shared/data/tatoeba): the smoothed wordpiece vocabulary over the
   Tatoeba sentences plus the cleaned corpora, a tiny dual encoder trained on the train pairs
   with that vocabulary, Tatoeba dev retrieval accuracy, and mining German-English dev bitext.

Every step writes its stats.json; a summary closes the run.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from labse_common.cli import add_log_level_option
from labse_common.logs import setup_logging
from labse_common.textio import read_lines

log = logging.getLogger("demo")

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data"
BUNDLED = Path(__file__).resolve().parent / "sample_data"


def default_inputs() -> tuple[str, str]:
    wiki = SHARED / "wikipedia" / "enwiki-sample.xml.bz2"
    cc = SHARED / "commoncrawl"
    if wiki.is_file() and cc.is_dir():
        return str(wiki), str(cc / "*.gz")
    return str(BUNDLED / "enwiki-sample-15pages.xml.bz2"), str(BUNDLED / "*.warc.wet.gz")


# Tatoeba's ISO 639-3 codes -> the lid.176 labels the corpus jobs use for folder names.
TATOEBA_LANGS = {"ara": "ar", "cmn": "zh", "deu": "de", "ell": "el", "fra": "fr", "hin": "hi",
                 "ita": "it", "jpn": "ja", "kor": "ko", "nld": "nl", "pol": "pl", "por": "pt",
                 "rus": "ru", "spa": "es", "tur": "tr", "vie": "vi"}  # fmt: skip


def _lines(path: Path) -> list[str]:
    return read_lines(path)


def build_vocab_input(tatoeba: Path, corpora: list[Path], out: Path) -> None:
    """Sentences for the vocabulary: Tatoeba train (17 languages) plus the cleaned corpora."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    if out.exists():
        shutil.rmtree(out)
    by_lang: dict[str, list[str]] = {"en": []}
    for code, lang in TATOEBA_LANGS.items():
        by_lang[lang] = _lines(tatoeba / f"train.{code}-eng.{code}")
        by_lang["en"] += _lines(tatoeba / f"train.{code}-eng.eng")
    for lang, texts in by_lang.items():
        (out / lang).mkdir(parents=True)
        pq.write_table(pa.table({"text": texts, "lang": [lang] * len(texts)}),
                       out / lang / "tatoeba.parquet")  # fmt: skip
    for corpus in corpora:
        for f in corpus.glob("[!_]*/*.parquet"):
            (out / f.parent.name).mkdir(exist_ok=True)
            shutil.copy(f, out / f.parent.name / f"{corpus.name}-{f.name}")


def write_pairs(tatoeba: Path, path: Path) -> int:
    rows = []
    for code in TATOEBA_LANGS:
        src = _lines(tatoeba / f"train.{code}-eng.{code}")
        trg = _lines(tatoeba / f"train.{code}-eng.eng")
        rows += [f"{s}\t{t}\t{TATOEBA_LANGS[code]}\ten" for s, t in zip(src, trg)
                 if s.strip() and t.strip()]  # fmt: skip
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return len(rows)


def _run(*args: str) -> int:
    import subprocess

    cmd = [sys.executable, "-m", *args]
    log.info("$ %s", " ".join(cmd))
    return subprocess.call(cmd)


def _summary(out: Path, steps: list[str]) -> str:
    lines = ["| step | documents in/out | sentences in/out | languages |", "|---|---|---|---|"]
    for s in steps:
        r = json.loads((out / s / "stats.json").read_text())
        d, se = r["counts"].get("documents", {}), r["counts"].get("sentences", {})
        langs = sorted(p.name for p in (out / s).iterdir() if p.is_dir() and p.name[0] != "_")
        lines.append(f"| {s} | {d.get('in', 0)}/{d.get('out', 0)} | "
                     f"{se.get('in', 0)}/{se.get('out', 0)} | {len(langs)} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipelines.demo", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--output", default="demo_out", help="demo output folder (replaced)")
    ap.add_argument("--wiki", help="Wikipedia dump (default: shared sample or bundled)")
    ap.add_argument("--cc", help="CommonCrawl WET/WARC glob (default: shared sample or bundled)")
    ap.add_argument("--corpus-only", action="store_true", help="stop after the corpus stages")
    ap.add_argument("--train-steps", type=int, default=300, help="dual-encoder training steps")
    add_log_level_option(ap)
    args = ap.parse_args(argv)
    setup_logging(args.log_level)
    from pipelines import commoncrawl, quality, wikipedia

    wiki_in, cc_in = default_inputs()
    wiki_in, cc_in = args.wiki or wiki_in, args.cc or cc_in
    out = Path(args.output)
    os.makedirs(out, exist_ok=True)
    common = ["--overwrite", "--config", "demo"]
    steps = [
        ("wikipedia", lambda: wikipedia.main(
            ["--input", wiki_in, "--output", str(out / "wikipedia"), *common])),
        ("commoncrawl", lambda: commoncrawl.main(
            ["--input", cc_in, "--output", str(out / "commoncrawl"), "--write-dropped", *common])),
        ("quality", lambda: quality.main(
            ["train", "--positive", str(out / "wikipedia"), "--positive", str(out / "commoncrawl"),
             "--negative", str(out / "commoncrawl"), "--output", str(out / "quality.bin")])),
        ("commoncrawl_q", lambda: commoncrawl.main(
            ["--input", cc_in, "--output", str(out / "commoncrawl_q"),
             "--quality-model", str(out / "quality.bin"), *common])),
    ]  # fmt: skip
    tatoeba = SHARED / "tatoeba"
    if tatoeba.is_dir() and not args.corpus_only:
        model = out / "model"
        steps += [
            ("vocab", lambda: (build_vocab_input(tatoeba, [out / "wikipedia", out / "commoncrawl_q"],
                                                 out / "sentences"),
                               _run("pipelines.vocab", "--input", str(out / "sentences"),
                                    "--output", str(out / "vocab"), "--config", "demo",
                                    "--overwrite"))[1]),
            ("pairs", lambda: 0 if write_pairs(tatoeba, out / "pairs.tsv") else 1),
            ("train", lambda: _run("labse_model", "train", "--config", "demo",
                                   "--pairs", str(out / "pairs.tsv"), "--vocab", str(out / "vocab"),
                                   "--output", str(model), "--max-steps", str(args.train_steps))),
            ("eval", lambda: _run("mining", "eval", "tatoeba", "--model", str(model / "model"),
                                  "--data", str(tatoeba), "--prefix", "dev",
                                  "--output", str(out / "eval"))),
            ("mine", lambda: _run("mining", "mine", "--model", str(model / "model"),
                                  "--src-text", str(tatoeba / "dev.deu-eng.deu"),
                                  "--trg-text", str(tatoeba / "dev.deu-eng.eng"),
                                  "--output", str(out / "mined"), "--overwrite")),
        ]  # fmt: skip
    elif not args.corpus_only:
        log.warning("%s not found: skipping the vocabulary, training and mining steps", tatoeba)
    for name, step in steps:
        log.info("=== demo step: %s", name)
        rc = step()
        if rc != 0:
            log.error("demo step %s failed with exit status %d", name, rc)
            return rc
    table = _summary(out, ["wikipedia", "commoncrawl", "commoncrawl_q"])
    sys.stdout.write(f"\nDemo finished; outputs in {out}/\n\n{table}\n")
    for report in sorted((out / "eval").glob("*.md")) if (out / "eval").is_dir() else []:
        sys.stdout.write(f"\n{report.read_text(encoding='utf-8')}\n")
    if (out / "mined" / "stats.json").is_file():
        sys.stdout.write(f"\nmined bitext: {out / 'mined'}/mined.tsv.gz\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
