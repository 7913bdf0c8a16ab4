"""Mining with a lexicon (mining.lexical_rerank through ``mining mine --lexicon``): candidates
re-ranked by margin + words, the margin column unchanged, the threshold on the margin."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from labse_common.stats import check_balanced
from mining import lexicon, lexicon_file
from mining.__main__ import main
from tests.support.lexicon_toy import toy_corpus

N = 40  # source sentences, each with its translation and a decoy on the target side
K = 4


@pytest.fixture(scope="module")
def task(tmp_path_factory) -> dict:
    """Embeddings that put each source's decoy nearer than its translation: the decoy
    (another sentence, other words) is the margin's 1-best, the translation its second."""
    d = tmp_path_factory.mktemp("rerank")
    pairs = toy_corpus(N, seed=11)
    src = [a for a, _ in pairs]
    trans = [b for _, b in pairs]
    decoys = [b for _, b in toy_corpus(N, seed=12)]
    rng = np.random.default_rng(0)
    base = rng.standard_normal((N, 32))
    x = base + 0.05 * rng.standard_normal((N, 32))
    y_trans = base + 0.60 * rng.standard_normal((N, 32))
    y_decoy = base + 0.30 * rng.standard_normal((N, 32))
    y = np.vstack([y_trans, y_decoy])
    (d / "src.txt").write_text("".join(f"{s}\n" for s in src), encoding="utf-8")
    (d / "trg.txt").write_text("".join(f"{t}\n" for t in trans + decoys), encoding="utf-8")
    np.save(d / "src.npy", x.astype(np.float32))
    np.save(d / "trg.npy", y.astype(np.float32))
    lex_path = d / "lexicon.parquet"
    lexicon_file.save(lexicon.fit(toy_corpus(600)), lex_path)
    return {"dir": d, "x": x, "y": y, "truth": {s: t for s, t in zip(src, trans)}, "lex": lex_path}


def mine(task: dict, out: Path, *extra: str) -> tuple[int, Path]:
    d = task["dir"]
    rc = main(
        [
            "mine",
            "--src-text",
            str(d / "src.txt"),
            "--trg-text",
            str(d / "trg.txt"),
            "--src-emb",
            str(d / "src.npy"),
            "--trg-emb",
            str(d / "trg.npy"),
            "--output",
            str(out),
            "--k",
            str(K),
            "--mode",
            "fwd",
            "--set",
            "progress=false",
            *extra,
        ]
    )
    return rc, out


def correct(task: dict, out: Path) -> int:
    rows = pq.read_table(out / "mined.parquet", columns=["src", "trg"]).to_pylist()
    return sum(task["truth"][r["src"]] == r["trg"] for r in rows)


def test_the_lexicon_finds_the_translation_the_margin_ranks_second(task, tmp_path):
    rc, plain = mine(task, tmp_path / "plain")
    assert rc == 0
    assert correct(task, plain) < N // 4  # the decoys win on margin
    rc, ranked = mine(
        task, tmp_path / "ranked", "--lexicon", str(task["lex"]), "--lexicon-weight", "0.1"
    )
    assert rc == 0
    assert correct(task, ranked) >= N - 2
    t = pq.read_table(ranked / "mined.parquet")
    assert {"lex_fwd", "lex_bwd"} <= set(t.column_names)
    stats = json.loads((ranked / "stats.json").read_text())
    assert not check_balanced(stats)


def unit(a: np.ndarray) -> np.ndarray:
    return a / np.linalg.norm(a, axis=1, keepdims=True)


def test_the_margin_column_is_the_margin_over_the_k_nearest(task, tmp_path):
    """Re-ranking looks at 16 candidates, but a pair's margin is LASER's ratio margin over the k
    nearest of each side, computed here by brute force."""
    rc, out = mine(task, tmp_path / "o", "--lexicon", str(task["lex"]), "--lexicon-weight", "0.1")
    assert rc == 0
    x, y = unit(task["x"]), unit(task["y"])
    sims = x @ y.T
    fwd_mean = np.sort(sims, axis=1)[:, -K:].mean(1)
    bwd_mean = np.sort(sims, axis=0)[-K:, :].mean(0)
    t = pq.read_table(out / "mined.parquet").to_pylist()
    src_row = {s: i for i, s in enumerate((task["dir"] / "src.txt").read_text().splitlines())}
    trg_row = {s: i for i, s in enumerate((task["dir"] / "trg.txt").read_text().splitlines())}
    for r in t:
        i, j = src_row[r["src"]], trg_row[r["trg"]]
        expected = sims[i, j] / ((fwd_mean[i] + bwd_mean[j]) / 2)
        assert r["margin"] == pytest.approx(expected, rel=1e-4)
    margins = [r["margin"] for r in t]
    assert margins == sorted(margins, reverse=True)


def test_the_threshold_applies_to_the_margin_and_is_counted(task, tmp_path):
    rc, out = mine(
        task,
        tmp_path / "o",
        "--lexicon",
        str(task["lex"]),
        "--lexicon-weight",
        "0.1",
        "--threshold",
        "1.0",
    )
    assert rc == 0
    t = pq.read_table(out / "mined.parquet")
    assert len(t) and min(t.column("margin").to_pylist()) > 1.0
    c = json.loads((out / "stats.json").read_text())["counts"]["candidates"]
    assert c["dropped"]["below_threshold"] == N - len(t) and c["in"] == N


def test_weight_zero_mines_by_margin_and_only_adds_the_scores(task, tmp_path):
    _, plain = mine(task, tmp_path / "plain")
    _, scored = mine(
        task, tmp_path / "scored", "--lexicon", str(task["lex"]), "--lexicon-weight", "0"
    )
    a = pq.read_table(plain / "mined.parquet")
    b = pq.read_table(scored / "mined.parquet")
    assert b.drop_columns(["lex_fwd", "lex_bwd"]).equals(a)


def test_a_missing_lexicon_is_exit_2(task, tmp_path, caplog):
    rc, out = mine(task, tmp_path / "o", "--lexicon", str(tmp_path / "none.parquet"))
    assert rc == 2 and "--lexicon" in caplog.text and not out.exists()
