"""The final bitext as a `datasets`-loadable folder whose card states counts, thresholds and the
estimated GOOD share."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from filters.bitext.hf_dataset import CardInfo, PairGroup, write_hf_dataset


def test_loads_with_datasets_and_the_card_says_what_was_kept(tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets", reason="datasets is in the dev extra")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    n = 120
    table = pa.table(
        {
            "src": [f"Satz {i}." for i in range(n)],
            "trg": [f"Sentence {i}." for i in range(n)],
            "src_lang": ["de"] * 80 + ["fr"] * 40,
            "trg_lang": ["en"] * n,
            "combined_score": [0.9] * n,
            "src_url_or_title": [f"http://a/{i}" for i in range(n)],
            "src_source": ["commoncrawl"] * 100 + ["wikipedia"] * 20,
        }
    )
    info = CardInfo(
        target=0.8,
        labelled_pairs=300,
        groups={
            "de-en": PairGroup(80, 0.61, 0.83, [0.76, 0.9]),
            "fr-en": PairGroup(40, 0.7, 0.81, None),
        },
    )
    out = tmp_path / "bitext_hf"
    written = write_hf_dataset(table, out, info)
    assert all(os.path.exists(p) for p in written)
    # A cache of our own: the default one (~/.cache) keys a local folder by its path, and
    # pytest reuses tmp paths, so a stale copy of an earlier run could be read instead.
    ds = datasets.load_dataset(str(out), split="train", cache_dir=str(tmp_path / "hf-cache"))
    assert ds.num_rows == n
    assert set(table.column_names) <= set(ds.column_names)
    assert ds[0]["src"] == "Satz 0."
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "| de-en | 80 | 0.61 | 83.0% | [76.0%, 90.0%] |" in card
    assert "80%" in card and "300 labelled" in card
    assert "src: commoncrawl: 100 sentences" in card
