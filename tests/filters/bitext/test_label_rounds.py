"""On the labelling page: after the first stratified round, a second round near
the threshold, drawn with known inclusion probabilities, and its unbiased estimate.

* through the page's HTTP API: not offered before the first round is enough; then offered, and
  drawing it appends exactly :func:`~filters.bitext.adaptive_sample.draw_second_round`'s pairs
  (on combine's own model and threshold) with their round, stratum and probability;
* the two-round estimate the page shows equals
  :func:`~filters.bitext.adaptive_sample.estimate_good_share` on the same labels (1e-9), and it
  is recomputed from the file's columns alone;
* ``filters combine`` and the runner's labels gate still read the file.
"""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from filters.bitext import adaptive_sample as ad
from filters.bitext.combine import CombinedScorer
from filters.bitext.label_rounds import rounds_of, two_round_estimate
from filters.bitext.label_sheet import read_sheet
from filters.bitext.label_store import LabelSheet
from labse_common.config import load
from tests.filters.bitext.test_label_order import (
    SMALL,
    combine_accepts,
    get,
    mined_pairs,
    post,
    rows_of,
    sample_dir,
    serve,
)

SIZE = 20  # pairs of round two


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    d = tmp_path_factory.mktemp("mined")
    table, planted = mined_pairs()
    pq.write_table(table, d / "pairs.parquet")
    return d / "pairs.parquet", table, planted


def truth(row: dict, planted: set) -> str:
    return "GOOD" if (row["src"], row["trg"]) in planted else "BAD"


def post_status(url: str, body: object) -> tuple[int, dict]:
    try:
        return post(url, body)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_round_two_is_not_offered_before_the_first_round_is_enough(tmp_path, pairs):
    pairs_path, table, _ = pairs
    path = sample_dir(tmp_path, pairs_path) / "sample.tsv"
    sheet = LabelSheet(path, load("combine", "demo", SMALL), table)
    for url in serve(sheet):
        state = get(url + "api/rounds")
        assert state["offered"] is False and state["drawn"] == 0
        assert "not enough" in state["why"]
        status, d = post_status(url + "api/round2", {})
        assert status == 409 and "not enough" in d["error"]
        with urllib.request.urlopen(url, timeout=60) as r:
            assert 'id="btn-round2"' in r.read().decode()
    assert read_sheet(path).header[-1] == "trg"  # nothing appended


def reference(before: Path, pairs_path: Path, table, tmp_path: Path, cfg):
    """Round two as adaptive_sample draws it on combine's own model and threshold (from
    ``filters combine`` on the file as it was before the draw)."""
    assert combine_accepts(before, pairs_path, tmp_path / "ref", SMALL)
    model = json.loads((tmp_path / "ref" / "model.json").read_text())
    combined = json.loads((tmp_path / "ref" / "combined.json").read_text())
    cal = combined["calibration"] if combined["target_reached"] else combined["reachable"]
    t = float(cal["threshold"])
    scores = CombinedScorer.from_json(model).score(table)
    rows = rows_of(before)
    done = [r for r in rows if r["label"]]
    first = ad.FirstRound(
        rows=np.array([int(r["sample_id"]) for r in done]),
        strata=[r["stratum"] for r in done],
        good=np.array([r["label"] == "GOOD" for r in done]),
        sizes=ad.stratum_sizes(pq.read_table(before.parent / "sample.parquet")),
    )
    band = ad.near_threshold_band(scores, t, ad.band_size(table.num_rows, SIZE))
    second = ad.draw_second_round(scores, first, band, SIZE, cfg.seed)
    return scores, t, first, second


@pytest.mark.slow
def test_round_two_through_the_page_appends_the_draw_and_shows_its_estimate(tmp_path, pairs):
    pairs_path, table, planted = pairs
    out = sample_dir(tmp_path, pairs_path)
    path = out / "sample.tsv"
    cfg = load("combine", "demo", SMALL)
    rows = rows_of(path)
    n1 = len(rows)
    sheet = LabelSheet(path, cfg, table)
    rounds_of(sheet, SIZE)
    for url in serve(sheet):
        for i in range(40):  # round one, in file order (a stratified prefix)
            assert post(url + "api/label", {"index": i, "label": truth(rows[i], planted)})[0] == 200
        assert get(url + "api/rounds")["offered"] is True
        shutil.copy(path, tmp_path / "before.tsv")
        shutil.copy(out / "sample.parquet", tmp_path / "sample.parquet")
        status, d = post(url + "api/round2", {})
        assert status == 200 and d["drawn"] == SIZE and d["first"] == n1, d
        after = rows_of(path)
        for k in range(15):  # round two, in the order served
            r = after[n1 + k]
            assert post(url + "api/label", {"index": n1 + k, "label": truth(r, planted)})[0] == 200
        shown = get(url + "api/rounds")
        assert get(url + "api/rounds")["offered"] is False  # one second round per file
        assert post_status(url + "api/round2", {})[0] == 409
    scores, t, first, second = reference(tmp_path / "before.tsv", pairs_path, table, tmp_path, cfg)
    assert d["threshold"] == pytest.approx(t, abs=1e-9)
    # The rows appended are the draw, in its serving order, with round, stratum, probability.
    drawn = after[n1:]
    assert [int(r["sample_id"]) for r in drawn] == second.rows.tolist()
    assert [r["stratum"] for r in drawn] == second.strata
    assert {r["round"] for r in drawn} == {"2"}
    prob = np.array([float(r["inclusion_probability"]) for r in drawn])
    assert prob == pytest.approx(second.inclusion_probability(), abs=1e-12)
    assert [float(r["weight"]) for r in drawn] == pytest.approx(1.0 / prob)
    assert [r["round"] for r in after[:n1]] == ["1"] * 40 + [""] * (n1 - 40)
    # The page's two-round estimate is estimate_good_share's on the same labels.
    good2 = np.array([truth(r, planted) == "GOOD" for r in drawn[:15]])
    ref = ad.estimate_good_share(scores, t, first, second, good2, cfg.confidence)
    est = shown["estimate"]
    assert est["ok"] and est["labelled"] == 15 and shown["drawn"] == SIZE, shown
    assert est["share"] == pytest.approx(ref.share, abs=1e-9)
    assert est["interval"] == pytest.approx(list(ref.interval), abs=1e-9)
    assert est["kept"] == ref.kept and est["labelled_kept"] == ref.labelled_kept
    # filters combine and the runner's labels gate still read the file with round two.
    assert combine_accepts(path, pairs_path, tmp_path / "after", SMALL)
    from pipelines.e2e_tasks import labels as gate

    person = tmp_path / "person.tsv"
    shutil.copy(path, person)
    assert gate(out / "sample.parquet", pairs_path, person, None, tmp_path / "g", 12, 4) == 0


def test_the_estimate_from_the_file_alone_is_estimate_good_share():
    """A population with known scores: the round columns the page writes are all the estimate
    needs (the kept pairs and pools rebuilt from them give the same share and interval)."""
    rng = np.random.default_rng(7)
    n = 3000
    scores = rng.random(n)
    truth_ = rng.random(n) < scores  # GOOD more likely at a high score
    strata = np.where(scores < 0.5, "lo", "hi")
    sizes = {"lo": int((strata == "lo").sum()), "hi": int((strata == "hi").sum())}
    ids = rng.choice(n, 120, replace=False)
    first = ad.FirstRound(ids, strata[ids].tolist(), truth_[ids], sizes)
    t = 0.62
    band = ad.near_threshold_band(scores, t, 400)
    second = ad.draw_second_round(scores, first, band, 60, seed=3)
    header = ["sample_id", "stratum", "weight", "label", "src", "trg", "round"]
    header += ["round_score", "round_threshold", "round_pool", "inclusion_probability"]
    rows, labels = [], []
    for i in ids:
        lab = "GOOD" if truth_[i] else "BAD"
        rows.append(
            [str(i), strata[i], "1", lab, "s", "t", "1", repr(float(scores[i])), "", "", ""]
        )
        labels.append(lab)
    for i, b, p in zip(second.rows, second.strata, second.inclusion_probability()):
        lab = "GOOD" if truth_[i] else "BAD"
        rows.append([str(i), b, repr(1 / p), lab, "s", "t", "2", repr(float(scores[i]))])
        rows[-1] += [repr(t), str(second.pool[b]), repr(float(p))]
        labels.append(lab)
    labels[len(ids) + 45] = ""  # a skipped pair ends the labelled prefix of round two
    est = two_round_estimate(header, rows, labels, 0.9)
    ref = ad.estimate_good_share(scores, t, first, second, truth_[second.rows[:45]], 0.9)
    assert est["ok"] and est["labelled"] == 45
    assert est["share"] == pytest.approx(ref.share, abs=1e-12)
    assert est["interval"] == pytest.approx(list(ref.interval), abs=1e-12)
    assert est["kept"] == ref.kept
    # A round-two row missing from the file is said, never estimated around.
    gone = two_round_estimate(header, rows[:-1], labels[:-1], 0.9)
    assert gone["ok"] is False and "not all in the file" in gone["why"]
