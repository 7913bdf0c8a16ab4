"""The step protocol: small filters that answer keep or drop-with-a-reason, and a counting Chain.

In the manner of datatrove: a :class:`Step` looks at one record (a sentence, a pair, with any
annotations the record carries) and returns ``None`` to keep it or a drop reason string. A step
that needs a model (language ID, a quality classifier) annotates a whole batch first in
:meth:`Step.annotate` (fastText is much faster on lists), then decides per record.

:class:`Chain` runs steps in order over a batch, step by step, and keeps for every step how many
records came in, went out and were dropped under each reason; the unit totals go to a
:class:`~labse_common.stats.StageCounter` as well, so a stage's stats.json keeps the docs/design.md
shape (``in == out + sum(dropped)``) and gains a ``steps`` section. Adding a rule is one small
class and one line in a preset; nothing else changes.

:class:`KeepSummary` counts, per language pair and per length bucket, what each step let through
(used by ``filters rules`` and ``filters apply``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from labse_common.stats import DROPPED, IN, OUT, StageCounter, to_report

STEP_PREFIX = "step:"  # flat-count keys of the per-step counts: "step:<name>/in", ...


class Step:
    """One filter. Subclasses set ``name`` (unique within a chain) and implement ``__call__``."""

    name: str = "step"

    def annotate(self, records: Sequence[Any]) -> None:
        """Batch pre-pass before the per-record decisions (model predictions); default none."""

    def __call__(self, record: Any) -> str | None:  # pragma: no cover - abstract
        """None to keep ``record``, else the reason it is dropped."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


Outcome = tuple[str, str] | None  # (step name, reason) of the step that dropped it, or None


class Chain:
    """Run steps in order over batches of records and count what each step keeps.

    ``decide`` is the core: it returns one :data:`Outcome` per record. ``run`` returns the kept
    records and calls ``on_drop(record, step, reason)`` for each dropped one, in step order.
    Counts accumulate across calls; ``drain()`` hands them over as a flat mergeable dict (Beam
    bundles, worker processes) and :func:`chain_report` turns merged counts into stats.json.
    """

    def __init__(self, steps: Iterable[Step], unit: str = "records") -> None:
        self.steps = list(steps)
        self.unit = unit
        names = [s.name for s in self.steps]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"step names must be unique in a chain: {', '.join(dupes)}")
        self.counts: Counter[str] = Counter()

    @property
    def step_names(self) -> list[str]:
        return [s.name for s in self.steps]

    def decide(self, records: Sequence[Any], counter: StageCounter | None = None) -> list[Outcome]:
        outcomes: list[Outcome] = [None] * len(records)
        alive = list(range(len(records)))
        unit_drops: Counter[str] = Counter()
        for step in self.steps:
            if not alive:
                break
            batch = [records[i] for i in alive]
            step.annotate(batch)
            survivors, drops = [], Counter()
            for i, rec in zip(alive, batch):
                reason = step(rec)
                if reason is None:
                    survivors.append(i)
                else:
                    outcomes[i] = (step.name, reason)
                    drops[reason] += 1
            key = f"{STEP_PREFIX}{step.name}"
            self.counts[f"{key}/{IN}"] += len(alive)
            self.counts[f"{key}/{OUT}"] += len(survivors)
            for reason, n in drops.items():
                self.counts[f"{key}/{DROPPED}/{reason}"] += n
            unit_drops.update(drops)
            alive = survivors
        for s in self.steps:  # a step reached by no record still appears, with zeros
            self.counts.setdefault(f"{STEP_PREFIX}{s.name}/{IN}", 0)
            self.counts.setdefault(f"{STEP_PREFIX}{s.name}/{OUT}", 0)
        if not records:
            return outcomes
        self.counts[f"{self.unit}/{IN}"] += len(records)
        self.counts[f"{self.unit}/{OUT}"] += len(alive)
        for reason, n in unit_drops.items():
            self.counts[f"{self.unit}/{DROPPED}/{reason}"] += n
        if counter is not None and records:
            counter.add_in(self.unit, len(records))
            counter.add_out(self.unit, len(alive))
            for reason, n in unit_drops.items():
                counter.add_dropped(self.unit, reason, n)
        return outcomes

    def run(
        self,
        records: Sequence[Any],
        counter: StageCounter | None = None,
        on_drop: Any = None,
    ) -> list[Any]:
        outcomes = self.decide(records, counter)
        if on_drop is not None:
            order = {name: i for i, name in enumerate(self.step_names)}
            dropped = sorted((order[o[0]], i) for i, o in enumerate(outcomes) if o is not None)
            for _, i in dropped:
                on_drop(records[i], *outcomes[i])
        return [r for r, o in zip(records, outcomes) if o is None]

    def drain(self) -> dict[str, int]:
        out = dict(self.counts)
        self.counts.clear()
        return out

    def report(self, stage: str, **extra: object) -> dict:
        return chain_report(stage, self.counts, self.step_names, **extra)


def chain_report(
    stage: str, flat: Mapping[str, int], step_order: Sequence[str] = (), **extra: object
) -> dict:
    """stats.json from flat counts: unit counts under ``counts``, per-step counts under ``steps``
    (in ``step_order``, then any others), each ``{"in", "out", "dropped": {reason: n}}``."""
    unit_flat = {k: v for k, v in flat.items() if not k.startswith(STEP_PREFIX)}
    step_flat = {k[len(STEP_PREFIX) :]: v for k, v in flat.items() if k.startswith(STEP_PREFIX)}
    steps = to_report("", step_flat)["counts"]
    ordered = {n: steps[n] for n in step_order if n in steps}
    ordered.update({n: c for n, c in steps.items() if n not in ordered})
    report = to_report(stage, unit_flat)
    report["steps"] = ordered
    report.update(extra)
    return report


# --- what each step kept, by language pair and by length bucket ------------------------------

LENGTH_BUCKETS = (0, 10, 20, 50, 100, 200, 500)  # lower bounds, characters of the shorter side


def length_bucket(n: int, bounds: Sequence[int] = LENGTH_BUCKETS) -> str:
    for lo, hi in zip(bounds, list(bounds[1:]) + [None]):
        if hi is None or n < hi:
            return f"{lo}-{hi - 1}" if hi is not None else f"{lo}+"
    return f"{bounds[-1]}+"


class KeepSummary:
    """Per language pair and per length bucket: how many pairs reached each step and passed it.

    Feed it the chain's outcomes (``add_outcomes``). It counts one key per record,
    ``"<lang pair>|<length bucket>|<dropping step, or empty when kept>"``, so summaries merge
    with a sum (Beam, worker processes); ``to_dict(step_order)`` expands them into::

        {"length_unit": "...", "by_lang_pair": {"en-de": {"in": N, "out": M, "steps":
            {"<step>": {"in": a, "out": b}, ...}}}, "by_length": {"10-19": {...}, ...}}
    """

    length_unit = "characters of the shorter side"

    def __init__(self, bounds: Sequence[int] = LENGTH_BUCKETS) -> None:
        self.bounds = tuple(bounds)
        self.counts: Counter[str] = Counter()

    def add_outcomes(
        self,
        step_order: Sequence[str],
        outcomes: Sequence[Outcome],
        lang_pairs: Sequence[str],
        lengths: Sequence[int],
    ) -> None:
        bucket = [length_bucket(n, self.bounds) for n in range(self.bounds[-1] + 1)]
        last = length_bucket(self.bounds[-1], self.bounds)
        self.counts.update(
            f"{lp}|{bucket[n] if n < len(bucket) else last}|{'' if o is None else o[0]}"
            for o, lp, n in zip(outcomes, lang_pairs, lengths)
        )

    def merge(self, flat: Mapping[str, int]) -> None:
        self.counts.update(flat)

    def to_dict(self, step_order: Sequence[str]) -> dict:
        index = {name: i for i, name in enumerate(step_order)}

        def empty() -> dict:
            return {IN: 0, OUT: 0, "steps": {s: {IN: 0, OUT: 0} for s in step_order}}

        groups: dict[str, dict[str, dict]] = {"lang": {}, "len": {}}
        for key, n in self.counts.items():
            lp, bucket, step = key.rsplit("|", 2)
            reached = len(step_order) if not step else index.get(step, len(step_order) - 1) + 1
            for kind, name in (("lang", lp), ("len", bucket)):
                g = groups[kind].setdefault(name, empty())
                g[IN] += n
                g[OUT] += n if not step else 0
                for j in range(reached):
                    s = g["steps"][step_order[j]]
                    s[IN] += n
                    if j < reached - 1 or not step:
                        s[OUT] += n
        order = {length_bucket(b, self.bounds): i for i, b in enumerate(self.bounds)}
        by_len = dict(sorted(groups["len"].items(), key=lambda kv: order.get(kv[0], len(order))))
        return {
            "length_unit": self.length_unit,
            "by_lang_pair": dict(sorted(groups["lang"].items())),
            "by_length": by_len,
        }
