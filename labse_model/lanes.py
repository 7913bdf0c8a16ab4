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
  ``rng(seed, group, lane, e, window)`` (the bounded shuffle buffer). Languages (groups) are
  mixed per record with probabilities ``p_lang ** alpha`` (normalised), drawn per position from
  ``rng(seed, lane, chunk)``. A lane resumes at any record position without replaying the data.
* **Memory** per lane: one shuffle window per group being read, whatever the corpus size.

Records are ``str`` (sentences) or ``(src, trg)`` tuples (pairs).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from labse_model.stream import ScanResult, read_block
from labse_model.stream_blocks import BlockList

_CHOICE_CHUNK = 4096


def mixing_probabilities(groups: dict[str, BlockList], alpha: float) -> dict[str, float]:
    """q_g proportional to (n_g / N) ** alpha over groups with records (LaBSE: alpha = 0.3)."""
    from labse_model.vocab.smoothing import smoothed_shares

    totals = {g: bl.total_rows() for g, bl in groups.items()}
    return smoothed_shares(totals, alpha)


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
    ):
        names = sorted(g for g, bl in scan_res.groups.items() if bl)
        if not names:
            raise ValueError(f"no usable {kind} in the given inputs")
        probs = mixing_probabilities({g: scan_res.groups[g] for g in names}, alpha)
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
