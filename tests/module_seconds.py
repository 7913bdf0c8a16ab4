"""What each test module costs, so the longest run first (the ordering hook in tests/conftest.py).

`make test` runs modules on two xdist workers with ``--dist loadscope --no-loadscope-reorder``:
a worker takes the next module when it finishes one, in collection order (without the second
flag xdist re-sorts the modules by their number of tests, and this order is lost). With the
alphabetical order the runner's modules (tests/pipelines/test_run_*, minutes each) came last,
and one worker ran the last of them alone while the other idled; longest first is the classic
greedy schedule and bounds that tail by the shortest modules. Only the order changes, never what
runs.

Regenerate the table after a large change in test cost (a stale table only costs idle time):

    python -m pytest -q -n auto --dist loadscope --no-loadscope-reorder --durations=0 tests \
        > /tmp/durations.log
    python -m tests.module_seconds /tmp/durations.log > tests/module_seconds.json
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

TABLE = Path(__file__).with_name("module_seconds.json")
# A module costing less than this keeps its alphabetical place among the others.
MIN_SECONDS = 5.0


def load() -> dict[str, float]:
    """Module path (``tests/...py``) to its recorded seconds (setup + call + teardown)."""
    return json.loads(TABLE.read_text(encoding="utf-8")) if TABLE.exists() else {}


def from_durations(log: str) -> dict[str, float]:
    """The per-module totals of a ``pytest --durations=0`` report, those of MIN_SECONDS or more."""
    total: Counter[str] = Counter()
    for m in re.finditer(r"^([\d.]+)s (?:setup|call|teardown)\s+(\S+?)::", log, re.M):
        total[m[2]] += float(m[1])
    return {k: round(v) for k, v in total.most_common() if v >= MIN_SECONDS}


if __name__ == "__main__":
    print(json.dumps(from_durations(Path(sys.argv[1]).read_text(encoding="utf-8")), indent=1))
