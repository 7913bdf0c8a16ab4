"""What the shuffle windows of training's streaming input hold at most: records and bytes per
rank, bounded by the scan's blocks (:mod:`labse_model.stream`), logged and kept in stats.json."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import numpy as np

from labse_model.stream import ScanResult

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WindowBound:
    """What the shuffle windows of one rank's lanes hold at most, once every window is full."""

    records: int
    bytes: int
    lanes: int  # lanes on this rank

    def to_dict(self) -> dict:
        return {"records": self.records, "bytes": self.bytes, "lanes_on_rank": self.lanes}


def window_bound(
    res: ScanResult, lanes: int, lanes_on_rank: int, shuffle_blocks: int
) -> WindowBound:
    """The most records the shuffle windows of ``lanes_on_rank`` lanes hold at once, and their
    Python bytes (the scan's sampled mean per record).

    Each (lane, language) keeps one window of at most ``shuffle_blocks`` of the blocks dealt to
    it in an epoch (a lane gets at most ceil(blocks / lanes) of a language's blocks), each of at
    most ``block_rows`` records; the largest such blocks bound it. So memory per rank is
    lanes_on_rank x sum over languages of min(shuffle_blocks, ceil(blocks / lanes)) x block_rows
    x bytes per record: it stops growing once each language has lanes x shuffle_blocks blocks,
    whatever the corpus size (bench/HISTORY.md "Where pretraining's memory goes")."""
    per_lane = 0
    for blocks in res.groups.values():
        dealt = -(-len(blocks) // lanes)
        k = min(shuffle_blocks, dealt)
        per_lane += int(np.sort(blocks.rows)[::-1][:k].sum(dtype=np.int64))
    records = lanes_on_rank * per_lane
    return WindowBound(records, int(records * res.mean_record_bytes()), lanes_on_rank)


WINDOW_RAM_SHARE = 0.25  # windows above this share of the machine's memory are warned about


def log_window_bounds(bounds: dict[str, WindowBound], shuffle_blocks: int, block_rows: int) -> dict:
    """Log what the shuffle windows will hold on this rank (the stage's largest data structure,
    bounded) and return it for stats.json."""
    if not bounds:
        return {}
    total = sum(b.bytes for b in bounds.values())
    what = ", ".join(
        f"{b.records:,} {kind} (~{b.bytes / 2**20:,.0f} MiB)" for kind, b in bounds.items()
    )
    # torchrun's LOCAL_WORLD_SIZE ranks share this machine's memory.
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if total * local > WINDOW_RAM_SHARE * ram:
        log.warning(
            "the shuffle windows of this machine's %d rank(s) would hold ~%.1f GiB, more "
            "than %.0f%% of its %.1f GiB: lower block_rows or shuffle_blocks (or run more "
            "ranks: lanes are dealt over them)",
            local,
            total * local / 2**30,
            100 * WINDOW_RAM_SHARE,
            ram / 2**30,
        )
    log.info(
        "shuffle windows hold at most %s on this rank: %d lanes x languages x "
        "min(shuffle_blocks %d, blocks per lane) x block_rows %d; lower block_rows or "
        "shuffle_blocks if that does not fit",
        what,
        next(iter(bounds.values())).lanes,
        shuffle_blocks,
        block_rows,
    )
    return {**{k: b.to_dict() for k, b in bounds.items()}, "bytes": total}
