"""Calibration drills: mined candidates whose truth is known, to check a threshold's promise.

The GOOD candidates are planted translations; margin and CDS each separate them only partly and
err independently, as in a real run. Used by the tests and by ``bench/calibration_bench.py``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def planted_candidates(n: int = 6000, seed: int = 7) -> tuple[pa.Table, set[tuple[str, str]]]:
    """``n`` mined pairs (de/fr -> en) with margin and cds_score columns, and the GOOD ones."""
    rng = np.random.default_rng(seed)
    lang = rng.choice(["de", "fr"], size=n)
    good = rng.random(n) < np.where(lang == "de", 0.55, 0.4)
    margin = np.where(good, rng.normal(1.12, 0.05, n), rng.normal(1.05, 0.05, n))
    cds = np.where(good, rng.normal(0.4, 0.6, n), rng.normal(-0.2, 0.6, n))
    src = [f"source sentence {i} " + "x" * int(rng.integers(10, 60)) for i in range(n)]
    trg = [f"target sentence {i} " + "y" * int(rng.integers(10, 60)) for i in range(n)]
    table = pa.table(
        {
            "src": src,
            "trg": trg,
            "src_lang": lang.tolist(),
            "trg_lang": ["en"] * n,
            "margin": margin.astype(np.float32),
            "cds_score": cds.astype(np.float32),
        }
    )
    planted = {(s, t) for s, t, g in zip(src, trg, good) if g}
    return table, planted
