"""``filters calibrate`` reads labels in combine's order (by pair row), not the file's.

A labels file in labelling order (``filters sample`` interleaves the strata) or shuffled must
give ``calibrate`` the threshold ``combine --features cds_score`` gives on the same labels: the
fit's folds and bootstrap follow the order the pairs come in, so both read them in one order
(:func:`filters.bitext.cli_combine.in_pair_order`).
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from filters.bitext.cli_calibrate import main as calibrate_main
from filters.bitext.cli_combine import main as combine_main

SMALL = ["min_labelled=10", "min_per_label=3", "min_kept=3", "bootstrap=50", "per_pair=false"]


def _files(tmp_path, order_seed: int):
    rng = np.random.default_rng(5)
    n = 120
    good = rng.random(n) < 0.5
    score = np.where(good, 0.62, 0.42) + rng.normal(0.0, 0.15, n)  # overlapping: folds matter
    src = [f"quelle {i}" for i in range(n)]
    trg = [f"target {i}" for i in range(n)]
    pairs = tmp_path / "pairs.parquet"
    pq.write_table(pa.table({"src": src, "trg": trg, "cds_score": score}), pairs)
    labelled = rng.choice(n, 70, replace=False)
    labelled = np.random.default_rng(order_seed).permutation(labelled)
    path = tmp_path / f"labels_{order_seed}.tsv"
    lines = ["sample_id\tlabel\tsrc\ttrg"]
    lines += [f"{i}\t{'GOOD' if good[i] else 'BAD'}\t{src[i]}\t{trg[i]}" for i in labelled]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return pairs, path


def _sets() -> list[str]:
    return [a for kv in SMALL for a in ("--set", kv)]


def test_calibrate_and_combine_give_one_threshold_on_a_shuffled_labels_file(tmp_path, capsys):
    thresholds = []
    for seed in (1, 2):
        pairs, labels = _files(tmp_path, seed)
        comb, cal = tmp_path / f"combine{seed}", tmp_path / f"calibrate{seed}"
        argv = ["--labels", str(labels), "--target", "0.8", *_sets()]
        rc = combine_main(
            ["--pairs", str(pairs), "--features", "cds_score", "--output", str(comb), *argv]
        )
        assert rc == 0, capsys.readouterr().err
        rc = calibrate_main(["--scored", str(pairs), "--output", str(cal), *argv])
        assert rc == 0, capsys.readouterr().err
        combined = json.loads((comb / "combined.json").read_text())
        doc = json.loads((cal / "threshold.json").read_text())
        assert combined["target_reached"]
        assert doc["combined_threshold"] == combined["calibration"]["threshold"]
        assert doc["precision_ci"] == combined["calibration"]["precision_ci"]
        thresholds.append(doc["threshold"])
    # Two orders of the same labels: one threshold.
    assert thresholds[0] == thresholds[1]
