"""Labels in an order where every prefix is a stratified sample, and a page that
says, live, whether the labels are enough and what ``combine`` would estimate from them.

* the labelling file (``filters sample``'s sample.tsv and the runner's labels.tsv) is ordered
  round-robin over language pairs and margin strata: its first 30 rows cover every pair and
  stratum; the rows and weights drawn are those of the draw, only their order changed;
* the page's "enough" marker flips exactly when ``combine`` (and the runner's labels gate)
  accepts the labels;
* the page's estimate of GOOD at the threshold equals ``combine``'s on the same labels (1e-9);
* the guideline heads the page; provenance is a link and a readable locator; margins to 3
  significant digits.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import threading
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from filters.bitext import cli_combine, cli_sample
from filters.bitext.calibrate import CalibrationError, check_labels
from filters.bitext.label_page import make_server, url_of
from filters.bitext.label_sheet import read_sheet
from filters.bitext.label_store import LabelSheet
from filters.bitext.label_view import margin_text
from filters.bitext.sample import draw_sample, labelling_order, read_labels
from labse_common.config import load
from labse_common.sections.combine import CombineConfig
from tests.filters.bitext.test_label_page import CHROMIUM
from tests.support.paths import REPO

PAIRS = {("de", "en"): 1200, ("fr", "en"): 600, ("de", "fr"): 150}
DEFAULT_GUIDELINE = (
    "GOOD: a translation a professional would accept for NMT training; small omissions or "
    "additions are BAD."
)


def mined_pairs(seed: int = 3) -> tuple[pa.Table, set[tuple[str, str]]]:
    """Mined pairs of three language pairs, one pair after the other (as a run concatenates
    them), with margin and cds_score telling GOOD from BAD, and the GOOD ones."""
    rng = np.random.default_rng(seed)
    cols: dict[str, list] = {k: [] for k in ("src", "trg", "src_lang", "trg_lang")}
    margin, cds, good = [], [], []
    for (s, t), n in PAIRS.items():
        g = rng.random(n) < 0.5
        margin += np.where(g, rng.normal(1.12, 0.05, n), rng.normal(1.05, 0.05, n)).tolist()
        cds += np.where(g, rng.normal(0.6, 0.5, n), rng.normal(-0.4, 0.5, n)).tolist()
        good += g.tolist()
        cols["src"] += [f"{s} Satz {s}{t} {i}" for i in range(n)]
        cols["trg"] += [f"{t} sentence {s}{t} {i}" for i in range(n)]
        cols["src_lang"] += [s] * n
        cols["trg_lang"] += [t] * n
    table = pa.table(
        {
            **cols,
            "margin": pa.array(margin, pa.float32()),
            "cds_score": pa.array(cds, pa.float32()),
        }
    )
    planted = {(a, b) for a, b, g in zip(cols["src"], cols["trg"], good) if g}
    return table, planted


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> tuple[Path, pa.Table, set[tuple[str, str]]]:
    d = tmp_path_factory.mktemp("mined")
    table, planted = mined_pairs()
    pq.write_table(table, d / "pairs.parquet")
    return d / "pairs.parquet", table, planted


def sample_dir(tmp_path: Path, pairs_path: Path, *extra: str) -> Path:
    """``filters sample`` as a person runs it: sample.tsv, sample.parquet, source.json."""
    out = tmp_path / "sample"
    assert cli_sample.main(["--pairs", str(pairs_path), "--output", str(out), *extra]) == 0
    return out


def get(url: str) -> dict:
    # Generous: the estimate fits combine's model, and a loaded CI machine is slow.
    with urllib.request.urlopen(url, timeout=120) as r:
        return json.loads(r.read())


def post(url: str, body: object) -> tuple[int, dict]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.status, json.loads(r.read())


def rows_of(path: Path) -> list[dict[str, str]]:
    sheet = read_sheet(path)
    return [dict(zip(sheet.header, r)) for r in sheet.rows]


# --- the order ------------------------------------------------------------------------------------


def test_the_first_30_rows_cover_every_pair_and_stratum_and_only_the_order_changed(tmp_path, pairs):
    pairs_path, table, _ = pairs
    out = sample_dir(tmp_path, pairs_path)
    rows = rows_of(out / "sample.tsv")
    strata = {r["stratum"] for r in rows}
    assert len(strata) == 12  # 3 language pairs x 4 margin buckets
    first = rows[:30]
    assert {r["stratum"] for r in first} == strata
    assert {(r["src_lang"], r["trg_lang"]) for r in first} == set(PAIRS)
    # The draw is the same (rows, strata, weights): only the order of the rows changed.
    cfg = load("combine", "demo")
    drawn = draw_sample(table, cfg.sample_size, cfg.margin_buckets, seed=cfg.seed)
    same = set(zip(drawn["sample_id"].to_pylist(), drawn["stratum"].to_pylist()))
    assert {(int(r["sample_id"]), r["stratum"]) for r in rows} == same
    weight = dict(zip(drawn["sample_id"].to_pylist(), drawn["weight"].to_pylist()))
    assert all(float(r["weight"]) == pytest.approx(weight[int(r["sample_id"])]) for r in rows)
    # sample.parquet (what the runner's labels.tsv is made from) is in the same order.
    parquet_ids = pq.read_table(out / "sample.parquet")["sample_id"].to_pylist()
    assert parquet_ids == [int(r["sample_id"]) for r in rows]


def test_every_prefix_is_balanced_over_pairs_and_their_strata():
    """Round-robin: in any prefix, the language pairs that still have rows have counts within
    one of each other, and so have the strata within a pair; within a stratum the order is
    random but fixed by the seed."""
    strata = [
        f"{p}|m{b}"
        for p, n in (("de|en", 40), ("fr|en", 20), ("de|fr", 6))
        for b in range(4)
        for _ in range(n // 4 + (b < n % 4))
    ]
    order = labelling_order(strata, seed=5)
    assert sorted(order.tolist()) == list(range(len(strata)))
    left = Counter(s.rsplit("|", 1)[0] for s in strata)
    seen: Counter = Counter()
    for m, i in enumerate(order, start=1):
        seen[strata[i].rsplit("|", 1)[0]] += 1
        open_pairs = [p for p in left if seen[p] < left[p]]
        counts = [seen[p] for p in open_pairs]
        assert not counts or max(counts) - min(counts) <= 1, (m, seen)
    assert labelling_order(strata, seed=5).tolist() == order.tolist()
    assert labelling_order(strata, seed=6).tolist() != order.tolist()


def test_the_runners_labels_file_is_in_labelling_order(tmp_path, pairs):
    """The file the runner asks a person to label (``OUTPUT/labels.tsv``) follows the sample."""
    from labse_common.cli import EXIT_NEEDS_LABELS
    from pipelines.e2e_tasks import labels

    pairs_path, _, _ = pairs
    out = sample_dir(tmp_path, pairs_path)
    person = tmp_path / "labels.tsv"
    rc = labels(out / "sample.parquet", pairs_path, person, None, tmp_path / "gate", 30, 5)
    assert rc == EXIT_NEEDS_LABELS
    rows = rows_of(person)
    assert {r["stratum"] for r in rows[:30]} == {r["stratum"] for r in rows}
    assert {(r["src_lang"], r["trg_lang"]) for r in rows[:30]} == set(PAIRS)


# --- the live page --------------------------------------------------------------------------------


def serve(sheet: LabelSheet) -> Iterator[str]:
    srv = make_server(sheet, "127.0.0.1", 0)
    thread = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield url_of(srv)
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(5)


def combine_accepts(labels: Path, pairs_path: Path, out: Path, sets: list[str]) -> bool:
    argv = ["--pairs", str(pairs_path), "--labels", str(labels), "--output", str(out)]
    return cli_combine.main([*argv, *(a for s in sets for a in ("--set", s))]) == 0


SMALL = ["min_labelled=12", "min_per_label=4", "bootstrap=40", "on_unreachable=continue"]


@pytest.mark.slow
def test_the_enough_marker_flips_exactly_when_combine_accepts(tmp_path, pairs):
    from labse_common.cli import EXIT_NEEDS_LABELS
    from pipelines.e2e_tasks import labels as gate

    pairs_path, table, planted = pairs
    out = sample_dir(tmp_path, pairs_path)
    path = out / "sample.tsv"
    cfg = load("combine", "demo", SMALL)
    rows = rows_of(path)
    # Every label BAD first, then GOOD ones: the marker waits for min_per_label GOOD.
    order = sorted(range(len(rows)), key=lambda i: (rows[i]["src"], rows[i]["trg"]) in planted)
    states, marks, per_pair = [], [], []
    for url in serve(LabelSheet(path, cfg, table)):
        assert get(url + "api/state")["enough"]["ok"] is False
        for i in order[:10] + order[-8:]:
            truth = "GOOD" if (rows[i]["src"], rows[i]["trg"]) in planted else "BAD"
            status, d = post(url + "api/label", {"index": i, "label": truth})
            assert status == 200, d
            marks.append(d["enough"]["ok"])
            per_pair.append(d["enough"]["pairs"])
            states.append(path.read_text(encoding="utf-8"))
    flip = marks.index(True)
    assert marks == [False] * flip + [True] * (len(marks) - flip)
    # At every step the marker and each pair's are combine's own check of the file's labels.
    for text, ok, pp in zip(states, marks, per_pair):
        path.write_text(text, encoding="utf-8")
        lab, _ = read_labels(path)
        good = np.array([v == "GOOD" for v in lab["label"].to_pylist()])
        assert ok == _accepted(good, cfg)
        pair = np.array(
            [f"{a}-{b}" for a, b in zip(lab["src_lang"].to_pylist(), lab["trg_lang"].to_pylist())]
        )
        for p, verdict in pp.items():
            assert verdict["ok"] == _accepted(good[pair == p], cfg), (p, verdict)
    # combine itself refuses the labels one step before the flip and accepts them at it; the
    # runner's gate before the final filter says the same.
    for step, accepted in ((flip - 1, False), (flip, True)):
        path.write_text(states[step], encoding="utf-8")
        assert combine_accepts(path, pairs_path, tmp_path / f"c{step}", SMALL) == accepted
        rc = gate(
            out / "sample.parquet",
            pairs_path,
            tmp_path / f"p{step}.tsv",
            path,
            tmp_path / f"g{step}",
            12,
            4,
        )
        assert rc == (0 if accepted else EXIT_NEEDS_LABELS)


def _accepted(good: np.ndarray, cfg: CombineConfig) -> bool:
    try:
        check_labels(good, cfg)
    except CalibrationError:
        return False
    return True


def _start(path: Path, *flags: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "filters", "label", str(path), "--no-browser", *flags],
        cwd=REPO,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    lines: list[str] = []
    while not any("open http" in line for line in lines):
        line = proc.stderr.readline()
        if not line:
            proc.kill()
            pytest.fail("".join(lines) + proc.stderr.read())
        lines.append(line)
    return proc, re.search(r"open (http://127\.0\.0\.1:\d+/)", lines[-1]).group(1)


@pytest.mark.slow
def test_the_live_estimate_is_combines_on_the_same_labels(tmp_path, pairs):
    """``filters label sample.tsv`` as a person runs it (the mined pairs found through the
    sample's source.json): after 80 labels in file order its estimate of GOOD at the threshold,
    the interval and the threshold are those of ``filters combine`` on the file (1e-9)."""
    pairs_path, _, planted = pairs
    out = sample_dir(tmp_path, pairs_path)
    path = out / "sample.tsv"
    rows = rows_of(path)
    sets = ["bootstrap=200", "on_unreachable=continue"]
    proc, url = _start(path, *(a for s in sets for a in ("--set", s)))
    try:
        assert get(url + "api/estimate")["ok"] is False  # nothing labelled yet
        for i in range(80):
            truth = "GOOD" if (rows[i]["src"], rows[i]["trg"]) in planted else "BAD"
            assert post(url + "api/label", {"index": i, "label": truth})[0] == 200
        est = get(url + "api/estimate")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=20)
    assert est["ok"] and est["labelled"] == 80, est
    assert combine_accepts(path, pairs_path, tmp_path / "combined", sets)
    combined = json.loads((tmp_path / "combined" / "combined.json").read_text())
    assert est["target_reached"] == combined["target_reached"] is True
    ref = combined["calibration"] if combined["target_reached"] else combined["reachable"]
    assert est["precision"] == pytest.approx(ref["precision"], abs=1e-9)
    assert est["precision_ci"] == pytest.approx(ref["precision_ci"], abs=1e-9)
    assert est["threshold"] == pytest.approx(ref["threshold"], abs=1e-9)
    for lang, own in combined["per_pair"].items():
        if "unreachable" not in own:
            assert est["per_source_language"][lang]["precision"] == pytest.approx(
                own["precision"], abs=1e-9
            )


# --- what the page shows ------------------------------------------------------------------------


def provenance_sheet(path: Path) -> Path:
    header = [
        "sample_id",
        "src_lang",
        "trg_lang",
        "margin",
        "stratum",
        "weight",
        "label",
        "src",
        "trg",
        "src_url_or_title",
        "src_source",
        "src_doc_id",
        "src_locator",
        "trg_url_or_title",
        "trg_source",
        "trg_doc_id",
    ]
    rows = [
        [
            "0",
            "de",
            "en",
            "1.0",
            "de|en|m0",
            "2.0",
            "",
            "Hallo Welt",
            "Hello world",
            "https://de.example.org/artikel/1?x=1",
            "commoncrawl",
            "urn:uuid:3f2a1b4c-0000-4000-8000-000000000001",
            "crawl/CC-MAIN-1.warc.gz@123456",
            "Berlin Zoo",
            "wikipedia",
            "4711",
        ],
        [
            "1",
            "de",
            "en",
            "0.98765",
            "de|en|m1",
            "2.0",
            "",
            "Guten Tag",
            "Good day",
            "javascript:alert(1)",
            "commoncrawl",
            "",
            "",
            "",
            "",
            "",
        ],
    ]
    path.write_text("".join("\t".join(r) + "\n" for r in [header, *rows]), encoding="utf-8")
    return path


def test_the_guideline_heads_the_page_and_is_configurable(tmp_path):
    path = provenance_sheet(tmp_path / "labels.tsv")
    assert CombineConfig().label_guideline == DEFAULT_GUIDELINE
    for url in serve(LabelSheet(path)):
        with urllib.request.urlopen(url, timeout=60) as r:
            page = r.read().decode()
        assert f'<p id="guideline">{DEFAULT_GUIDELINE}</p>' in page
        assert get(url + "api/state")["guideline"] == DEFAULT_GUIDELINE
    cfg = load("combine", "demo", ['label_guideline="GOOD: <exact> meaning only"'])
    for url in serve(LabelSheet(path, cfg)):
        with urllib.request.urlopen(url, timeout=60) as r:
            page = r.read().decode()
        assert "GOOD: &lt;exact&gt; meaning only" in page  # text, never HTML


def test_provenance_is_a_link_and_a_readable_locator_and_margins_have_3_digits(tmp_path):
    path = provenance_sheet(tmp_path / "labels.tsv")
    for url in serve(LabelSheet(path)):
        r0, r1 = get(url + "api/state")["rows"]
    assert r0["src_source"] == {
        "url": "https://de.example.org/artikel/1?x=1",
        "text": "de.example.org/artikel/1",
        "locator": "Common Crawl \u00b7 CC-MAIN-1.warc.gz, byte 123,456 \u00b7 record 3f2a1b4c",
    }
    assert r0["trg_source"] == {
        "url": "https://en.wikipedia.org/wiki/Berlin_Zoo",
        "text": "Berlin Zoo",
        "locator": "Wikipedia \u00b7 page id 4711",
    }
    assert r1["src_source"]["url"] is None  # only http(s) links
    assert (r0["margin_text"], r1["margin_text"]) == ("1.00", "0.988")
    assert [margin_text(v) for v in ("1.23456", "-0.5", "", "n/a", "12345.6")] == [
        "1.23",
        "-0.500",
        "",
        "n/a",
        "12346",
    ]


@pytest.mark.slow
def test_the_page_shows_guideline_link_enough_and_estimate_in_chromium(tmp_path, pairs):
    from tests.filters.bitext.test_label_page import _playwright

    sync_playwright, expect = _playwright()
    assert shutil.which(CHROMIUM)
    pairs_path, table, planted = pairs
    out = sample_dir(tmp_path, pairs_path)
    path = out / "sample.tsv"
    cfg = load("combine", "demo", SMALL)
    rows = rows_of(path)
    for url in serve(LabelSheet(path, cfg, table)):
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True)
            try:
                page = browser.new_page()
                page.goto(url)
                expect(page.locator("body")).to_have_attribute("data-ready", "1")
                expect(page.locator("#guideline")).to_have_text(DEFAULT_GUIDELINE)
                expect(page.locator("#enough")).to_contain_text("Not enough to continue yet")
                expect(page.locator("#strata tbody tr")).to_have_count(12)
                for i in range(30):
                    truth = (rows[i]["src"], rows[i]["trg"]) in planted
                    page.keyboard.press("g" if truth else "b")
                    expect(page.locator("body")).to_have_attribute("data-labelled", str(i + 1))
                expect(page.locator("body")).to_have_attribute("data-enough", "1")
                expect(page.locator("#enough")).to_contain_text("Enough to continue")
                expect(page.locator("body")).to_have_attribute("data-estimate-version", "30")
                expect(page.locator("#estimate")).to_contain_text("Estimated GOOD at the threshold")
            finally:
                browser.close()


@pytest.mark.slow
def test_a_link_in_the_page_in_chromium(tmp_path):
    """The source page is an <a href> the person can open; a non-http value is no link."""
    from tests.filters.bitext.test_label_page import _playwright

    sync_playwright, expect = _playwright()
    path = provenance_sheet(tmp_path / "labels.tsv")
    for url in serve(LabelSheet(path)):
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True)
            try:
                page = browser.new_page()
                page.goto(url)
                expect(page.locator("body")).to_have_attribute("data-ready", "1")
                link = page.locator("#src-link")
                expect(link).to_have_attribute("href", "https://de.example.org/artikel/1?x=1")
                expect(link).to_have_text("de.example.org/artikel/1")
                expect(page.locator("#src-where")).to_contain_text("byte 123,456")
                expect(page.locator("#trg-link")).to_have_attribute(
                    "href", "https://en.wikipedia.org/wiki/Berlin_Zoo"
                )
                expect(page.locator("#margin")).to_have_text("margin 1.00")
                page.keyboard.press("ArrowRight")
                expect(page.locator("#margin")).to_have_text("margin 0.988")
                assert page.locator("#src-link").get_attribute("href") is None
            finally:
                browser.close()
