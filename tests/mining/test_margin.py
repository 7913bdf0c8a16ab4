"""Margin scoring and retrieval against a plain NumPy reference of LASER's mine_bitexts.py."""

from __future__ import annotations

import numpy as np
import pytest

from labse_common.sections.mining import MiningConfig
from labse_common.stats import StageCounter, check_balanced
from mining.mine import mine_vectors
from mining.retrieval import MODES


def unit(a: np.ndarray) -> np.ndarray:
    return (a / np.linalg.norm(a, axis=1, keepdims=True)).astype(np.float32)


def random_data(n_src: int, n_trg: int, dim: int, seed: int):
    rng = np.random.default_rng(seed)
    return unit(rng.standard_normal((n_src, dim))), unit(rng.standard_normal((n_trg, dim)))


def clustered_data(n_src: int, n_trg: int, dim: int, seed: int, clusters: int = 8):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim)) * 3
    x = centres[rng.integers(0, clusters, n_src)] + rng.standard_normal((n_src, dim))
    y = centres[rng.integers(0, clusters, n_trg)] + rng.standard_normal((n_trg, dim))
    return unit(x), unit(y)


def laser_reference(x, y, k, margin, mode, threshold):
    """Brute force, written as LASER's formulas read: loops, sets, no FAISS."""
    sim = x @ y.T
    kx, ky = min(k, len(y)), min(k, len(x))
    x2y_ind = np.argsort(-sim, axis=1)[:, :kx]
    y2x_ind = np.argsort(-sim.T, axis=1)[:, :ky]
    x2y_mean = np.array([sim[i, x2y_ind[i]].mean() for i in range(len(x))])
    y2x_mean = np.array([sim[y2x_ind[j], j].mean() for j in range(len(y))])
    m = {"ratio": lambda a, b: a / b, "distance": lambda a, b: a - b, "absolute": lambda a, b: a}[
        margin
    ]

    def sc(i, j):
        return m(float(x[i] @ y[j]), (x2y_mean[i] + y2x_mean[j]) / 2)

    fwd = {}
    for i in range(len(x)):
        cands = [(sc(i, j), j) for j in x2y_ind[i]]
        best = max(range(len(cands)), key=lambda c: cands[c][0])
        fwd[i] = (cands[best][1], cands[best][0])
    bwd = {}
    for j in range(len(y)):
        cands = [(sc(i, j), i) for i in y2x_ind[j]]
        best = max(range(len(cands)), key=lambda c: cands[c][0])
        bwd[j] = (cands[best][1], cands[best][0])
    keep = (lambda s: True) if threshold is None else (lambda s: s > threshold)
    out = {}
    if mode == "fwd":
        out = {(i, j): s for i, (j, s) in fwd.items()}
    elif mode == "bwd":
        out = {(i, j): s for j, (i, s) in bwd.items()}
    elif mode == "intersect":
        out = {(i, j): s for i, (j, s) in fwd.items() if bwd[j][0] == i}
    elif mode == "union":
        for (i, j), s in [((i, j), s) for i, (j, s) in fwd.items()] + [
            ((i, j), s) for j, (i, s) in bwd.items()
        ]:
            out[(i, j)] = max(s, out.get((i, j), s))
    elif mode == "max":
        cands = [((i, j), s) for i, (j, s) in fwd.items()] + [
            ((i, j), s) for j, (i, s) in bwd.items()
        ]
        seen_s, seen_t = set(), set()
        for (i, j), s in sorted(cands, key=lambda c: -c[1]):
            if i not in seen_s and j not in seen_t:
                seen_s.add(i)
                seen_t.add(j)
                out[(i, j)] = s
    return {p: s for p, s in out.items() if keep(s)}


def ours(x, y, k, margin, mode, threshold, index="flat"):
    counter = StageCounter()
    cfg = MiningConfig(k=k, margin=margin, mode=mode, threshold=threshold, index=index)
    pairs, _ = mine_vectors(x, y, cfg, counter)
    got = {(int(i), int(j)): float(s) for i, j, s in zip(pairs.src, pairs.trg, pairs.score)}
    assert len(got) == len(pairs), "a pair was emitted twice"
    report = counter.to_report("t")
    assert check_balanced(report) == []
    assert report["counts"]["candidates"]["out"] == len(pairs)
    assert np.all(np.diff(pairs.score) <= 0), "pairs must come sorted by decreasing score"
    return got


def assert_same(got: dict, ref: dict) -> None:
    assert set(got) == set(ref)
    keys = sorted(ref)
    np.testing.assert_allclose([got[p] for p in keys], [ref[p] for p in keys], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("margin", ["ratio", "distance", "absolute"])
@pytest.mark.parametrize("data", ["random", "clustered"])
def test_matches_laser_reference(mode: str, margin: str, data: str) -> None:
    make = random_data if data == "random" else clustered_data
    x, y = make(60, 45, 16, seed=hash((mode, margin, data)) % 1000)
    threshold = {"ratio": 1.0, "distance": 0.0, "absolute": 0.3}[margin]
    for k, th in ((4, None), (7, threshold)):
        assert_same(ours(x, y, k, margin, mode, th), laser_reference(x, y, k, margin, mode, th))


def test_threshold_is_strict_and_applies_everywhere() -> None:
    x, y = random_data(30, 30, 8, seed=3)
    ref = laser_reference(x, y, 4, "ratio", "fwd", None)
    cut = sorted(ref.values())[len(ref) // 2]
    for mode in MODES:
        got = ours(x, y, 4, "ratio", mode, cut)
        assert all(s > cut for s in got.values())


@pytest.mark.parametrize("n_src,n_trg", [(1, 1), (1, 5), (5, 1), (3, 2)])
def test_k_larger_than_corpus(n_src: int, n_trg: int) -> None:
    x, y = random_data(n_src, n_trg, 8, seed=n_src * 10 + n_trg)
    for mode in MODES:
        assert_same(
            ours(x, y, 16, "ratio", mode, None), laser_reference(x, y, 16, "ratio", mode, None)
        )


def test_empty_side_gives_no_pairs() -> None:
    x, _ = random_data(5, 1, 8, seed=0)
    empty = np.zeros((0, 8), np.float32)
    for mode in MODES:
        assert ours(x, empty, 4, "ratio", mode, None) == {}
        assert ours(empty, x, 4, "ratio", mode, None) == {}


def test_greedy_rounds_equal_sequential_on_long_chain() -> None:
    # A chain where each pair blocks the next forces many rounds of the vectorised greedy.
    from mining.retrieval import Pairs, greedy_one_to_one

    n = 300
    src = np.concatenate([np.arange(n), np.arange(n)])
    trg = np.concatenate([np.arange(n), np.arange(1, n + 1)])
    score = np.concatenate([np.linspace(2, 1, n), np.linspace(2, 1, n) - 1e-4]).astype(np.float32)
    p = Pairs(src, trg, score)
    keep = set(greedy_one_to_one(p, max_rounds=5).tolist())
    seen_s, seen_t, ref = set(), set(), set()
    for i in np.argsort(-score, kind="stable"):
        if src[i] not in seen_s and trg[i] not in seen_t:
            seen_s.add(src[i])
            seen_t.add(trg[i])
            ref.add(int(i))
    assert keep == ref


def test_padding_from_a_short_approximate_answer_is_ignored() -> None:
    from mining.margin import neighbourhood_mean, score_candidates

    sims = np.array([[0.9, 0.5, -np.inf], [0.8, 0.6, 0.4]], np.float32)
    inds = np.array([[1, 0, -1], [0, 1, 2]])
    mean = neighbourhood_mean(sims)
    np.testing.assert_allclose(mean, [0.7, 0.6], rtol=1e-6)
    sc = score_candidates(sims, inds, mean, np.array([0.5, 0.5, 0.5], np.float32))
    assert sc[0, 2] == -np.inf and np.isfinite(sc[0, :2]).all()
    np.testing.assert_allclose(sc[0, 0], 0.9 / ((0.7 + 0.5) / 2), rtol=1e-6)
