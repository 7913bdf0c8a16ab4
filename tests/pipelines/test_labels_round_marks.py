"""The runner's labels stage keeps round two's marks (the near-threshold round, through the runner).

A person labels the runner's ``OUTPUT/labels.tsv`` on the page, draws the near-threshold round
and labels part of it. Rerunning the labels task rebuilds the file from the sample: the round
columns and the round-two rows (labelled or not, in their order) must survive, so the page's
two-round estimate is unchanged; and ``combine`` on the labels the task hands it reports the
same two-round estimate (the page's code) in combined.json.
"""

from __future__ import annotations

import json

import pytest

from filters.bitext.label_rounds import rounds_of, two_round_estimate
from filters.bitext.label_sheet import read_sheet
from filters.bitext.label_store import LabelSheet
from labse_common.cli import EXIT_NEEDS_LABELS
from labse_common.config import load
from pipelines.e2e_tasks import labels as gate
from tests.filters.bitext.test_label_order import (
    SMALL,
    combine_accepts,
    mined_pairs,
    rows_of,
    sample_dir,
)


def _truth(row: dict, planted: set) -> str:
    return "GOOD" if (row["src"], row["trg"]) in planted else "BAD"


@pytest.mark.slow
def test_round_two_survives_the_labels_task_and_combine_reports_its_estimate(tmp_path):
    import pyarrow.parquet as pq

    table, planted = mined_pairs()
    pairs_path = tmp_path / "pairs.parquet"
    pq.write_table(table, pairs_path)
    sample = sample_dir(tmp_path, pairs_path) / "sample.parquet"
    person = tmp_path / "labels.tsv"  # the runner's OUTPUT/labels.tsv
    assert gate(sample, pairs_path, person, None, tmp_path / "g0", 12, 4) == EXIT_NEEDS_LABELS
    cfg = load("combine", "demo", SMALL)
    sheet = LabelSheet(person, cfg, table)
    rows = rows_of(person)
    for i in range(40):  # round one, in the file's (labelling) order
        sheet.set_label(i, _truth(rows[i], planted))
    n1 = len(rows)
    drawn = rounds_of(sheet, 20).draw()
    assert drawn["first"] == n1 and drawn["drawn"] == 20
    after = rows_of(person)
    for k in list(range(12)) + [14]:  # row 12 skipped: the labelled prefix ends there
        sheet.set_label(n1 + k, _truth(after[n1 + k], planted))
    page = rounds_of(sheet).state()["estimate"]
    assert page["ok"] and page["labelled"] == 12, page
    before = read_sheet(person)

    # The runner's labels stage rebuilds the file from the sample, then hands combine its labels.
    assert gate(sample, pairs_path, person, None, tmp_path / "g1", 12, 4) == 0
    kept = read_sheet(person)
    assert kept.header == before.header and len(kept.rows) == len(before.rows)
    # Unchanged, but for a round-one row left blank whose pair round two drew and the person
    # labelled there: the task fills it by pair text, as any label of the same pair.
    col = kept.header.index("label")
    src, trg = kept.header.index("src"), kept.header.index("trg")
    twice = {(r[src], r[trg]) for r in before.rows[n1:]}
    for k, (a, b) in enumerate(zip(kept.rows, before.rows)):
        if a != b:
            assert k < n1 and not b[col] and (b[src], b[trg]) in twice, (k, a, b)
            assert a[:col] + a[col + 1 :] == b[:col] + b[col + 1 :]
    marks = [dict(zip(kept.header, r))["round"] for r in kept.rows]
    assert marks == ["1"] * 40 + [""] * (n1 - 40) + ["2"] * 20
    again = two_round_estimate(kept.header, kept.rows, kept.labels, cfg.confidence)
    assert again == page

    assert combine_accepts(tmp_path / "g1" / "labels.tsv", pairs_path, tmp_path / "c", SMALL)
    combined = json.loads((tmp_path / "c" / "combined.json").read_text())
    est = combined["two_round_estimate"]
    assert est["ok"] and est["labelled"] == page["labelled"] and est["kept"] == page["kept"]
    assert est["share"] == pytest.approx(page["share"], abs=1e-9)
    assert est["interval"] == pytest.approx(page["interval"], abs=1e-9)
    stats = json.loads((tmp_path / "c" / "stats.json").read_text())
    assert stats["two_round_estimate"]["share"] == pytest.approx(page["share"], abs=1e-9)
    # combine fits on every labelled pair of both rounds (the unlabelled ones counted).
    assert stats["counts"]["labelled_pairs"]["out"] == 40 + 13
