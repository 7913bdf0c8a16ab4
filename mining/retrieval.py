"""Retrieval modes turning scored kNN candidates into pairs: fwd, bwd, intersect, max, union.

fwd: each source sentence with its best-scoring target candidate; bwd: the reverse;
intersect: pairs that are each other's best both ways; max: both lists pooled, then a greedy
one-to-one pass in decreasing score (LASER's ``--retrieval max``); union: both lists pooled,
a pair proposed twice kept once. The threshold (score > T, as LASER) applies in every mode.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from labse_common.sections.mining import RETRIEVAL_MODES
from labse_common.stats import StageCounter

MODES = RETRIEVAL_MODES  # the mining section's registry: each mode registers itself below
UNIT = "candidates"


@dataclass
class Pairs:
    """Selected pairs as parallel arrays (indices into the source/target sides)."""

    src: np.ndarray
    trg: np.ndarray
    score: np.ndarray

    def __len__(self) -> int:
        return len(self.src)

    @staticmethod
    def empty() -> Pairs:
        return Pairs(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32))

    def take(self, mask_or_idx: np.ndarray) -> Pairs:
        return Pairs(self.src[mask_or_idx], self.trg[mask_or_idx], self.score[mask_or_idx])


def best_candidate(scores: np.ndarray, inds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the candidate with the highest margin (first one on ties, as np.argmax)."""
    if scores.shape[1] == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    j = scores.argmax(axis=1)
    rows = np.arange(len(scores))
    return inds[rows, j], scores[rows, j]


def _dedup_pairs(p: Pairs) -> tuple[Pairs, int]:
    """Keep each (src, trg) once, with its highest score; returns the pairs and #removed."""
    if len(p) == 0:
        return p, 0
    order = np.argsort(-p.score, kind="stable")
    p = p.take(order)
    key = p.src * (int(p.trg.max()) + 1) + p.trg  # one int64 per pair: a fast 1-D unique
    _, first = np.unique(key, return_index=True)
    keep = np.sort(first)  # stay in decreasing-score order
    return p.take(keep), len(p) - len(keep)


def greedy_one_to_one(p: Pairs, max_rounds: int = 64) -> np.ndarray:
    """Indices (into ``p``, sorted by decreasing score) that LASER's greedy max pass accepts.

    Vectorised in rounds: a candidate that is the best remaining one for both its source and
    its target is accepted by the sequential greedy pass too (nothing earlier conflicts), and
    everything sharing a side with it is rejected. Rare long chains fall back to the
    sequential pass for the little that remains.
    """
    order = np.argsort(-p.score, kind="stable")
    s, t = p.src[order], p.trg[order]
    n = len(order)
    alive = np.ones(n, dtype=bool)
    accepted = np.zeros(n, dtype=bool)
    src_taken = np.zeros(int(s.max()) + 1 if n else 0, dtype=bool)
    trg_taken = np.zeros(int(t.max()) + 1 if n else 0, dtype=bool)
    for _ in range(max_rounds):
        idx = np.flatnonzero(alive)
        if idx.size == 0:
            break
        first_s = np.zeros(idx.size, dtype=bool)
        first_s[np.unique(s[idx], return_index=True)[1]] = True
        first_t = np.zeros(idx.size, dtype=bool)
        first_t[np.unique(t[idx], return_index=True)[1]] = True
        win = idx[first_s & first_t]
        accepted[win] = True
        src_taken[s[win]] = True
        trg_taken[t[win]] = True
        alive[idx] = ~(src_taken[s[idx]] | trg_taken[t[idx]])
    for i in np.flatnonzero(alive):  # sequential tail, normally empty
        if not src_taken[s[i]] and not trg_taken[t[i]]:
            accepted[i] = True
            src_taken[s[i]] = trg_taken[t[i]] = True
    return order[accepted]


# --- the modes: each one's candidate pairs, registered under its name ---------------------------


@dataclass(frozen=True)
class Mode:
    """A retrieval mode: ``candidates(fwd, bwd, counter)`` proposes pairs from the forward and
    backward best candidates (counting what it proposes and drops); ``one_to_one`` then keeps a
    greedy one-to-one subset of them (after the threshold)."""

    candidates: Callable[[Pairs, Pairs, StageCounter], Pairs]
    one_to_one: bool = False


def _forward(fwd: Pairs, bwd: Pairs, counter: StageCounter) -> Pairs:
    counter.add_in(UNIT, len(fwd))
    return fwd


def _backward(fwd: Pairs, bwd: Pairs, counter: StageCounter) -> Pairs:
    counter.add_in(UNIT, len(bwd))
    return bwd


def _mutual(fwd: Pairs, bwd: Pairs, counter: StageCounter) -> Pairs:
    counter.add_in(UNIT, len(fwd))
    if len(fwd) and len(bwd):
        mutual = bwd.src[fwd.trg] == np.arange(len(fwd))
    else:
        mutual = np.zeros(len(fwd), dtype=bool)
    counter.add_dropped(UNIT, "not_mutual", int((~mutual).sum()))
    return fwd.take(mutual)


def _pooled(fwd: Pairs, bwd: Pairs, counter: StageCounter) -> Pairs:
    pooled = Pairs(
        np.concatenate([fwd.src, bwd.src]),
        np.concatenate([fwd.trg, bwd.trg]),
        np.concatenate([fwd.score, bwd.score]),
    )
    counter.add_in(UNIT, len(pooled))
    pairs, n_dup = _dedup_pairs(pooled)
    counter.add_dropped(UNIT, "duplicate_pair", n_dup)
    return pairs


MODES.add("fwd", Mode(_forward))
MODES.add("bwd", Mode(_backward))
MODES.add("intersect", Mode(_mutual))
MODES.add("max", Mode(_pooled, one_to_one=True))
MODES.add("union", Mode(_pooled))


def retrieve(
    fwd_scores: np.ndarray,
    fwd_inds: np.ndarray,
    bwd_scores: np.ndarray,
    bwd_inds: np.ndarray,
    mode: str = "max",
    threshold: float | None = None,
    counter: StageCounter | None = None,
) -> Pairs:
    """Select pairs from forward (src->trg) and backward (trg->src) scored candidates.

    Counts unit ``candidates``: in = candidates proposed by the mode, out = pairs selected,
    dropped per reason (below_threshold, not_mutual, duplicate_pair, one_to_one_conflict).
    """
    chosen: Mode = MODES.get(mode, "mode")
    counter = counter if counter is not None else StageCounter()
    fb_trg, fb_score = best_candidate(fwd_scores, fwd_inds)
    bb_src, bb_score = best_candidate(bwd_scores, bwd_inds)
    fwd = Pairs(np.arange(len(fb_trg), dtype=np.int64), fb_trg.astype(np.int64), fb_score)
    bwd = Pairs(bb_src.astype(np.int64), np.arange(len(bb_src), dtype=np.int64), bb_score)
    pairs = chosen.candidates(fwd, bwd, counter)

    found = np.isfinite(pairs.score) & (pairs.src >= 0) & (pairs.trg >= 0)
    if not found.all():  # a row whose approximate search returned no neighbour at all
        counter.add_dropped(UNIT, "no_candidate", int((~found).sum()))
        pairs = pairs.take(found)

    if threshold is not None:
        # Applying the threshold before the greedy pass equals LASER's order (after it):
        # the pass goes in decreasing score, so sub-threshold pairs never block kept ones.
        above = pairs.score > threshold
        counter.add_dropped(UNIT, "below_threshold", int((~above).sum()))
        pairs = pairs.take(above)

    if chosen.one_to_one and len(pairs):
        keep = greedy_one_to_one(pairs)
        counter.add_dropped(UNIT, "one_to_one_conflict", len(pairs) - len(keep))
        pairs = pairs.take(keep)

    order = np.argsort(-pairs.score, kind="stable")
    pairs = pairs.take(order)
    counter.add_out(UNIT, len(pairs))
    return pairs
