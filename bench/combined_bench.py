"""ROC AUC of the combined pair score on generated noise, per kind, against each scorer alone.

The noise is what mined bitext gets wrong (``filters.bitext.cds.noise``): held-out Tatoeba pairs
of every language, a share of them turned into ``misaligned``, ``truncated``, ``wrong_language``
and ``untranslated`` pairs. Features are computed the way a run computes them:

* ``margin``/``cosine``: the encoder's margin score of each pair, neighbourhoods from the pairs'
  own sentences (``filters.bitext.margin_score``, the miner's kNN and margin code);
* ``cds_score`` (and ``cds_score_bwd``, ``dual_xent``, ``xent_clean*`` when the CDS model is
  bidirectional): the trained CDS scorer;
* the derived text features of ``filters.bitext.combine``.

The combined score is evaluated out of fold (stratified k-fold: no pair is scored by a model
fitted on it). For each kind, the AUC of GOOD pairs against that kind's BAD pairs is printed for
the combined score and for each feature alone; the same-run peers are **CDS alone** (the filter
before this one) and **margin alone** (what LASER and stopes threshold), and the ratio of the
combined AUC to each is printed.

    .venv/bin/python bench/combined_bench.py --encoder demo_out/train/final \
        --cds demo_out/cds_train [--data ../shared/data/tatoeba] [--split dev]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from filters.bitext.calibrate import roc_auc  # noqa: E402
from filters.bitext.cds.noise import KINDS, make_noisy, read_tatoeba  # noqa: E402
from filters.bitext.combine import available_features, feature_matrix, out_of_fold  # noqa: E402

log = logging.getLogger("bench.combined")
DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "tatoeba"


def languages(data: Path, split: str) -> list[str]:
    return sorted(p.name.split(".")[1].split("-")[0] for p in data.glob(f"{split}.*-eng.eng"))


def features_table(noisy, encoder: str, cds: str | None, batch_size: int) -> pa.Table:
    from filters.bitext.margin_score import margin_score_pairs
    from labse_common.sections.mining import MiningConfig

    cols: dict[str, object] = {"src": noisy.src, "trg": noisy.trg, "src_lang": noisy.lang}
    t0 = time.perf_counter()
    # The mining section's defaults (k=4, ratio margin, exact search), as before.
    cfg = MiningConfig(batch_size=batch_size, progress=False)
    ms = margin_score_pairs(encoder, noisy.src, noisy.trg, cfg)
    cols["margin"], cols["cosine"] = ms.margin, ms.cosine
    log.info("margin/cosine of %d pairs in %.1f s", len(noisy), time.perf_counter() - t0)
    if cds:
        from filters.bitext.cds.score import CdsScorer

        t0 = time.perf_counter()
        scores = CdsScorer.load(cds, device="cpu").score_all(noisy.src, noisy.trg)
        for k, v in scores.items():
            cols[k] = np.asarray(v, dtype=np.float64)
        log.info("CDS scores of %d pairs in %.1f s", len(noisy), time.perf_counter() - t0)
    return pa.table(cols)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--encoder", required=True, help="LaBSE checkpoint folder (HF/ST layout)")
    ap.add_argument("--cds", help="trained CDS model folder (cds-train output); omit: no CDS")
    ap.add_argument(
        "--data", default=str(DATA), help="Tatoeba folder (default ../shared/data/tatoeba)"
    )
    ap.add_argument("--split", default="dev", help="file prefix: dev (held out) or train")
    ap.add_argument("--bad-share", type=float, default=0.5, help="share of pairs made BAD")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    data = Path(args.data)
    langs = languages(data, args.split)
    if not langs:
        ap.error(f"no {args.split}.*-eng.eng files under {data}")
    noisy = make_noisy(read_tatoeba(str(data), langs, args.split), args.bad_share, seed=args.seed)
    table = features_table(noisy, args.encoder, args.cds, args.batch_size)
    names = available_features(table)
    x = feature_matrix(table, names)
    good = np.asarray([lab == "GOOD" for lab in noisy.label])
    combined = out_of_fold(x, good, args.folds, 1.0, args.seed)
    kinds = np.asarray(noisy.kind)
    rows: dict[str, dict[str, float]] = {}
    columns = {"combined": combined} | {n: x[:, j] for j, n in enumerate(names)}
    for kind in ("all", *KINDS):
        m = good | ((kinds == kind) if kind != "all" else ~good)
        if (m & ~good).sum() == 0:
            continue
        rows[kind] = {}
        for name, s in columns.items():
            ok = m & np.isfinite(s)
            auc = roc_auc(s[ok], good[ok])
            # A feature where lower means GOOD (cross-entropy): report its better orientation.
            rows[kind][name] = max(auc, 1.0 - auc) if name != "combined" else auc
    print(
        f"\n{len(noisy)} pairs ({int(good.sum())} GOOD) from {args.split} of {len(langs)} "
        f"languages; combined = {len(names)} features, out-of-fold over {args.folds} folds\n"
    )
    head = ["kind", "combined", *names]
    print(" | ".join(f"{h:>14}" for h in head))
    for kind, r in rows.items():
        print(" | ".join([f"{kind:>14}", *(f"{r[h]:14.3f}" for h in head[1:])]))
    print()
    for peer in ("cds_score", "margin"):
        if peer in names:
            for kind, r in rows.items():
                print(f"ratio combined / {peer} alone, {kind:>14}: {r['combined'] / r[peer]:.2f}x")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"pairs": len(noisy), "features": names, "auc": rows}, indent=2),
            encoding="utf-8",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
