"""BUCC threshold optimisation on hand-made gold sets, and the BUCC evaluation end to end."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np
import pytest

from labse_common.sections.mining import MiningConfig
from mining.__main__ import main
from mining.bucc import (
    evaluate_at,
    evaluate_bucc,
    mine_candidates,
    optimize_threshold,
    read_bucc,
    read_gold,
)

# evaluate_bucc's default: LASER's BUCC setting
BUCC_SETTING = MiningConfig(k=4, margin="ratio", mode="max", unify=True, progress=False)


def test_optimizer_hand_computed() -> None:
    cands = {
        ("a1", "b1"): 0.9,
        ("a2", "b2"): 0.8,
        ("a3", "b9"): 0.7,
        ("a4", "b4"): 0.6,
        ("a5", "b8"): 0.5,
    }
    gold = {("a1", "b1"), ("a2", "b2"), ("a4", "b4"), ("a6", "b6")}
    # cumulative F1 by cut: .4, .667, .571, .75, .667 -> best after the 4th candidate,
    # threshold halfway between 0.6 and 0.5.
    r = optimize_threshold(cands, gold)
    assert r.threshold == pytest.approx(0.55)
    assert (r.precision, r.recall, r.f1) == pytest.approx((0.75, 0.75, 0.75))
    assert evaluate_at(cands, gold, r.threshold).f1 == pytest.approx(0.75)


def test_optimizer_best_at_last_candidate() -> None:
    # LASER's bucc.py reads items[i + 1] here and fails; the threshold is the last score.
    cands = {("a", "x"): 0.9, ("b", "y"): 0.8, ("c", "z"): 0.7}
    gold = {("a", "x"), ("c", "z"), ("d", "w")}
    r = optimize_threshold(cands, gold)
    assert r.threshold == pytest.approx(0.7)
    assert r.f1 == pytest.approx(2 / 3)
    assert evaluate_at(cands, gold, r.threshold).f1 == pytest.approx(2 / 3)


def test_optimizer_never_cuts_inside_a_tie() -> None:
    cands = {("a", "x"): 0.9, ("b", "y"): 0.8, ("c", "z"): 0.8}
    gold = {("a", "x"), ("b", "y")}
    r = optimize_threshold(cands, gold)
    # Cutting between the two 0.8s (F1 = 1) cannot be realised by a threshold.
    assert r.threshold == pytest.approx(0.8)
    assert r.f1 == pytest.approx(0.8)
    assert evaluate_at(cands, gold, r.threshold).f1 == pytest.approx(r.f1)


def test_read_bucc_counts_malformed(tmp_path: Path) -> None:
    from labse_common.stats import StageCounter

    f = tmp_path / "x.de"
    f.write_text("de-1\tHallo Welt\nno tab here\nde-2\tZweiter Satz\n\tno id\n", encoding="utf-8")
    c = StageCounter()
    ids, texts = read_bucc(f, c)
    assert ids == ["de-1", "de-2"] and texts[1] == "Zweiter Satz"
    rep = c.to_report("t")["counts"]["bucc_lines"]
    assert rep == {"in": 4, "out": 2, "dropped": {"malformed": 2}}


def concept_embedder(dim: int = 32, noise: float = 0.35):
    """Sentences 'w<concept> ...' get the concept's vector plus sentence-specific noise."""
    rng = np.random.default_rng(0)
    concepts = rng.standard_normal((1000, dim))

    def embed(texts: list[str], path: Path) -> np.ndarray:
        out = []
        for t in texts:
            cid = int(t.split()[0][1:])
            n = np.random.default_rng(zlib.crc32(t.encode())).standard_normal(dim)
            out.append(concepts[cid] + noise * n)
        return np.array(out, np.float32)

    return embed


def write_split(d: Path, split: str, n_par: int, n_extra: int, offset: int) -> None:
    rng = np.random.default_rng(offset)
    de, en, gold = [], [], []
    for i in range(n_par):
        c = offset + i
        de.append((f"de-{split}-{i}", f"w{c} Satz {i}"))
        en.append((f"en-{split}-{i}", f"w{c} sentence {i}"))
        gold.append(f"de-{split}-{i}\ten-{split}-{i}")
    for j in range(n_extra):  # unaligned sentences on both sides
        de.append((f"de-{split}-x{j}", f"w{offset + 100 + j} nur deutsch {j}"))
        en.append((f"en-{split}-x{j}", f"w{offset + 200 + j} english only {j}"))
    for lang, rows in (("de", de), ("en", en)):
        order = rng.permutation(len(rows))
        (d / f"de-en.{split}.{lang}").write_text(
            "".join(f"{rows[k][0]}\t{rows[k][1]}\n" for k in order), encoding="utf-8"
        )
    (d / f"de-en.{split}.gold").write_text("\n".join(gold) + "\n", encoding="utf-8")


def test_bucc_end_to_end(tmp_path: Path) -> None:
    d = tmp_path / "bucc" / "de-en"
    d.mkdir(parents=True)
    write_split(d, "training", 60, 80, offset=0)
    write_split(d, "sample", 50, 70, offset=500)
    embed = concept_embedder()
    rep = evaluate_bucc(tmp_path / "bucc", ["de-en"], embed)
    row = rep["pairs"][0]
    # What the construction implies: a planted pair shares its concept, every other candidate
    # pairs two unrelated concepts, so every gold margin is above every other candidate's and
    # the tuned threshold is the midpoint of that gap (F1 100 on the tuning split).
    fs, ft, fg = (d / f"de-en.training.{x}" for x in ("de", "en", "gold"))
    s, t = read_bucc(fs), read_bucc(ft)
    cands = mine_candidates(s, t, embed(s[1], fs), embed(t[1], ft), BUCC_SETTING)
    gold = read_gold(fg)
    assert len(gold) == 60 and gold <= set(cands)
    gold_low = min(cands[p] for p in gold)
    other_high = max(v for p, v in cands.items() if p not in gold)
    assert gold_low > other_high
    assert row["threshold"] == pytest.approx((gold_low + other_high) / 2, rel=1e-12)
    assert row["tune_f1"] == pytest.approx(100.0)
    assert row["f1"] > 90  # the other split's planted pairs fall on the same side of the gap


def test_bucc_cli_with_npy_embeddings(tmp_path: Path) -> None:
    d = tmp_path / "bucc"
    d.mkdir()
    write_split(d, "training", 40, 40, offset=0)
    write_split(d, "sample", 40, 40, offset=500)
    embed = concept_embedder()
    for f in d.glob("de-en.*.[de][en]"):
        _, texts = read_bucc(f)
        np.save(f.with_name(f.name + ".npy"), embed(texts, f))
    rc = main(
        ["eval", "bucc", "--data", str(d), "--bucc-pairs", "de-en", "--output", str(tmp_path / "r")]
    )
    assert rc == 0
    rep = json.loads((tmp_path / "r" / "bucc.json").read_text())
    assert rep["pairs"][0]["f1"] > 90
    assert "| de-en |" in (tmp_path / "r" / "bucc.md").read_text()
    assert main(["eval", "bucc", "--data", str(tmp_path / "nope")]) == 2
