"""Margin scoring of kNN candidates (Artetxe & Schwenk 2019), as LASER's mine_bitexts.py.

score(x, y) = margin(cos(x, y), (mean_k cos(x, NN_k^trg(x)) + mean_k cos(y, NN_k^src(y))) / 2)
with margin(a, b) = a / b (ratio), a - b (distance) or a (absolute). Everything is vectorised
over the (rows, k) candidate matrices: no Python loop touches a pair.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from labse_common.sections.mining import MARGINS

if TYPE_CHECKING:  # a type only: the formulas stay free of FAISS
    from mining.knn import Neighbours

MarginFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


# One formula per margin name, registered in the mining section's registry: the config checks
# ``mining.margin`` against these names, the CLIs offer them (declared here only).
@MARGINS.register("ratio")
def _ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a / b


@MARGINS.register("distance")
def _distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a - b


@MARGINS.register("absolute")
def _absolute(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a


def margin_fn(name: str) -> MarginFn:
    """The formula of a margin name (``a`` the pair's cosine, ``b`` the neighbourhood mean); an
    unknown name is a ConfigError listing the known ones."""
    return MARGINS.get(name, "margin")


def neighbourhood_mean(sims: np.ndarray) -> np.ndarray:
    """Mean cosine of each row's k nearest neighbours (k = min(k, other side's size))."""
    if sims.shape[1] == 0:
        return np.zeros(len(sims), dtype=np.float32)
    finite = np.isfinite(sims)
    if finite.all():
        return sims.mean(axis=1, dtype=np.float32)
    # An approximate index can return fewer than k neighbours (-inf padding): average the rest.
    total = np.where(finite, sims, 0).sum(axis=1, dtype=np.float32)
    return (total / np.maximum(finite.sum(axis=1), 1)).astype(np.float32)


def score_candidates(
    sims: np.ndarray,
    inds: np.ndarray,
    own_mean: np.ndarray,
    other_mean: np.ndarray,
    margin: str = "ratio",
) -> np.ndarray:
    """Margin score of every candidate ``inds[i, j]`` of query ``i``.

    ``sims[i, j]`` is cos(query i, candidate inds[i, j]); ``own_mean`` the queries'
    neighbourhood means and ``other_mean`` the candidates' side means.
    """
    fn = margin_fn(margin)
    if sims.size == 0:
        return np.zeros(sims.shape, dtype=np.float32)
    missing = inds < 0  # padding of an approximate search that found fewer than k
    denom = (own_mean[:, None] + other_mean[np.where(missing, 0, inds)]) / 2
    with np.errstate(divide="ignore", invalid="ignore"):
        scores = np.asarray(fn(sims, denom), dtype=np.float32)
    if missing.any():
        scores[missing] = -np.inf
    return scores


@dataclass
class Scored:
    """Both directions' kNN candidates with their margin scores and neighbourhood means."""

    neighbours: Neighbours
    fwd_mean: np.ndarray
    bwd_mean: np.ndarray
    fwd_scores: np.ndarray
    bwd_scores: np.ndarray


def _nearest(sims: np.ndarray, k: int | None) -> np.ndarray:
    """Each row's ``k`` highest similarities (all of them when ``k`` is None or covers them)."""
    if k is None or sims.shape[1] <= k:
        return sims
    return -np.partition(-sims, k - 1, axis=1)[:, :k]


def score(nb: Neighbours, margin: str, k: int | None = None) -> Scored:
    """Margin-score every kNN candidate in both directions (LASER's score_candidates): the one
    scoring of the in-memory path, bounded mining and the planner's calibration. ``k``: the
    neighbourhood means use each row's k nearest only, when more candidates were fetched (the
    lexical re-ranking looks past the k that define the margin)."""
    fwd_mean = neighbourhood_mean(_nearest(nb.fwd_sims, k))
    bwd_mean = neighbourhood_mean(_nearest(nb.bwd_sims, k))
    fwd = score_candidates(nb.fwd_sims, nb.fwd_inds, fwd_mean, bwd_mean, margin)
    bwd = score_candidates(nb.bwd_sims, nb.bwd_inds, bwd_mean, fwd_mean, margin)
    return Scored(nb, fwd_mean, bwd_mean, fwd, bwd)


def pair_scores(
    x: np.ndarray,
    y: np.ndarray,
    src_idx: np.ndarray,
    trg_idx: np.ndarray,
    fwd_mean: np.ndarray,
    bwd_mean: np.ndarray,
    margin: str = "ratio",
) -> np.ndarray:
    """Margin score of given (src, trg) pairs (LASER's ``--mode score``), vectorised."""
    cos = np.einsum("nd,nd->n", x[src_idx], y[trg_idx])
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(
            margin_fn(margin)(cos, (fwd_mean[src_idx] + bwd_mean[trg_idx]) / 2), np.float32
        )
