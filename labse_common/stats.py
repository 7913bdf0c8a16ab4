"""The stats contract shared by every stage (see docs/design.md).

A stage counts, per unit it handles (documents, lines, sentences, pairs, ...), how many records
came in, how many went out, and how many were dropped under each named reason. ``in == out +
sum(dropped)`` must hold for every unit; :func:`check_balanced` enforces it before a stage
reports success. Optional ``events`` count things that happened without dropping anything
(a charset fallback, a truncated sentence).

Counts are plain dicts keyed by ``"unit/field"`` strings so they merge with a sum and travel
through Beam combiners or multiprocessing queues without custom coders.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Mapping

IN = "in"
OUT = "out"
DROPPED = "dropped"
EVENT = "event"


class StageCounter:
    """Accumulates counts for one stage; cheap enough to call per record."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def add_in(self, unit: str, n: int = 1) -> None:
        self.counts[f"{unit}/{IN}"] += n

    def add_out(self, unit: str, n: int = 1) -> None:
        self.counts[f"{unit}/{OUT}"] += n

    def add_dropped(self, unit: str, reason: str, n: int = 1) -> None:
        self.counts[f"{unit}/{DROPPED}/{reason}"] += n

    def add_event(self, unit: str, name: str, n: int = 1) -> None:
        self.counts[f"{unit}/{EVENT}/{name}"] += n

    def merge(self, other: Mapping[str, int] | StageCounter) -> None:
        self.counts.update(other.counts if isinstance(other, StageCounter) else other)

    def drain(self) -> dict[str, int]:
        """Return the counts so far and reset (used to flush per Beam bundle)."""
        out = dict(self.counts)
        self.counts.clear()
        return out

    def to_report(self, stage: str, **extra: object) -> dict:
        return to_report(stage, self.counts, **extra)


def merge_counts(parts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    total: Counter[str] = Counter()
    for p in parts:
        total.update(p)
    return dict(total)


def to_report(stage: str, flat: Mapping[str, int], **extra: object) -> dict:
    """Turn flat ``unit/field[/reason]`` counts into the stats.json shape of docs/design.md."""
    units: dict[str, dict] = {}
    for key, n in sorted(flat.items()):
        unit, field, *rest = key.split("/", 2)
        u = units.setdefault(unit, {IN: 0, OUT: 0, DROPPED: {}})
        if field == IN:
            u[IN] += n
        elif field == OUT:
            u[OUT] += n
        elif field == DROPPED:
            u[DROPPED][rest[0]] = u[DROPPED].get(rest[0], 0) + n
        elif field == EVENT:
            u.setdefault("events", {})[rest[0]] = u.get("events", {}).get(rest[0], 0) + n
        else:
            raise ValueError(f"unknown stats field in {key!r}")
    report = {"stage": stage, "counts": units}
    report.update(extra)
    return report


def flatten(report: Mapping) -> dict[str, int]:
    """A report's nested counts back as flat ``unit/field[/reason]`` counts (:func:`to_report`'s
    inverse), so the reports of a stage's parts sum with :func:`merge_counts`."""
    flat: dict[str, int] = {}
    for unit, c in report.get("counts", {}).items():
        flat[f"{unit}/{IN}"] = c.get(IN, 0)
        flat[f"{unit}/{OUT}"] = c.get(OUT, 0)
        for field, key in ((DROPPED, DROPPED), ("events", EVENT)):
            for reason, n in c.get(field, {}).items():
                flat[f"{unit}/{key}/{reason}"] = n
    return flat


def sum_reports(stage: str, reports: Iterable[Mapping], **extra: object) -> dict:
    """One report for a job of several parts (a store per language, a folder per pair): their
    counts summed, with ``extra`` (e.g. ``shards``, ``resumed_shards``)."""
    return to_report(stage, merge_counts(flatten(r) for r in reports), **extra)


def check_balanced(report: Mapping) -> list[str]:
    """Return a list of human-readable imbalances (empty when every unit balances)."""
    problems = []
    for unit, c in report["counts"].items():
        dropped = sum(c[DROPPED].values())
        if c[IN] != c[OUT] + dropped:
            problems.append(f"{unit}: in={c[IN]} != out={c[OUT]} + dropped={dropped}")
    return problems


def write_report(path: str, report: Mapping) -> None:
    """Write stats.json atomically for local paths (a crash never leaves half a file)."""
    tmp = f"{path}.tmp"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2, ensure_ascii=False, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


def read_report(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)
