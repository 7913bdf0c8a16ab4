"""Does the calibrated threshold keep its promise on pairs it never saw? Coverage over seeds.

For each seed: planted candidates (``filters.bitext.drill``), a labelled sample of 500 drawn from
the calibration half only, the combined score fitted and its threshold chosen for ``--target``
GOOD; then the precision of what that threshold keeps on the other half, against the
calibration's bootstrap interval. Prints how often the unseen half's precision fell inside the
interval (the nominal rate is the interval's level), and the combined out-of-fold AUC against
each single feature's (the same-run peers: margin alone, CDS alone).

    .venv/bin/python bench/calibration_bench.py [--seeds 20] [--confidence 0.9]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from filters.bitext.combine import fit_combined  # noqa: E402
from filters.bitext.drill import planted_candidates  # noqa: E402
from filters.bitext.sample import auto_label, draw_sample, labels_bool, split_halves  # noqa: E402
from labse_common.sections.combine import CombineConfig  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--sample", type=int, default=500, help="labelled pairs per seed")
    ap.add_argument("--target", type=float, default=0.8)
    ap.add_argument("--confidence", type=float, default=0.9)
    args = ap.parse_args(argv)
    inside, ratios = 0, []
    for seed in range(args.seeds):
        table, planted = planted_candidates(seed=seed + 100)
        half = split_halves(table.column("src").to_pylist())
        pool, held = table.filter(pa.array(half == 0)), table.filter(pa.array(half == 1))
        s = auto_label(draw_sample(pool, args.sample, seed=seed), planted)
        cfg = CombineConfig(
            target=args.target, bootstrap=300, confidence=args.confidence, seed=seed
        )
        fit = fit_combined(s, labels_bool(s), cfg)
        if fit.calibration is None:
            print(f"seed {seed}: target unreachable ({fit.unreachable})")
            continue
        keep = fit.scorer.score(held) >= fit.calibration.threshold
        truth = np.array(
            [
                (a, b) in planted
                for a, b in zip(held.column("src").to_pylist(), held.column("trg").to_pylist())
            ]
        )
        p = float(truth[keep].mean())
        lo, hi = fit.calibration.precision_ci
        inside += lo <= p <= hi
        auc = {f.name: f.auc for f in fit.features}
        ratios.append(fit.oof_auc / max(auc["margin"], auc["cds_score"]))
        print(
            f"seed {seed:2d}: unseen-half precision {p:.3f}, interval [{lo:.3f}, {hi:.3f}], "
            f"AUC combined {fit.oof_auc:.3f} margin {auc['margin']:.3f} cds {auc['cds_score']:.3f}"
        )
    print(f"\ninside the {args.confidence:.0%} interval: {inside}/{args.seeds}")
    print(f"ratio combined AUC / best single feature: median {np.median(ratios):.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
