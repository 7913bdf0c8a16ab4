"""Tatoeba accuracy on the real dev files (LASER layout) and UN-style pool P@1."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np
import pytest

from mining.__main__ import main
from mining.evaluate import evaluate_pool, evaluate_tatoeba, read_lines, retrieve_top1
from tests.support.paths import TATOEBA as DATA


def need_data() -> None:
    if not (DATA / "dev.deu-eng.deu").is_file():
        pytest.skip(f"Tatoeba sample data not found at {DATA}")


def line_embedder(noise: float):
    """Line i of either side of a pair gets the same concept vector plus per-file noise."""

    def embed(texts: list[str], path: Path) -> np.ndarray:
        pair = path.name.split(".")[1]
        concepts = np.random.default_rng(zlib.crc32(pair.encode())).standard_normal(
            (len(texts), 16)
        )
        n = np.random.default_rng(zlib.crc32(path.name.encode())).standard_normal(concepts.shape)
        return (concepts + noise * n).astype(np.float32)

    return embed


def test_tatoeba_dev_layout_and_accuracy(tmp_path: Path) -> None:
    need_data()
    rep = evaluate_tatoeba(DATA, line_embedder(0.05), ["deu", "fra"], prefix="dev")
    assert [r["lang"] for r in rep["langs"]] == ["deu", "fra"]
    assert all(r["n"] == 100 for r in rep["langs"])
    assert rep["average"]["both"] == 100.0
    noisy = evaluate_tatoeba(DATA, line_embedder(1.5), ["deu"], prefix="dev", scoring="margin")
    assert 0 < noisy["average"]["xxx_to_eng"] < 100
    # every language found when none is named
    assert len(evaluate_tatoeba(DATA, line_embedder(0.05), None, prefix="dev")["langs"]) == 16


def test_tatoeba_cli_with_npy_and_missing_language(tmp_path: Path) -> None:
    need_data()
    emb = line_embedder(0.3)
    for lang in ("deu", "jpn"):
        for side in (lang, "eng"):
            f = DATA / f"dev.{lang}-eng.{side}"
            np.save(tmp_path / f"{f.name}.npy", emb(read_lines(f), f))
    rc = main(
        [
            "eval",
            "tatoeba",
            "--data",
            str(DATA),
            "--prefix",
            "dev",
            "--langs",
            "deu",
            "jpn",
            "--emb-dir",
            str(tmp_path),
            "--output",
            str(tmp_path / "rep"),
        ]
    )
    assert rc == 0
    rep = json.loads((tmp_path / "rep" / "tatoeba_dev.json").read_text())
    assert {r["lang"] for r in rep["langs"]} == {"deu", "jpn"}
    assert "**average**" in (tmp_path / "rep" / "tatoeba_dev.md").read_text()
    rc = main(
        [
            "eval",
            "tatoeba",
            "--data",
            str(DATA),
            "--prefix",
            "dev",
            "--langs",
            "xxx",
            "--emb-dir",
            str(tmp_path),
        ]
    )
    assert rc == 2


def test_tatoeba_with_a_real_encoder(tmp_path: Path) -> None:
    """The --model path runs the labse_model encoder; its accuracy equals a direct computation."""
    need_data()
    pytest.importorskip("torch")
    try:
        from labse_model.encode import Encoder
        from labse_model.tiny import make_tiny_checkpoint
    except ImportError as exc:
        pytest.skip(f"labse_model encode API not available: {exc}")
    texts = read_lines(DATA / "train.deu-eng.deu") + read_lines(DATA / "train.deu-eng.eng")
    model = make_tiny_checkpoint(str(tmp_path / "tiny"), sentences=texts, hidden=32, layers=1)
    rc = main(
        [
            "eval",
            "tatoeba",
            "--data",
            str(DATA),
            "--prefix",
            "dev",
            "--langs",
            "deu",
            "--model",
            model,
            "--output",
            str(tmp_path / "rep"),
        ]
    )
    assert rc == 0
    got = json.loads((tmp_path / "rep" / "tatoeba_dev.json").read_text())["langs"][0]
    enc = Encoder.from_pretrained(model)
    de = read_lines(DATA / "dev.deu-eng.deu")
    en = read_lines(DATA / "dev.deu-eng.eng")
    x, y = enc.encode(de), enc.encode(en)
    sim = x @ y.T
    # Both directions against a direct computation. (Not "above 0": a random tiny model may
    # well find none of 100 translations, and did once under load.)
    for key, s, other in (("xxx_to_eng", sim, en), ("eng_to_xxx", sim.T, de)):
        best = s.argmax(axis=1)
        direct = 100 * np.mean([b == i or other[b] == other[i] for i, b in enumerate(best)])
        # A random tiny model makes near-ties; FAISS and NumPy may break those differently.
        top2 = np.sort(s, axis=1)[:, -2:]
        ambiguous = int(np.sum(top2[:, 1] - top2[:, 0] < 1e-5))
        assert abs(got[key] - direct) <= ambiguous, key


def test_un_pool_p_at_1(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    n = 2000
    concepts = rng.standard_normal((n, 32))
    (tmp_path / "un.fr").write_text("".join(f"fr {i}\n" for i in range(n)), encoding="utf-8")
    (tmp_path / "un.en").write_text("".join(f"en {i}\n" for i in range(n)), encoding="utf-8")

    def embed(texts, path):
        return (concepts + 0.6 * rng.standard_normal(concepts.shape)).astype(np.float32)

    rep = evaluate_pool(tmp_path / "un.fr", tmp_path / "un.en", embed, scoring="margin")
    assert rep["pool"] == n and rep["p_at_1_src_to_trg"] > 90 and rep["p_at_1_trg_to_src"] > 90


def test_margin_retrieval_matches_laser_search_mode() -> None:
    # LASER --mode search: best ratio-margin candidate among the k nearest.
    rng = np.random.default_rng(3)
    x = rng.standard_normal((50, 8)).astype(np.float32)
    y = rng.standard_normal((70, 8)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    y /= np.linalg.norm(y, axis=1, keepdims=True)
    sim = x @ y.T
    fi = np.argsort(-sim, axis=1)[:, :4]
    fm = np.take_along_axis(sim, fi, axis=1).mean(1)
    bm = np.sort(sim.T, axis=1)[:, ::-1][:, :4].mean(1)
    ref = [fi[i][np.argmax([sim[i, j] / ((fm[i] + bm[j]) / 2) for j in fi[i]])] for i in range(50)]
    np.testing.assert_array_equal(retrieve_top1(x, y, "margin", 4), ref)
