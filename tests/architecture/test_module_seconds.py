"""The cost table that orders test modules (tests/module_seconds.py) names real modules and is
read the way a durations report writes it."""

from __future__ import annotations

from tests.module_seconds import from_durations, load
from tests.support.paths import REPO


def test_the_table_names_existing_test_modules():
    table = load()
    assert table, "tests/module_seconds.json is missing or empty"
    missing = [m for m in table if not (REPO / m).is_file()]
    assert not missing, f"renamed or removed modules still in tests/module_seconds.json: {missing}"


def test_a_durations_report_sums_per_module():
    log = (
        "12.50s setup    tests/a/test_x.py::test_one\n"
        "3.00s call     tests/a/test_x.py::test_one\n"
        "1.00s call     tests/b/test_y.py::test_two[1]\n"
        "(5 durations < 0.005s hidden.)\n"
    )
    assert from_durations(log) == {"tests/a/test_x.py": 16}
