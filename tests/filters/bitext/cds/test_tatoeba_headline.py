"""The headline: CDS on a noisy set built from real Tatoeba pairs, end to end through the CLIs.

deu/fra/spa-eng train pairs (700 each) are split per language into a trusted set (150), the
candidate set θ_noisy learns from (350, half turned BAD: misaligned, truncated, wrong-language
and untranslated targets) and held-out pairs (200, 40% BAD likewise). On the held-out pairs the
CDS score must rank GOOD above BAD clearly better than chance (ROC AUC), and a threshold
calibrated on one half must keep a set that is ~80% GOOD on the other half.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from filters.bitext.calibrate import roc_auc
from filters.bitext.cds.noise import make_noisy, read_tatoeba
from filters.bitext.cli_apply import main as apply_main
from filters.bitext.cli_calibrate import main as calibrate_main
from filters.bitext.cli_cds_score import main as score_main
from filters.bitext.cli_cds_train import main as train_main
from tests.support.paths import TATOEBA

LANGS = ("deu", "fra", "spa")
N_TRUSTED, N_NOISY = 150, 350
# Measured on this split (demo model, 8+8 epochs, 1 thread): AUC 0.82-0.83; misaligned pairs are
# the hard kind (AUC ~0.56 alone: a tiny model trained on 1k pairs barely conditions on x).
MIN_AUC = 0.7
# A shorter training than the demo's (3+2 epochs, not 4+4; 2,000 pieces, 32 tokens a side): the
# thresholds are the same, and it meets them honestly (2026-11-27, 1 thread: AUC 0.821, half B
# GOOD share 0.803 [0.745, 0.856]; the demo settings gave 0.844 and 0.771 [0.714, 0.829]) at
# ~30% less CPU. d_model 64 with 3+2 epochs did not (AUC 0.70, calibration refused): keep 128.
SHORT = ["vocab_size=2000", "model.max_length=32", "noisy_epochs=3", "clean_epochs=2"]


def _write_tsv(path: Path, src, trg, labels=None) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for i, (s, t) in enumerate(zip(src, trg)):
            f.write(f"{s}\t{t}" + (f"\t{labels[i]}" if labels else "") + "\n")
    return path


def _bootstrap_ci(good: np.ndarray, n_boot: int = 1000, seed: int = 0) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    means = [good[rng.integers(0, len(good), len(good))].mean() for _ in range(n_boot)]
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


@pytest.mark.slow
def test_cds_ranks_good_above_bad_and_calibrated_threshold_keeps_80_percent(tmp_path, capsys):
    if not all((TATOEBA / f"train.{lang}-eng.{lang}").is_file() for lang in LANGS):
        pytest.skip(f"Tatoeba train pairs not found under {TATOEBA} (../shared/data absent)")
    torch.set_num_threads(1)
    data = read_tatoeba(str(TATOEBA), LANGS)
    rng = np.random.default_rng(0)
    trusted, noisy, held = {}, {}, {}
    for lang, (src, trg) in data.items():
        p = rng.permutation(len(src))
        parts = (p[:N_TRUSTED], p[N_TRUSTED : N_TRUSTED + N_NOISY], p[N_TRUSTED + N_NOISY :])
        for d, idx in zip((trusted, noisy, held), parts):
            d[lang] = ([src[i] for i in idx], [trg[i] for i in idx])
    cand = make_noisy(noisy, bad_share=0.5, seed=1)
    evals = make_noisy(held, bad_share=0.4, seed=2)
    t_src = [s for lang in LANGS for s in trusted[lang][0]]
    t_trg = [t for lang in LANGS for t in trusted[lang][1]]

    model = tmp_path / "cds"
    rc = train_main(
        [
            "--noisy",
            str(_write_tsv(tmp_path / "noisy.tsv", cand.src, cand.trg)),
            "--trusted",
            str(_write_tsv(tmp_path / "trusted.tsv", t_src, t_trg)),
            "--output",
            str(model),
            "--threads",
            "1",
            "--set",
            "progress=false",
            *(a for kv in SHORT for a in ("--set", kv)),
        ]
    )
    assert rc == 0, capsys.readouterr().err

    scored = tmp_path / "scored" / "scored.parquet"
    rc = score_main(
        [
            "--model",
            str(model),
            "--pairs",
            str(_write_tsv(tmp_path / "held.tsv", evals.src, evals.trg)),
            "--output",
            str(scored.parent),
            "--threads",
            "1",
            "--set",
            "progress=false",
        ]
    )
    assert rc == 0, capsys.readouterr().err
    table = pq.read_table(scored)
    assert table.column("src").to_pylist() == evals.src  # exactly as given, in order
    scores = table.column("cds_score").to_numpy()
    good = np.array([lab == "GOOD" for lab in evals.label])
    auc = roc_auc(scores, good)
    kinds = np.array(evals.kind)
    by_kind = {
        k: roc_auc(scores[(kinds == "true") | (kinds == k)], good[(kinds == "true") | (kinds == k)])
        for k in sorted(set(evals.kind) - {"true"})
    }
    print(
        f"\nCDS ROC AUC on {len(good)} held-out pairs: {auc:.3f}; by BAD kind: "
        + ", ".join(f"{k} {v:.3f}" for k, v in by_kind.items())
    )
    assert auc > MIN_AUC, f"CDS ROC AUC {auc:.3f} (by kind {by_kind})"

    # Calibrate on half A of the held-out pairs, measure on half B.
    half = rng.permutation(len(good))
    a, b = half[: len(half) // 2], half[len(half) // 2 :]
    labels_a = _write_tsv(
        tmp_path / "labels_a.tsv",
        [evals.src[i] for i in a],
        [evals.trg[i] for i in a],
        [evals.label[i] for i in a],
    )
    cal_dir = tmp_path / "cal"
    rc = calibrate_main(
        [
            "--scored",
            str(scored),
            "--labels",
            str(labels_a),
            "--target",
            "0.8",
            "--output",
            str(cal_dir),
        ]
    )
    assert rc == 0, capsys.readouterr().err
    cal = json.loads((cal_dir / "threshold.json").read_text())
    t = cal["threshold"]

    rc = apply_main(
        [
            "--scored",
            str(scored),
            "--threshold",
            str(cal_dir / "threshold.json"),
            "--output",
            str(tmp_path / "final"),
            "--src-lang",
            "xx",
            "--trg-lang",
            "en",
        ]
    )
    assert rc == 0, capsys.readouterr().err
    kept = pq.read_table(tmp_path / "final" / "kept.parquet")
    assert kept.num_rows == int((scores >= t).sum())
    kept_b = good[b][scores[b] >= t]
    share_b = float(kept_b.mean())
    lo_b, hi_b = _bootstrap_ci(kept_b)
    print(
        f"threshold {t:.4f} (interval {cal['threshold_ci'][0]:.4f}..{cal['threshold_ci'][1]:.4f}): "
        f"half A precision {cal['precision']:.3f} {cal['precision_ci']}, retained "
        f"{cal['retained_share']:.3f}; half B GOOD share {share_b:.3f} [{lo_b:.3f}, {hi_b:.3f}] "
        f"of {len(kept_b)} kept"
    )
    # The half-B GOOD share reaches 0.80 within its interval, and agrees with half A's.
    assert hi_b >= 0.80
    assert cal["precision_ci"][0] - 0.05 <= share_b
    assert len(kept_b) >= 0.1 * len(b)  # the threshold keeps a real share, not a handful
