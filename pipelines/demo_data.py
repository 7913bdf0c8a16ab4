"""The demo's task builder: turns a folder in the layout of ``../shared/data`` into ordinary run
sources, with a known alignment hidden in web text.

    python -m pipelines.demo_data --data DIR --output DIR [--config C] [--set sources.demo.KEY=V]

From ``tatoeba/{train,dev}.XXX-eng.*`` (and ``pud/``, ``ud/`` when present) it writes:

* ``pairs/tatoeba.XX-en.tsv``, ``pairs/pud.XX-en.tsv``: training pairs (the train split minus
  the held-out pairs; the PUD lines that are not planted);
* ``eval/planted.XX-en.tsv``: the dev pairs and planted PUD pairs of every mined language, the
  alignment the bitext is measured against (and, with ``sources.label_from=eval``, labelled from);
* ``web/planted.warc.wet.gz``: both sides of those pairs, shuffled together into documents of
  monolingual web text that the CommonCrawl job cleans like any other WET file;
* ``text/ud.XX.txt``: the UD sentences of every language (minus any hidden sentence), plain text
  for the vocabulary and MLM pretraining;
* ``heldout/heldout.XXX-eng.*``: pairs held out of the train split for the retrieval evaluation;
* ``stats.json``: pairs and sentences in = out + dropped, per reason.

The runner then reads these as it reads a user's own ``sources``: this module is the only place
that knows the demo's data layout.
"""

from __future__ import annotations

import argparse
import io
import logging
import random
from pathlib import Path

from labse_common.cli import (
    add_log_level_option,
    add_overwrite_option,
    command_parser,
    doc_details,
    exit_with,
    run_main,
)
from labse_common.config import load
from labse_common.datafiles import read_text
from labse_common.errors import InputError, UsageError
from labse_common.langs import TATOEBA_TO_LID
from labse_common.logs import setup_logging
from labse_common.output_dir import claim_output
from labse_common.sections.sources import DemoSource
from labse_common.stats import StageCounter, check_balanced, write_report

log = logging.getLogger("pipelines.demo_data")

LID_CODE = TATOEBA_TO_LID
#: Where the runner finds what this builder wrote, as ``sources`` globs under its output folder.
PAIRS = "pairs/*.{src}-{trg}.tsv"
EVAL = "eval/*.{src}-{trg}.tsv"
TEXT = "text/*.{lang}.txt"
WEB = "web/planted.warc.wet.gz"
HELDOUT = "heldout"


def _lines(path: Path) -> list[str]:
    if not path.is_file():
        raise InputError(path, "missing (expected beside the other Tatoeba files)", "--data")
    text = read_text(path, "--data") if path.stat().st_size else ""
    return [s.strip() for s in text.splitlines()]


def _pair_lines(src_file: Path, trg_file: Path) -> list[tuple[str, str]]:
    """The two sides of a parallel file pair; different line counts would shift the alignment
    from the first missing line on, so they are refused."""
    src, trg = _lines(src_file), _lines(trg_file)
    if len(src) != len(trg):
        raise InputError(
            src_file,
            f"{len(src)} lines vs {len(trg)} in {trg_file.name}: the alignment would be shifted",
            "--data",
        )
    return list(zip(src, trg))


def tatoeba_codes(tatoeba: Path, split: str) -> list[str]:
    return sorted(p.name.split(".")[1].split("-")[0] for p in tatoeba.glob(f"{split}.*-eng.eng"))


def write_wet(path: Path, docs: list[list[str]], url: str) -> None:
    """Documents as WET conversion records with fixed headers (reruns give equal bytes)."""
    from warcio.warcwriter import WARCWriter

    from pipelines.synthetic import fixed_headers

    buf = io.BytesIO()
    w = WARCWriter(buf, gzip=True)
    for n, doc in enumerate(docs):
        rec = w.create_warc_record(
            f"{url}/{n}",
            "conversion",
            warc_content_type="text/plain",
            payload=io.BytesIO("\n".join(doc).encode("utf-8")),
            warc_headers_dict=fixed_headers(f"{url}/{n}", "conversion"),
        )
        w.write_record(rec)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buf.getvalue())


def pud_split(data: Path, codes: list[str], n_planted: int, seed: int) -> tuple[dict, set[int]]:
    """The PUD pairs of ``codes`` ({code: [(src, eng), ...]}, line order) and the line numbers
    planted in the web text: one sample of line numbers for every language, because line i is
    the same English sentence in every PUD file (a planted English sentence trained on through
    another language would leak)."""
    pud = data / "pud"
    pairs = {}
    for code in codes:
        if (pud / f"train.{code}-eng.{code}").is_file():
            pairs[code] = _pair_lines(
                pud / f"train.{code}-eng.{code}", pud / f"train.{code}-eng.eng"
            )
    n = min((len(v) for v in pairs.values()), default=0)
    planted = set(random.Random(seed).sample(range(n), min(n_planted, n)))
    return pairs, planted


def build(data: Path, out: Path, cfg: DemoSource, overwrite: bool = False) -> dict:
    """Check ``data`` and write the demo's sources into ``out`` (claimed, committed at the end)."""
    tatoeba = data / "tatoeba"
    if not tatoeba.is_dir():
        raise InputError(
            data, "no tatoeba/ folder (expected tatoeba/{train,dev}.XXX-eng.*)", "--data"
        )
    available = tatoeba_codes(tatoeba, "train")
    missing = [c for c in cfg.langs if c not in available or c not in LID_CODE]
    if missing:
        raise UsageError(
            f"sources.demo.langs {missing} have no train.XXX-eng files in {tatoeba} "
            f"(found: {', '.join(available) or 'none'})"
        )
    train_codes = list(cfg.train_languages or available)
    with claim_output(out, overwrite) as claimed:
        return _build_into(data, train_codes, Path(claimed.tmp), cfg)


def _write_pairs(path: Path, rows: list[tuple[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{s}\t{t}\n" for s, t in rows), encoding="utf-8")


def _build_into(data: Path, train_codes: list[str], out: Path, cfg: DemoSource) -> dict:
    tatoeba = data / "tatoeba"
    counter = StageCounter()
    pud, planted = (
        pud_split(data, train_codes, cfg.pud_planted, cfg.shuffle_seed) if cfg.pud else ({}, set())
    )
    _write_training_pairs(tatoeba, train_codes, out, cfg, counter)
    _write_pud_pairs(pud, planted, out, cfg, counter)
    hidden = _write_hidden_pairs(tatoeba, pud, planted, out, cfg, counter)
    if cfg.ud:
        _write_ud_text(data, train_codes, hidden, out, cfg, counter)
    # Both sides of every hidden pair, shuffled together into documents of web text.
    mono = [x for code in cfg.langs for p in hidden[code] for x in p]
    random.Random(cfg.shuffle_seed).shuffle(mono)
    docs = [mono[i : i + cfg.doc_sentences] for i in range(0, len(mono), cfg.doc_sentences)]
    write_wet(out / WEB, docs, "https://tatoeba.example/doc")
    report = counter.to_report(
        "demo_data",
        train_languages=train_codes,
        mined_languages=list(cfg.langs),
        web_documents=len(docs),
    )
    errors = check_balanced(report)
    if errors:
        raise RuntimeError(f"unbalanced stats: {errors}")
    write_report(str(out / "stats.json"), report)
    return report


def _write_training_pairs(
    tatoeba: Path, train_codes: list[str], out: Path, cfg: DemoSource, counter: StageCounter
) -> None:
    """Tatoeba's training pairs of every training language, less the held-out pairs of the
    mined languages (written apart for the retrieval check) and the pairs over the cap."""
    for code in train_codes:
        rows = _pair_lines(tatoeba / f"train.{code}-eng.{code}", tatoeba / f"train.{code}-eng.eng")
        counter.add_in("pairs", len(rows))
        held = rows[-cfg.heldout :] if code in cfg.langs else []
        rows = rows[: len(rows) - len(held)]
        if held:
            counter.add_dropped("pairs", "held_out", len(held))
            for side, k in ((code, 0), ("eng", 1)):
                f = out / HELDOUT / f"heldout.{code}-eng.{side}"
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_text("".join(p[k] + "\n" for p in held), encoding="utf-8")
        if cfg.max_train_pairs is not None and len(rows) > cfg.max_train_pairs:
            counter.add_dropped("pairs", "over_cap", len(rows) - cfg.max_train_pairs)
            rows = rows[: cfg.max_train_pairs]
        counter.add_out("pairs", len(rows))  # empty sides are the pair reader's to count
        _write_pairs(out / "pairs" / f"tatoeba.{LID_CODE[code]}-en.tsv", rows)


def _write_pud_pairs(
    pud: dict[str, list[tuple[str, str]]],
    planted: set[int],
    out: Path,
    cfg: DemoSource,
    counter: StageCounter,
) -> None:
    """PUD: the lines not planted train every PUD language (news/Wikipedia, closer to web text)."""
    for code, rows in pud.items():
        counter.add_in("pud_pairs", len(rows))
        kept = [p for i, p in enumerate(rows) if i not in planted]
        counter.add_dropped(
            "pud_pairs",
            "planted" if code in cfg.langs else "planted_elsewhere",
            len(rows) - len(kept),
        )
        counter.add_out("pud_pairs", len(kept))
        _write_pairs(out / "pairs" / f"pud.{LID_CODE[code]}-en.tsv", kept)


def _write_hidden_pairs(
    tatoeba: Path,
    pud: dict[str, list[tuple[str, str]]],
    planted: set[int],
    out: Path,
    cfg: DemoSource,
    counter: StageCounter,
) -> dict[str, list[tuple[str, str]]]:
    """The hidden pairs: dev pairs and planted PUD lines of every mined language (the known
    alignment), by language."""
    hidden: dict[str, list[tuple[str, str]]] = {}
    for code in cfg.langs:
        rows = _pair_lines(tatoeba / f"dev.{code}-eng.{code}", tatoeba / f"dev.{code}-eng.eng")
        rows += [p for i, p in enumerate(pud.get(code, [])) if i in planted]
        counter.add_in("hidden_pairs", len(rows))
        good = [(s, t) for s, t in rows if s and t]
        counter.add_dropped("hidden_pairs", "empty_side", len(rows) - len(good))
        counter.add_out("hidden_pairs", len(good))
        hidden[code] = good
        _write_pairs(out / "eval" / f"planted.{LID_CODE[code]}-en.tsv", good)
    return hidden


def _write_ud_text(
    data: Path,
    train_codes: list[str],
    hidden: dict[str, list[tuple[str, str]]],
    out: Path,
    cfg: DemoSource,
    counter: StageCounter,
) -> None:
    """UD: real monolingual text of every language, never a sentence that is mined."""
    tatoeba = data / "tatoeba"
    mined = {x for rows in hidden.values() for p in rows for x in p}
    mined |= {
        x
        for code in cfg.langs
        for p in _pair_lines(tatoeba / f"dev.{code}-eng.{code}", tatoeba / f"dev.{code}-eng.eng")
        for x in p
    }
    for code in [*train_codes, "eng"]:
        f = data / "ud" / f"{code}.txt"
        if not (f.is_file() and code in LID_CODE):
            continue
        lines = _lines(f)
        keep = [t for t in lines if t and t not in mined]
        counter.add_in("ud_sentences", len(lines))
        counter.add_dropped("ud_sentences", "empty", sum(1 for t in lines if not t))
        counter.add_dropped(
            "ud_sentences", "mined_sentence", sum(1 for t in lines if t and t in mined)
        )
        counter.add_out("ud_sentences", len(keep))
        (out / "text").mkdir(exist_ok=True)
        (out / "text" / f"ud.{LID_CODE[code]}.txt").write_text(
            "".join(t + "\n" for t in keep), encoding="utf-8"
        )


def build_parser() -> argparse.ArgumentParser:
    ap = command_parser(
        "python -m pipelines.demo_data",
        "Turn a folder in the layout of ../shared/data into the demo's run sources: training pairs, evaluation pairs, and web text with a known alignment hidden in it.",
        doc_details(__doc__),
        examples=[
            "python -m pipelines.demo_data --data ../shared/data --output demo_sources/",
        ],
    )
    ap.add_argument(
        "--data", required=True, help="folder with tatoeba/{train,dev}.XXX-eng.* (pud/, ud/)"
    )
    ap.add_argument(
        "--output", required=True, help="folder to write (pairs/, eval/, web/, text/, ...)"
    )
    ap.add_argument(
        "--config", default="demo", help="preset or YAML file (its sources.demo section)"
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a sources.demo key, e.g. --set langs=[deu]",
    )
    add_overwrite_option(ap)
    add_log_level_option(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)

    def body() -> int:
        sources = load("sources", args.config, [f"demo.{s}" for s in args.set])
        if sources.demo is None:
            raise UsageError(f"--config {args.config}: sources.demo is null (no demo to build)")
        report = build(Path(args.data), Path(args.output), sources.demo, args.overwrite)
        log.info("demo sources: %s", report.get("counts"))
        return 0

    return run_main(body, log, args=args)


if __name__ == "__main__":
    exit_with(main)
