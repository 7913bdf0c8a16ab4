"""Score the final bitext against the known alignment: precision and recall per language pair."""

from __future__ import annotations

import argparse
import json
import logging
from collections import Counter
from pathlib import Path

from labse_common.cli import (
    add_log_level_option,
    command_parser,
    run_main,
)
from labse_common.datafiles import read_parquet, read_text
from labse_common.errors import InputError
from labse_common.logs import setup_logging
from pipelines.tasks import log_result

log = logging.getLogger("pipelines.tasks")

SUMMARY = (
    "Precision and recall of the final bitext against the known alignment (gold.tsv of the inputs\n"
    "task), per language pair: mined_pr.json and mined_pr.md."
)
DETAILS = (
    "By default only the pairs whose source is in evaluation half 1 of the stable split count (the\n"
    "filter was calibrated on a sample of the other half); --every-pair scores every pair."
)
EXAMPLES = (
    "python -m pipelines.e2e_tasks score --bitext bitext/ "
    "--gold inputs/gold.tsv --sentences sentences/mine --output eval/",
)


GOLD_HEADER = ("src_lang", "trg_lang", "src", "trg")
PR_KEYS = ("gold", "reachable", "kept", "judged", "correct")


def read_gold(gold_file: Path) -> list[tuple[str, str, str, str]]:
    """The planted pairs of ``prepare``: (src_lang, trg_lang, src, trg) per line after the header."""
    lines = read_text(gold_file, "--gold").splitlines()
    if lines and tuple(lines[0].split("\t")) == GOLD_HEADER:
        lines = lines[1:]
    gold = [tuple(line.split("\t")) for line in lines if line]
    bad = [i for i, g in enumerate(gold, 2) if len(g) != 4]
    if bad:
        raise InputError(
            gold_file, f"line {bad[0]}: expected src_lang<TAB>trg_lang<TAB>src<TAB>trg", "--gold"
        )
    return gold  # type: ignore[return-value]


def _pr_rows(gold: list, kept: list[dict], present: dict[str, set[str]]) -> dict:
    gold_set = {(g[0], g[2], g[3]) for g in gold}
    gold_src = {(g[0], g[2]) for g in gold}
    gold_trg = {(g[0], g[3]) for g in gold}
    per: dict[str, Counter] = {}
    for g in gold:
        c = per.setdefault(f"{g[0]}-{g[1]}", Counter())
        c["gold"] += 1
        if g[2] in present.get(g[0], ()) and g[3] in present.get(g[1], ()):
            c["reachable"] += 1
    for r in kept:
        c = per.setdefault(f"{r['src_lang']}-{r['trg_lang']}", Counter())
        c["kept"] += 1
        key = r["src_lang"]
        if (key, r["src"], r["trg"]) in gold_set:
            c["correct"] += 1
            c["judged"] += 1
        elif (key, r["src"]) in gold_src or (key, r["trg"]) in gold_trg:
            c["judged"] += 1
    tot = Counter()
    for c in per.values():
        tot.update(c)
    rows = {}
    for pair, c in [*sorted(per.items()), ("all", tot)]:
        rows[pair] = {
            **{k: c[k] for k in PR_KEYS},
            "precision": c["correct"] / c["judged"] if c["judged"] else 0.0,
            # Kept pairs of two web sentences cannot be judged; counted BAD here.
            "precision_strict": c["correct"] / c["kept"] if c["kept"] else 0.0,
            "recall": c["correct"] / c["gold"] if c["gold"] else 0.0,
            "recall_reachable": c["correct"] / c["reachable"] if c["reachable"] else 0.0,
        }
    return rows


def score(
    bitext_dir: Path,
    gold_file: Path,
    sentences_dir: Path,
    out: Path,
    half: int | None = 1,
    mined_dir: Path | None = None,
) -> dict:
    """Precision: correct pairs among the kept pairs that touch a gold sentence (pairs between
    two web sentences cannot be judged; ``precision_strict`` counts them BAD); recall: correct
    pairs among all gold pairs, and among the gold pairs whose two sides both survived the corpus
    cleaning (``reachable``).

    ``half``: only the pairs whose source sentence falls in that half of the stable split of
    :func:`filters.bitext.sample.half_of` count (the other half labelled the sample the filter was
    calibrated on, so it cannot measure it); the figures over every pair are kept under
    ``all_pairs`` for comparison. ``None``: every pair.

    ``mined_dir``: the same figures for the miner's pairs before any filter, over every pair (the
    miner saw no label), in ``miner_pr.json``: its recall is the most the filter can keep."""
    from filters.bitext.sample import half_of

    gold = read_gold(gold_file)
    present: dict[str, set[str]] = {}
    for p in sentences_dir.glob("*/sentences.parquet"):
        present[p.parent.name] = set(
            read_parquet(p, ["text"], "--sentences", required=["text"]).column("text").to_pylist()
        )
    kept = read_parquet(
        bitext_dir / "bitext.parquet",
        ["src", "trg", "src_lang", "trg_lang"],
        "--bitext",
        required=["src", "trg", "src_lang", "trg_lang"],
    ).to_pylist()
    kept = [r for r in kept if r.get("src")]
    rows = _pr_rows(gold, kept, present)
    if half is not None:
        every = rows
        rows = _pr_rows(
            [g for g in gold if half_of(g[2]) == half],
            [r for r in kept if half_of(r["src"]) == half],
            present,
        )
        rows["all_pairs"] = every["all"]
        rows["half"] = half
    out.mkdir(parents=True, exist_ok=True)
    if mined_dir is not None:
        mined = [
            r
            for f in sorted(mined_dir.glob("*/mined.parquet"))
            for r in read_parquet(
                f,
                ["src", "trg", "src_lang", "trg_lang"],
                "--mined",
                required=["src", "trg", "src_lang", "trg_lang"],
            ).to_pylist()
        ]
        miner = _pr_rows(gold, mined, present)
        (out / "miner_pr.json").write_text(json.dumps(miner, indent=1), encoding="utf-8")
    (out / "mined_pr.json").write_text(json.dumps(rows, indent=1), encoding="utf-8")
    scope = (
        f"pairs whose source is in evaluation half {half} (the calibration sample was drawn from the other)"
        if half is not None
        else "every pair"
    )
    md = [
        f"Scope: {scope}.",
        "",
        "| pair | gold | reachable | kept | judged | correct | precision | precision (strict) | recall | recall (reachable) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    table = {k: v for k, v in rows.items() if isinstance(v, dict)}
    for pair, r in table.items():
        md.append(
            f"| {pair} | {r['gold']} | {r['reachable']} | {r['kept']} | {r['judged']} | {r['correct']} "
            f"| {r['precision']:.3f} | {r['precision_strict']:.3f} | {r['recall']:.3f} | {r['recall_reachable']:.3f} |"
        )
    (out / "mined_pr.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    return rows


def build_parser() -> argparse.ArgumentParser:
    c = command_parser("python -m pipelines.e2e_tasks score", SUMMARY, DETAILS, EXAMPLES)
    c.add_argument(
        "--bitext", required=True, help="the final bitext folder (python -m filters export)"
    )
    c.add_argument(
        "--gold", required=True, help="gold.tsv of the inputs task (src_lang, trg_lang, src, trg)"
    )
    c.add_argument("--sentences", required=True, help="sentences task's mine/ folder")
    c.add_argument("--output", required=True, help="folder to write mined_pr.{json,md}")
    c.add_argument(
        "--mined",
        help="the mine stage's folder (<pair>/mined.parquet): also write miner_pr.json, what the "
        "miner found before any filter, over every pair",
    )
    c.add_argument(
        "--half",
        type=int,
        choices=(0, 1),
        default=1,
        help="score only the pairs whose source is in this half of the stable split "
        "(the filter was calibrated on the other; default 1)",
    )
    c.add_argument(
        "--every-pair",
        action="store_true",
        help="score every pair (no half): for runs whose filter used no planted sample",
    )
    add_log_level_option(c)
    return c


def run(args: argparse.Namespace) -> int:
    rep = score(
        Path(args.bitext),
        Path(args.gold),
        Path(args.sentences),
        Path(args.output),
        None if args.every_pair else args.half,
        Path(args.mined) if args.mined else None,
    )
    log_result("score", rep)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)
    return run_main(lambda: run(args), log, args=args)
