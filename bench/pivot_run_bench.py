"""A pivot pair's recall in a demo-sized run with the trained encoder.

Runs the stage runner (``python -m pipelines.run --config demo``) on ../shared/data with de-fr
added to ``mining.pairs``. The demo has training pairs for XX-en only, so the lexicon stage
composes de-fr's dictionary through English (``lexicon/stats.json``: de-fr under ``pivot``).
The demo plants the same PUD lines for every mined language (line i of every PUD file is the
same English sentence), so the de-fr alignment is the join of the planted de-en and fr-en pairs
on their English side: written to ``WORK/gold/planted.de-fr.tsv`` and given to the run as
``sources.eval``, so the eval stage and the labels (``sources.label_from: eval``) know it too.

Two variants on one run folder (only ``mine`` and the stages after it rerun for the second):
``pivot``, the demo's ``mining.lexicon_weight`` (re-ranking with every pair's dictionary, de-fr's
composed), and ``no-lexicon``, ``mining.lexicon_weight=0`` (margin alone). Each variant's outputs
are copied to ``WORK/<variant>/``.

Per pair, from ``mine/<pair>/mined.parquet``: recall at precision 0.8 and 0.9 as the margin
threshold is swept over the mined pairs (the most recall of any threshold whose kept pairs reach
that precision), precision and recall as the eval stage counts them
(``pipelines.tasks.cli_score``: a pair is judged when a side is a planted sentence of that pair,
recall is over every planted pair). ``all``: each pair's whole alignment (Tatoeba dev and PUD
lines); ``shared``: the direct pairs' alignment cut to the PUD lines that de-fr's is made of, so
all three pairs are measured on the same English sentences. Ratio = de-fr / mean(de-en, fr-en).
The final bitext's figures are the eval stage's (``eval/mined_pr.json``, evaluation half 1).

    python bench/pivot_run_bench.py [--data ../shared/data] [--work /tmp/pivot_bench]
        [--tree .] [--init DEMO_OUT/train/model] [--analyse-only]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from labse_common.cli import command_parser
from labse_common.datafiles import read_parquet
from pipelines.tasks.cli_score import _pr_rows, read_gold

log = logging.getLogger("bench.pivot_run")

DIRECT = ("de-en", "fr-en")
PIVOT = "de-fr"
MINED = "[de-en, fr-en, es-en, de-fr]"
VARIANTS = {"pivot": [], "no-lexicon": ["--set", "mining.lexicon_weight=0"]}
PRECISIONS = (0.8, 0.9)
LEX = ("lex_fwd", "lex_bwd")
LEX_WEIGHT = 0.1  # configs/demo.yaml mining.lexicon_weight
LEX_FLOOR = math.log(1e-7)
RANKINGS: dict[str, Callable[[dict], float]] = {
    "margin": lambda r: r["margin"],
    "margin+lex": lambda r: lex_score(r),
}
KEPT = ("mine", "eval", "lexicon/stats.json", "inputs/gold.tsv")

SUMMARY = "A pivot pair's recall at fixed precision in a demo run, with and without the lexicon."
EXAMPLES = (
    "python bench/pivot_run_bench.py --data ../shared/data --work /tmp/pivot_bench",
    "python bench/pivot_run_bench.py --work /tmp/pivot_bench --analyse-only",
)


def runner(tree: Path, data: Path, work: Path, *extra: str) -> None:
    """One ``pipelines.run`` call on ``WORK/run`` (code of ``tree``); exit status 0 or raise."""
    cmd = [
        sys.executable,
        "-m",
        "pipelines.run",
        "--config",
        "demo",
        "--data",
        str(data),
        "--output",
        str(work / "run"),
        "--set",
        f"mining.pairs={MINED}",
        "--set",
        f'sources.eval=["{work}/gold/planted.{{src}}-{{trg}}.tsv"]',
        *extra,
    ]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    log.info("running %s", " ".join(cmd))
    subprocess.run(cmd, cwd=tree, env=env, check=True)


def write_pivot_gold(work: Path) -> int:
    """de-fr's alignment: the planted de-en and fr-en pairs joined on their English side."""
    eval_dir = work / "run" / "demo" / "eval"
    by_en: dict[str, dict[str, list[str]]] = {"de": defaultdict(list), "fr": defaultdict(list)}
    for lang in by_en:
        for line in (eval_dir / f"planted.{lang}-en.tsv").read_text("utf-8").splitlines():
            src, en = line.split("\t")
            by_en[lang][en].append(src)
    rows = [
        f"{de}\t{fr}\n"
        for en, des in by_en["de"].items()
        for de in des
        for fr in by_en["fr"].get(en, [])
    ]
    (work / "gold").mkdir(parents=True, exist_ok=True)
    (work / "gold" / "planted.de-fr.tsv").write_text("".join(rows), encoding="utf-8")
    return len(rows)


def run_variants(tree: Path, data: Path, work: Path, init: Path | None) -> None:
    if not (work / "run" / "demo" / "eval").is_dir():
        runner(tree, data, work, "--only", "demo")
    log.info("de-fr alignment: %d pairs", write_pivot_gold(work))
    # An encoder a demo run trained: the same one, without its 20-40 minutes of training.
    base = ["--set", f"model.init={init}", "--set", "train.steps=0"] if init else []
    for name, extra in VARIANTS.items():
        t0 = time.monotonic()
        runner(tree, data, work, *base, *extra)
        log.info("variant %s: %.0f s", name, time.monotonic() - t0)
        dest = work / name
        shutil.rmtree(dest, ignore_errors=True)
        for rel in KEPT:
            src, to = work / "run" / rel, dest / rel
            to.parent.mkdir(parents=True, exist_ok=True)
            (shutil.copytree if src.is_dir() else shutil.copy2)(src, to)


def present_sentences(work: Path) -> dict[str, set[str]]:
    """The sentences mined from, per language (what the eval stage calls reachable)."""
    return {
        p.parent.name: set(read_parquet(p, ["text"], "--sentences").column("text").to_pylist())
        for p in (work / "run" / "sentences" / "mine").glob("*/sentences.parquet")
    }


def lex_score(r: dict) -> float:
    """margin + 0.1 (lex_fwd + lex_bwd): the score the demo's re-ranking orders candidates by
    (a missing lex score counts at the floor, log 1e-7, as mining.lexical_rerank does)."""
    lex = sum(LEX_FLOOR if r[k] is None or math.isnan(r[k]) else r[k] for k in LEX)
    return r["margin"] + LEX_WEIGHT * lex


def sweep(
    rows: list[dict], gold: list, present: dict, pair: str, key: Callable[[dict], float]
) -> dict:
    """Recall at each precision of PRECISIONS over thresholds on ``key`` (pairs kept: ``key``
    above it, ties kept together), with the eval stage's counts at the chosen threshold; under
    ``None``, the counts of every mined pair (the most recall a threshold can give)."""
    rows = sorted(rows, key=lambda r: -key(r))
    ends = [
        i + 1 for i in range(len(rows)) if i + 1 == len(rows) or key(rows[i + 1]) < key(rows[i])
    ]
    empty = _pr_rows(gold, [], present).get(pair, {"gold": 0, "reachable": 0})
    best = {
        p: {
            **empty,
            "recall": 0.0,
            "precision": 0.0,
            "kept": 0,
            "correct": 0,
            "judged": 0,
            "threshold": None,
        }
        for p in PRECISIONS
    }
    for end in ends:
        r = _pr_rows(gold, rows[:end], present)[pair]
        for p in PRECISIONS:
            if r["judged"] and r["precision"] >= p and r["recall"] > best[p]["recall"]:
                best[p] = {**r, "threshold": key(rows[end - 1])}
    best[None] = _pr_rows(gold, rows, present).get(pair, empty)
    return best


def analyse(work: Path, variant: str, present: dict) -> dict:
    """{(ranking, scope): {pair: sweep}} for one variant's snapshot."""
    gold = read_gold(work / variant / "inputs" / "gold.tsv")
    by_pair: dict[str, list] = defaultdict(list)
    for g in gold:
        by_pair[f"{g[0]}-{g[1]}"].append(g)
    shared_en = {g[3] for g in by_pair["fr-en"]} & {g[3] for g in by_pair["de-en"]}
    scopes = {
        "all": by_pair,
        "shared": {
            **{p: [g for g in by_pair[p] if g[3] in shared_en] for p in DIRECT},
            PIVOT: by_pair[PIVOT],
        },
    }
    out: dict[tuple, dict] = {}
    for pair in (*DIRECT, PIVOT):
        mined = read_parquet(
            work / variant / "mine" / pair / "mined.parquet",
            ["src", "trg", "src_lang", "trg_lang", "margin", *LEX],
            "--mined",
        ).to_pylist()
        for ranking, key in RANKINGS.items():
            for scope, golds in scopes.items():
                r = sweep(mined, golds[pair], present, pair, key)
                out.setdefault((ranking, scope), {})[pair] = {**r, "mined": len(mined)}
    return out


def ratio(res: dict, p: float | None) -> float:
    direct = sum(res[d][p]["recall"] for d in DIRECT) / len(DIRECT)
    return res[PIVOT][p]["recall"] / direct if direct else float("nan")


def bitext_ratio(final: dict) -> float:
    """The same ratio on the final bitext's recall (the eval stage's, evaluation half 1)."""
    direct = sum(final.get(d, {}).get("recall", 0.0) for d in DIRECT) / len(DIRECT)
    return final.get(PIVOT, {}).get("recall", 0.0) / direct if direct else float("nan")


def counts(r: dict) -> str:
    """correct/judged/kept at the chosen threshold."""
    return f"{r['correct']}/{r['judged']}/{r['kept']}"


def report(work: Path) -> None:
    """Print the per-pair table and the ratios of every variant snapshot in ``work``."""
    present = present_sentences(work)
    head = "".join(f"{f'R@P{p:.1f}':>8}{'c/j/k':>12}" for p in PRECISIONS)
    print(
        f"{'variant':<11}{'ranking':<11}{'scope':<7}{'pair':<6}{'gold':>5}{'reach':>6}"
        f"{'mined':>6}{'R(all)':>7}{head}{'bitext P/R':>11}"
    )
    ratios = []
    for variant in VARIANTS:
        if not (work / variant).is_dir():
            continue
        stats = json.loads((work / variant / "lexicon" / "stats.json").read_text("utf-8"))
        log.info("%s: lexicon dictionaries %s", variant, stats.get("dictionaries"))
        final = json.loads((work / variant / "eval" / "mined_pr.json").read_text("utf-8"))
        for (ranking, scope), pairs in analyse(work, variant, present).items():
            for pair, r in pairs.items():
                f = final.get(pair, {})
                print(
                    f"{variant:<11}{ranking:<11}{scope:<7}{pair:<6}{r[None]['gold']:>5}"
                    f"{r[None]['reachable']:>6}{r['mined']:>6}{r[None]['recall']:>7.3f}"
                    + "".join(f"{r[p]['recall']:>8.3f}{counts(r[p]):>12}" for p in PRECISIONS)
                    + f"{f.get('precision', 0):>6.2f}/{f.get('recall', 0):.2f}"
                )
            rs = [ratio(pairs, p) for p in (*PRECISIONS, None)]
            ratios.append((variant, ranking, scope, *rs, bitext_ratio(final)))
    print("\nde-fr recall / mean(de-en, fr-en) recall")
    print(
        f"{'variant':<11}{'ranking':<11}{'scope':<7}{'at P0.8':>9}{'at P0.9':>9}{'all mined':>10}{'bitext':>9}"
    )
    for variant, ranking, scope, *rs in ratios:
        print(f"{variant:<11}{ranking:<11}{scope:<7}" + "".join(f"{x:>8.2f}x" for x in rs))


def build_parser() -> argparse.ArgumentParser:
    c = command_parser(
        "python bench/pivot_run_bench.py", SUMMARY, __doc__.split("\n\n", 1)[1], EXAMPLES
    )
    c.add_argument(
        "--data", type=Path, default=Path("../shared/data"), help="the ../shared/data layout"
    )
    c.add_argument(
        "--work",
        type=Path,
        default=Path("/tmp/pivot_bench"),
        help="run folder, alignment and snapshots",
    )
    c.add_argument(
        "--tree",
        type=Path,
        default=Path(__file__).resolve().parents[1],
        help="the project checkout the runner imports (default: this one)",
    )
    c.add_argument(
        "--init",
        type=Path,
        help="the trained encoder of an earlier demo run on the same --data (its train/model): "
        "model.init with train.steps=0, so the run does not train one (default: it does)",
    )
    c.add_argument(
        "--analyse-only",
        action="store_true",
        help="report on the snapshots in --work without running",
    )
    return c


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    args = build_parser().parse_args(argv)
    work = args.work.resolve()
    if not args.analyse_only:
        init = args.init.resolve() if args.init else None
        run_variants(args.tree.resolve(), args.data.resolve(), work, init)
    report(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
