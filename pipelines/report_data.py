"""What the run report reads of a run folder: JSON that may be missing or damaged, metrics,
every stage's counts (checked), the plan and manifests (:class:`ReportBase`), and the plotting
helpers its sections share."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

from labse_common.datafiles import read_json, read_text
from labse_common.errors import InputError
from pipelines.run.declare import Stage, manifest_path

log = logging.getLogger("pipelines.report")

# ("h1"|"h2"|"p"|"pre", text) | ("table", header, rows) | ("img", name, png, alt)
# | ("summary", [(kind, text), ...]) with kind "line"|"good"|"bad"|"warn"
Block = tuple


def read_json_or_none(p: Path) -> dict | None:
    """A JSON object the report can use, or None: a missing or damaged file leaves its section
    saying so instead of failing the report."""
    if not p.is_file():
        return None
    try:
        return read_json(p)
    except InputError as e:
        log.warning("%s", e)
        return None


def read_metrics(p: Path) -> list[dict]:
    if not p.is_file():
        return []
    try:
        text = read_text(p)
    except InputError as e:
        log.warning("%s", e)
        return []
    rows = []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:  # a line cut by a killed writer
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def _checked_counts(report: dict, path: Path) -> dict:
    """``report`` when every unit of its counts has numbers in and out and a mapping of dropped
    reasons to numbers (what every stage writes); else an InputError naming the file and the
    unit, instead of a KeyError deep in a table of the report."""
    counts = report.get("counts", {})
    if not isinstance(counts, dict):
        raise InputError(path, f"'counts' is {type(counts).__name__}, not a mapping of units")
    for unit, c in counts.items():
        problem = None
        if not isinstance(c, dict):
            problem = f"is {type(c).__name__}, not a mapping of in, out and dropped"
        else:
            lacking = [k for k in ("in", "out", "dropped") if k not in c]
            if lacking:
                problem = f"has no {', '.join(map(repr, lacking))} (a unit counts in, out and dropped per reason)"
            elif not all(_count(c[k]) for k in ("in", "out")):
                problem = "has in/out that are not counts"
            elif not (isinstance(c["dropped"], dict) and all(map(_count, c["dropped"].values()))):
                problem = "has 'dropped' that is not a mapping of reasons to counts"
        if problem:
            raise InputError(path, f"unit {unit!r} {problem}")
    return report


def _count(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def stage_stats(stage_dir: Path) -> dict | None:
    """A stage's stats.json; a stage that writes one per part (mining: one per language pair)
    gets their counts summed."""
    top = read_json_or_none(stage_dir / "stats.json")
    if top is not None:
        return _checked_counts(top, stage_dir / "stats.json")
    parts = [
        _checked_counts(r, p)
        for p in sorted(stage_dir.glob("*/stats.json"))
        if (r := read_json_or_none(p))
    ]
    if not parts:
        return None
    units: dict[str, dict] = {}
    for r in parts:
        for unit, c in r.get("counts", {}).items():
            u = units.setdefault(unit, {"in": 0, "out": 0, "dropped": {}})
            u["in"] += c["in"]
            u["out"] += c["out"]
            for k, v in c["dropped"].items():
                u["dropped"][k] = u["dropped"].get(k, 0) + v
    return {"stage": stage_dir.name, "counts": units, "parts": len(parts)}


def png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buf.getvalue()


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


class ReportBase:
    """A run folder's plan and manifests, and the blocks the sections add."""

    def __init__(self, run: Path) -> None:
        self.run = run
        self.blocks: list[Block] = []
        self.plan = {
            p["stage"]: p for p in (read_json_or_none(run / "_run.json") or {}).get("plan", [])
        }
        self.manifests = {s: read_json_or_none(manifest_path(run, s)) for s in self.plan}

    def add(self, *block) -> None:
        self.blocks.append(block)

    def dir(self, stage: Stage) -> Path:
        return self.run / stage.name

    def status(self, stage: Stage | str) -> tuple[bool, str]:
        """(has output, sentence for the report)."""
        stage = stage.name if isinstance(stage, Stage) else stage
        p = self.plan.get(stage)
        if self.manifests.get(stage):
            return True, ""
        if p is None:
            return False, f"Stage `{stage}` is not part of this run."
        return False, f"Stage `{stage}` did not run: {p['reason']}."
