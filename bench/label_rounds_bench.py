"""Labels near the threshold against more plain stratified labels: the 90% interval's width.

    .venv/bin/python bench/label_rounds_bench.py --run demo_out [--seeds 200] [--scale 20000]

Population: the mined pairs of a finished run (``RUN/combine/scored.parquet``: every pair with
its ``combined_score``), GOOD where the pair is a planted one (``RUN/inputs/gold.tsv``), the
labels a person would give if the planted gold were the truth. Per seed, with the same seeds
for every design:

* two rounds: 100 labels of the stratified sample (:func:`filters.bitext.sample.draw_sample`),
  the threshold they give (combine's rule at ``--target``), then 50 near it
  (:mod:`filters.bitext.adaptive_sample`), the estimate at that threshold;
* plain: 150 and 300 labels of the stratified sample, each estimated at the threshold its own
  labels give (the plain stratified estimate of the same module).

Printed per design: mean interval width, mean error and coverage against the population's true
GOOD share at the design's threshold, and the width ratios. ``--fixed`` puts every design's
threshold (and the band) at the run's calibrated threshold instead, the same estimand for all.
``--scale N`` also runs a population of N pairs resampled from the run's (score, margin,
language pair, label) rows, scores jittered to break ties: a user's crawl is larger than the
demo's, and the finite population correction of a small one flatters plain labels.
"""

from __future__ import annotations

import argparse
import csv
import logging
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from filters.bitext.adaptive_sample import (  # noqa: E402
    BAND_SHARE,
    BELOW_SHARE,
    FirstRound,
    band_size,
    draw_second_round,
    estimate_good_share,
    near_threshold_band,
    stratum_sizes,
)
from filters.bitext.calibrate import choose_threshold, precision_curve  # noqa: E402
from filters.bitext.sample import draw_sample  # noqa: E402

log = logging.getLogger("label_rounds_bench")


def load_run(run: Path) -> tuple[pa.Table, np.ndarray, np.ndarray, float]:
    table = pq.read_table(run / "combine" / "scored.parquet")
    with open(run / "inputs" / "gold.tsv", encoding="utf-8", newline="") as f:
        gold = {(r["src"], r["trg"]) for r in csv.DictReader(f, delimiter="\t")}
    src, trg = table.column("src").to_pylist(), table.column("trg").to_pylist()
    good = np.array([(s, t) in gold for s, t in zip(src, trg)], dtype=bool)
    score = table.column("combined_score").to_numpy().astype(np.float64)
    thr = float(np.nanmax(table.column("combined_threshold").to_numpy()))
    return table.select(["src_lang", "trg_lang", "margin"]), score, good, thr


def scaled(
    table: pa.Table,
    score: np.ndarray,
    good: np.ndarray,
    n: int,
    seed: int = 0,
    good_share: float | None = None,
):
    """``n`` rows drawn with replacement from the run's, scores jittered (ranks kept locally);
    with ``good_share``, GOOD and BAD rows drawn apart in that proportion (a run with another
    planted share: the full demo's is 0.611)."""
    rng = np.random.default_rng(seed)
    if good_share is None:
        idx = rng.integers(0, len(score), n)
    else:
        n_good = int(round(good_share * n))
        idx = np.concatenate(
            [
                rng.choice(np.flatnonzero(good), n_good),
                rng.choice(np.flatnonzero(~good), n - n_good),
            ]
        )
    jitter = rng.normal(0.0, 0.01, n)
    return table.take(pa.array(idx)), np.clip(score[idx] + jitter, 0.0, 1.0), good[idx]


def simulated(n: int, seed: int = 0) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    """``n`` pairs shaped like the full demo's run (about 61% GOOD, most pairs above the
    threshold GOOD): scores Beta(1.2, 1.0), GOOD with probability 1 / (1 + exp(-12 (s -
    0.45))), margin a noisy copy of the score, two language pairs (the test's population,
    tests/filters/bitext/test_adaptive_sample.py, with more GOOD pairs)."""
    rng = np.random.default_rng(seed)
    score = rng.beta(1.2, 1.0, n)
    good = rng.random(n) < 1.0 / (1.0 + np.exp(-12.0 * (score - 0.45)))
    table = pa.table(
        {
            "src_lang": rng.choice(["de", "fr"], n, p=[0.6, 0.4]),
            "trg_lang": ["en"] * n,
            "margin": score + rng.normal(0.0, 0.15, n),
        }
    )
    return table, score, good


def first_round(table: pa.Table, good: np.ndarray, n: int, seed: int) -> FirstRound:
    sample = draw_sample(table, n, seed=seed)
    rows = np.asarray(sample.column("sample_id").to_pylist(), dtype=np.int64)
    return FirstRound(rows, sample.column("stratum").to_pylist(), good[rows], stratum_sizes(sample))


def own_threshold(score: np.ndarray, first: FirstRound, target: float) -> float | None:
    s, g = score[first.rows], np.asarray(first.good, dtype=bool)
    if g.all() or not g.any():
        return None
    i = choose_threshold(s, g, target)
    return None if i is None else float(precision_curve(s, g)[0][i])


def one_seed(pop, seed: int, args, fixed: float | None) -> dict[str, tuple] | None:
    table, score, good = pop
    out = {}
    first = first_round(table, good, args.first, seed)
    t = fixed if fixed is not None else own_threshold(score, first, args.target)
    if t is None:
        return None
    band = near_threshold_band(score, t, band_size(len(score), args.second, args.band_share))
    second = draw_second_round(
        score, first, band, args.second, seed=seed + 100_000, below_share=args.below_share
    )
    est = estimate_good_share(score, t, first, second, good[second.rows], args.confidence)
    out["two rounds"] = (est, good[score >= t].mean())
    for n in (args.first + args.second, 2 * (args.first + args.second)):
        plain = first_round(table, good, n, seed)
        tp = fixed if fixed is not None else own_threshold(score, plain, args.target)
        if tp is None:
            return None
        est = estimate_good_share(score, tp, plain, confidence=args.confidence)
        out[f"plain {n}"] = (est, good[score >= tp].mean())
    return out


def measure(name: str, pop, args, fixed: float | None) -> None:
    rows: dict[str, list] = {}
    skipped = 0
    for seed in range(args.seeds):
        res = one_seed(pop, seed, args, fixed)
        if res is None:
            skipped += 1
            continue
        for k, v in res.items():
            rows.setdefault(k, []).append(v)
    where = "the run's threshold" if fixed is not None else "each design's own threshold"
    print(f"\n{name}: {len(pop[1])} pairs, {pop[2].mean():.3f} GOOD; estimate at {where}")
    print(f"{args.seeds - skipped} seeds ({skipped} without a reachable threshold skipped)")
    print("| design | labels | mean 90% width | mean error | coverage |")
    print("|---|---:|---:|---:|---:|")
    width = {}
    for k, v in rows.items():
        w = np.array([e.width for e, _ in v])
        err = np.array([e.share - t for e, t in v])
        cov = np.mean([e.interval[0] <= t <= e.interval[1] for e, t in v])
        mc = err.std(ddof=1) / np.sqrt(len(err))
        width[k] = w.mean()
        labels = args.first + args.second if k == "two rounds" else int(k.split()[1])
        print(f"| {k} | {labels} | {w.mean():.4f} | {err.mean():+.4f} ± {mc:.4f} | {cov:.3f} |")
    n1 = args.first + args.second
    two = width["two rounds"]
    print(f"width ratio two rounds / plain {n1}: {two / width[f'plain {n1}']:.2f}")
    print(f"width ratio two rounds / plain {2 * n1}: {two / width[f'plain {2 * n1}']:.2f}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", type=Path, required=True, help="a finished run's output folder")
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--first", type=int, default=100, help="round one's labels")
    ap.add_argument("--second", type=int, default=50, help="round two's labels")
    ap.add_argument(
        "--band-share",
        type=float,
        default=BAND_SHARE,
        help=f"band size / population (default {BAND_SHARE}; at least 2 x --second)",
    )
    ap.add_argument(
        "--below-share",
        type=float,
        default=BELOW_SHARE,
        help=f"round two's share below the threshold (default {BELOW_SHARE})",
    )
    ap.add_argument("--target", type=float, default=0.85, help="combine.target")
    ap.add_argument("--confidence", type=float, default=0.9)
    ap.add_argument("--scale", type=int, default=0, help="also a resampled population this big")
    ap.add_argument(
        "--good-share", type=float, help="the resampled population's GOOD share (--scale)"
    )
    ap.add_argument("--fixed", action="store_true", help="estimate at the run's threshold")
    ap.add_argument(
        "--simulate", type=int, default=0, help="also a simulated demo-shaped population this big"
    )
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    for need in ("combine/scored.parquet", "inputs/gold.tsv"):
        if not (args.run / need).is_file():
            print(f"--run {args.run}: no {need} (not a finished run)", file=sys.stderr)
            raise SystemExit(2)
    table, score, good, thr = load_run(args.run)
    fixed = thr if args.fixed else None
    measure(f"run {args.run}", (table, score, good), args, fixed)
    if args.scale:
        pop = scaled(table, score, good, args.scale, good_share=args.good_share)
        measure(f"resampled x{args.scale}", pop, args, fixed)
    if args.simulate:
        measure(f"simulated {args.simulate}", simulated(args.simulate), args, None)


if __name__ == "__main__":
    main()
