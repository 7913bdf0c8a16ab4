"""Deterministic lanes over the scanned blocks (:mod:`labse_model.stream`): the order in which
both stages read their records.

* **Lanes.** The global micro-batch of ``B`` records is the concatenation of ``S`` lanes (a fixed
  config value, independent of the number of ranks), each contributing ``B / S`` records. Lane
  ``j`` is an endless, deterministic record stream; rank ``r`` of ``W`` runs lanes
  ``[r*S/W, (r+1)*S/W)`` only and so reads only the blocks dealt to them. One rank or eight, the
  global batch is the same.
* **Order** is a pure function of (seed, position): in lane epoch ``e`` the blocks of a group are
  permuted with ``rng(seed, group, e)`` and dealt round-robin to the lanes; a lane reads its
  blocks in windows of ``shuffle_blocks`` blocks whose records are permuted with
  ``rng(seed, group, lane, e, window)`` (the bounded shuffle buffer). Groups (languages,
  or ``<source>.<lang>`` folders) are mixed per record with the probabilities of
  :func:`mixing_probabilities` (sources by weight, languages inside a source by
  ``p_lang ** alpha``), drawn per position from ``rng(seed, lane, chunk)``. A lane resumes at any record position without replaying the data.
* **Memory** per lane: one shuffle window per group being read, whatever the corpus size.

Records are ``str`` (sentences) or ``(src, trg)`` tuples (pairs).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping

import numpy as np

from labse_model.stream import ScanResult, read_block
from labse_model.stream_blocks import BlockList

_CHOICE_CHUNK = 4096


#: Separates a group's source from its language in a folder name: ``pud.de-en`` is the ``de-en``
#: pairs of the source ``pud``. Language codes never hold a dot, so a plain ``de`` folder is a
#: group of the one unnamed source.
SOURCE_SEP = "."


def source_of(group: str) -> str:
    """The source a group belongs to: the part of its name before the first dot, or ``""``."""
    return group.split(SOURCE_SEP, 1)[0] if SOURCE_SEP in group else ""


def unknown_sources(groups: Iterable[str], source_weights: Mapping[str, float] | None) -> list[str]:
    """The names in ``source_weights`` that no group belongs to (a typo, or weights given for
    plain ``<lang>/`` folders): weights that would otherwise be silently ignored."""
    return sorted(set(source_weights or {}) - {source_of(g) for g in groups})


def mixing_probabilities(
    groups: Mapping[str, BlockList | int],
    alpha: float,
    source_weights: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """The share of records each group supplies: the documented weighting rule.

    Two levels. Each source ``s`` (the groups named ``s.<lang>``) takes the share
    ``w_s / sum_t w_t`` of the records, ``w`` from ``source_weights`` (a source not named there
    weighs 1); inside a source, its groups are mixed like LaBSE mixes languages,
    ``q_g`` proportional to ``(n_g / N_s) ** alpha``. With one source (plain ``<lang>/``
    folders, or no weights and one prefix) this is the language rule alone. Groups without
    records take no share; ``groups`` maps a name to its blocks or to its record count.
    """
    from labse_model.vocab.smoothing import smoothed_shares

    weights = dict(source_weights or {})
    unknown = unknown_sources(groups, weights)
    if unknown:
        raise ValueError(f"source weights name {unknown}, no source of the groups {sorted(groups)}")
    for name, w in weights.items():
        if not (isinstance(w, (int, float)) and math.isfinite(w) and w >= 0):
            raise ValueError(f"source weight {name}={w!r} must be a number >= 0")
    totals = {g: n if isinstance(n, int) else n.total_rows() for g, n in groups.items()}
    by_source: dict[str, dict[str, int]] = {}
    for g, n in totals.items():
        if n > 0:
            by_source.setdefault(source_of(g), {})[g] = n
    source_w = {s: float(weights.get(s, 1.0)) for s in by_source}
    norm = sum(source_w.values())
    if not norm:
        raise ValueError(f"every source with records has weight 0: {sorted(by_source)}")
    shares: dict[str, float] = {}
    for s, members in by_source.items():
        for g, q in smoothed_shares(members, alpha).items():
            shares[g] = source_w[s] / norm * q
    return shares


class _GroupLane:
    """One group's endless record stream for one lane, positioned by record count."""

    def __init__(
        self,
        blocks: BlockList,
        gid: int,
        lane: int,
        lanes: int,
        seed: int,
        shuffle_blocks: int,
        kind: str,
        heldout: float,
    ):
        self.blocks, self.gid, self.lane, self.lanes = blocks, gid, lane, lanes
        self.seed, self.window, self.kind, self.heldout = seed, shuffle_blocks, kind, heldout

    def _epoch_blocks(self, epoch: int) -> np.ndarray:
        """Indices of the blocks this lane reads in ``epoch``, in reading order."""
        perm = np.random.default_rng([self.seed, 2, self.gid, epoch]).permutation(len(self.blocks))
        # The deal rotates each epoch, so a group with fewer blocks than lanes still feeds
        # every lane (its lane-epochs without a block are skipped).
        return perm[(np.arange(len(perm)) + epoch) % self.lanes == self.lane]

    def records(self, start: int) -> Iterator:
        epoch, skip = 0, start
        all_rows = self.blocks.rows
        while True:
            eb = self._epoch_blocks(epoch)
            rows = all_rows[eb]
            size = int(rows.sum(dtype=np.int64))
            if skip >= size:
                skip -= size
                epoch += 1
                continue
            for w in range(0, len(eb), self.window):
                n = int(rows[w : w + self.window].sum(dtype=np.int64))
                if skip >= n:
                    skip -= n
                    continue
                recs: list = []
                for b in eb[w : w + self.window]:
                    recs.extend(read_block(self.blocks[b], self.kind, self.heldout))
                order = np.random.default_rng(
                    [self.seed, 3, self.gid, self.lane, epoch, w]
                ).permutation(len(recs))
                for i in order[skip:]:
                    yield recs[i]
                skip = 0
                del recs
            epoch += 1


class Lane:
    """Lane ``lane`` of ``lanes``: the deterministic, endless, language-mixed record stream."""

    def __init__(
        self,
        scan_res: ScanResult,
        kind: str,
        lane: int,
        lanes: int,
        seed: int,
        shuffle_blocks: int = 4,
        alpha: float = 0.3,
        heldout: float = 0.0,
        source_weights: Mapping[str, float] | None = None,
    ):
        names = sorted(g for g, bl in scan_res.groups.items() if bl)
        if not names:
            raise ValueError(f"no usable {kind} in the given inputs")
        probs = mixing_probabilities({g: scan_res.groups[g] for g in names}, alpha, source_weights)
        self.names = names
        self.p = np.array([probs[g] for g in names])
        self.p = self.p / self.p.sum()
        self.lane, self.seed = lane, seed
        self.subs = [
            _GroupLane(scan_res.groups[g], gid, lane, lanes, seed, shuffle_blocks, kind, heldout)
            for gid, g in enumerate(names)
        ]

    def _choices(self, chunk: int) -> np.ndarray:
        if len(self.names) == 1:
            return np.zeros(_CHOICE_CHUNK, dtype=np.int64)
        rng = np.random.default_rng([self.seed, 1, self.lane, chunk])
        return rng.choice(len(self.names), size=_CHOICE_CHUNK, p=self.p)

    def records(self, start: int = 0) -> Iterator:
        """Records from lane position ``start`` on (the same ones whatever came before)."""
        c0, off = divmod(start, _CHOICE_CHUNK)
        taken = np.zeros(len(self.names), dtype=np.int64)
        for c in range(c0):
            taken += np.bincount(self._choices(c), minlength=len(self.names))
        first = self._choices(c0)
        taken += np.bincount(first[:off], minlength=len(self.names))
        iters = [s.records(int(t)) for s, t in zip(self.subs, taken)]
        chunk, choices = c0, first[off:]
        while True:
            for g in choices:
                yield next(iters[g])
            chunk += 1
            choices = self._choices(chunk)


def lanes_of_rank(lanes: int, rank: int, world_size: int) -> range:
    if lanes % world_size:
        raise ValueError(f"data lanes {lanes} is not divisible by the world size {world_size}")
    per = lanes // world_size
    return range(rank * per, (rank + 1) * per)
