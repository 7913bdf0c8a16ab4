"""``python -m filters label``: the labelling page and the TSV it keeps saved.

(a) Through the JSON API, without a browser: labels are saved to the file at once, in the form
``read_labels`` reads, with every column, the header and the row order kept; undo; bad
requests are refused; unusable files are one line and exit 2 through the command line.
(b) In a real browser (Debian's headless Chromium driven by Playwright): label by keyboard,
undo, reload, and read the file back.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from filters.bitext.cli_label import main as label_main
from filters.bitext.label_page import make_server, url_of
from filters.bitext.label_store import LabelSheet
from filters.bitext.sample import TSV_COLUMNS, read_labels, write_for_labelling
from tests.support.paths import REPO

ROOT = REPO
CHROMIUM = "/usr/bin/chromium"
PROVENANCE = (
    "src_url_or_title",
    "src_source",
    "src_doc_id",
    "trg_url_or_title",
    "trg_source",
    "trg_doc_id",
)


def write_sample(path: Path, n: int = 5, provenance: bool = True) -> Path:
    """A labelling TSV as ``filters sample`` writes it (two language pairs, a tab and a newline
    in one text), plus the runner's provenance columns when ``provenance``."""
    langs = [("de", "en"), ("fr", "en")]
    table = pa.table(
        {
            "sample_id": list(range(10, 10 + n)),
            "src_lang": [langs[i % 2][0] for i in range(n)],
            "trg_lang": [langs[i % 2][1] for i in range(n)],
            "margin": [1.0 + i / 100 for i in range(n)],
            "stratum": [f"s{i % 2}" for i in range(n)],
            "weight": [2.0] * n,
            "src": ["Satz\tmit Tab\nund Zeile 0"] + [f"Quelle <b>{i}</b>" for i in range(1, n)],
            "trg": [f"target {i}" for i in range(n)],
        }
    )
    write_for_labelling(table, path)
    if provenance:
        lines = path.read_text(encoding="utf-8").splitlines()
        extra = ["\t".join(PROVENANCE)] + [
            "\t".join(f"{c}-{i}" for c in PROVENANCE) for i in range(n)
        ]
        path.write_text("".join(f"{a}\t{b}\n" for a, b in zip(lines, extra)), encoding="utf-8")
    return path


@pytest.fixture()
def sample(tmp_path) -> Path:
    return write_sample(tmp_path / "labels.tsv")


@pytest.fixture()
def server(sample) -> Iterator[str]:
    """The page for ``sample``, served on a free port in a thread; yields its URL."""
    srv = make_server(LabelSheet(sample), "127.0.0.1", 0)
    thread = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield url_of(srv)
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(5)


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


def post(url: str, body: object, ctype: str = "application/json") -> tuple[int, dict]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": ctype}
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def labels_in(path: Path) -> list[str]:
    """The label column of every data row, blank ones included, straight from the file."""
    lines = path.read_text(encoding="utf-8").splitlines()
    col = lines[0].split("\t").index("label")
    return [line.split("\t")[col] for line in lines[1:]]


# --- (a) the API ---------------------------------------------------------------------------------


def test_state_lists_every_row_with_its_provenance(server):
    s = get(server + "api/state")
    assert s["progress"] == {"labelled": 0, "total": 5}
    assert [r["index"] for r in s["rows"]] == [0, 1, 2, 3, 4]
    r0 = s["rows"][0]
    assert r0["src"] == "Satz mit Tab und Zeile 0" and r0["trg"] == "target 0"
    assert (r0["src_lang"], r0["trg_lang"], r0["margin"], r0["label"]) == ("de", "en", "1.0", "")
    assert r0["src_provenance"] == {c: f"{c}-0" for c in PROVENANCE[:3]}
    assert r0["trg_provenance"] == {c: f"{c}-0" for c in PROVENANCE[3:]}
    assert r0["other"] == {"sample_id": "10", "stratum": "s0", "weight": "2.0"}
    assert {p["pair"]: p["unlabelled"] for p in s["pairs"]} == {"de-en": 3, "fr-en": 2}
    with urllib.request.urlopen(server, timeout=5) as r:
        page = r.read().decode()
    assert "<script>" in page and "src=" not in page.split("<script>")[0]  # nothing external


def test_labels_are_saved_at_once_keeping_every_column(server, sample):
    before = sample.read_text(encoding="utf-8").splitlines()
    for index, label in [(0, "GOOD"), (1, "BAD"), (3, "GOOD"), (4, "BAD"), (4, "GOOD")]:
        status, d = post(server + "api/label", {"index": index, "label": label})
        assert status == 200 and d["label"] == label, d
    assert d["progress"] == {"labelled": 4, "total": 5}
    assert {p["pair"]: (p["GOOD"], p["BAD"], p["unlabelled"]) for p in d["pairs"]} == {
        "de-en": (2, 0, 1),
        "fr-en": (1, 1, 0),
    }
    table, blank = read_labels(sample)
    assert blank == 1 and table.num_rows == 4
    assert table.column("label").to_pylist() == ["GOOD", "BAD", "GOOD", "GOOD"]
    assert table.column("sample_id").to_pylist() == ["10", "11", "13", "14"]
    assert table.column_names == [*TSV_COLUMNS, *PROVENANCE]
    after = sample.read_text(encoding="utf-8").splitlines()
    assert after[0] == before[0] and len(after) == len(before)
    col = before[0].split("\t").index("label")
    for b, a in zip(before[1:], after[1:]):  # only the label cell changed
        assert [x for i, x in enumerate(b.split("\t")) if i != col] == [
            x for i, x in enumerate(a.split("\t")) if i != col
        ]
    assert [p.name for p in sample.parent.iterdir()] == [sample.name]  # no temporary left
    # Clearing a label is a label too: the row is blank again.
    post(server + "api/label", {"index": 0, "label": ""})
    assert labels_in(sample) == ["", "BAD", "", "GOOD", "GOOD"]


def test_undo_restores_the_previous_label_of_the_last_labelled_row(server, sample):
    post(server + "api/label", {"index": 2, "label": "GOOD"})
    post(server + "api/label", {"index": 2, "label": "BAD"})
    post(server + "api/label", {"index": 0, "label": "GOOD"})
    status, d = post(server + "api/undo", {})
    assert status == 200 and (d["index"], d["label"], d["undone"]) == (0, "", "GOOD")
    status, d = post(server + "api/undo", {})
    assert (d["index"], d["label"], d["undone"]) == (2, "GOOD", "BAD")
    assert labels_in(sample) == ["", "", "GOOD", "", ""]
    post(server + "api/undo", {})
    status, d = post(server + "api/undo", {})
    assert status == 409 and d["error"] == "nothing to undo"
    assert labels_in(sample) == [""] * 5


@pytest.mark.parametrize(
    ("body", "ctype"),
    [
        ({"index": 0, "label": "MAYBE"}, "application/json"),
        ({"index": 0, "label": "good"}, "application/json"),
        ({"index": 5, "label": "GOOD"}, "application/json"),
        ({"index": "0", "label": "GOOD"}, "application/json"),
        (["not", "an", "object"], "application/json"),
    ],
)
def test_a_bad_request_is_400_and_changes_nothing(server, sample, body, ctype):
    before = sample.read_bytes()
    status, d = post(server + "api/label", body, ctype)
    assert status == 400 and d["error"], d
    assert sample.read_bytes() == before


def test_only_json_from_a_loopback_host_is_accepted(server, sample):
    before = sample.read_bytes()
    status, _ = post(server + "api/label", {"index": 0, "label": "GOOD"}, "text/plain")
    assert status == 415  # a cross-site form cannot send application/json without a preflight
    req = urllib.request.Request(server + "api/state", headers={"Host": "evil.example:80"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=5)
    assert e.value.code == 403
    assert sample.read_bytes() == before


def test_a_connection_the_browser_drops_is_a_debug_line_not_a_traceback(server, capsys, caplog):
    """Chromium resets preconnected sockets when it closes; socketserver would print each one's
    traceback to stderr (into whatever else this process is doing)."""
    caplog.set_level(logging.DEBUG, logger="filters.bitext.label_page")
    host, port = server.split("/")[2].split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(b"GET / HTT")  # the server is now waiting for the rest of the line
        time.sleep(0.2)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST
    deadline = time.monotonic() + 5
    while "ended the connection" not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.02)
    assert "ended the connection (ConnectionResetError)" in caplog.text
    assert get(server + "api/state")["rows"]  # still serving
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Exception occurred" not in err
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_file_changed_elsewhere_is_not_overwritten(server, sample):
    text = sample.read_text(encoding="utf-8").replace("target 4", "edited in a spreadsheet")
    sample.write_text(text, encoding="utf-8")
    status, d = post(server + "api/label", {"index": 0, "label": "GOOD"})
    assert status == 409 and "changed on disk" in d["error"]
    assert sample.read_text(encoding="utf-8") == text


def _bad_file(tmp_path: Path, kind: str) -> Path:
    f = tmp_path / f"{kind}.tsv"
    if kind == "no_label":
        f.write_text("src\ttrg\nHallo\thello\n", encoding="utf-8")
    elif kind == "no_src":
        f.write_text("label\ttrg\n\thello\n", encoding="utf-8")
    elif kind == "not_utf8":
        f.write_bytes(b"src\ttrg\tlabel\n\xff\xfe\thello\t\n")
    elif kind == "bad_label":
        f.write_text("src\ttrg\tlabel\nHallo\thello\tMAYBE\n", encoding="utf-8")
    elif kind == "short_row":
        f.write_text("src\ttrg\tlabel\nHallo\thello\n", encoding="utf-8")
    elif kind == "empty":
        f.write_bytes(b"")
    return f


@pytest.mark.parametrize(
    ("kind", "says"),
    [
        ("no_label", "no 'label' column"),
        ("no_src", "no 'src' column"),
        ("not_utf8", "not UTF-8"),
        ("bad_label", "'MAYBE' is not GOOD"),
        ("short_row", "line 2: 2 fields"),
        ("empty", "empty"),
        ("missing", "no such file"),
    ],
)
def test_an_unusable_file_is_one_line_and_exit_2(tmp_path, caplog, kind, says):
    f = _bad_file(tmp_path, kind)
    caplog.set_level(logging.INFO)
    rc = label_main([str(f), "--no-browser", "--log-level", "WARNING"])
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert rc == 2, errors
    assert len(errors) == 1 and str(f) in errors[0] and says in errors[0], errors


def test_only_a_loopback_host_is_allowed(sample, caplog):
    rc = label_main([str(sample), "--host", "0.0.0.0", "--no-browser"])
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert rc == 2 and len(errors) == 1 and "--host 0.0.0.0" in errors[0], errors


def _start_label(path: Path) -> tuple[subprocess.Popen, str]:
    """``python -m filters label PATH`` as a person runs it, once it logged its URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "filters", "label", str(path), "--no-browser"],
        cwd=ROOT,
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


def test_ctrl_c_exits_130_after_logging_the_labels_per_pair(sample):
    """The command as a person runs it: the URL is logged, labels are saved, Ctrl-C ends it
    with exit 130 and the counts per language pair."""
    proc, url = _start_label(sample)
    try:
        assert post(url + "api/label", {"index": 1, "label": "BAD"})[0] == 200
        proc.send_signal(signal.SIGINT)
        err = proc.communicate(timeout=10)[1]
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "1 of 5 pairs labelled" in err and "fr-en: 0 GOOD, 1 BAD, 1 unlabelled" in err, err
    assert labels_in(sample) == ["", "BAD", "", "", ""]


def test_a_cr_in_a_cell_and_a_long_cell_are_read_at_start_up(tmp_path):
    """A line break another tool left in a cell and a cell past csv's 128 KiB limit:
    the page starts and shows both texts (the CR as the space the writer makes of it); labelling
    saves them back."""
    long = "lang " + "y" * 200_000
    f = tmp_path / "labels.tsv"
    f.write_bytes(f"src\ttrg\tlabel\neins\rzwei\tone two\t\n{long}\tlong\t\n".encode())
    proc, url = _start_label(f)
    try:
        rows = get(url + "api/state")["rows"]
        assert [r["src"] for r in rows] == ["eins zwei", long]
        assert post(url + "api/label", {"index": 1, "label": "GOOD"})[0] == 200
        proc.send_signal(signal.SIGINT)
        err = proc.communicate(timeout=10)[1]
    finally:
        proc.kill()
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert (
        f.read_text(encoding="utf-8")
        == f"src\ttrg\tlabel\neins zwei\tone two\t\n{long}\tlong\tGOOD\n"
    )


def test_a_linked_file_is_saved_through_the_link(tmp_path):
    """The runner reads the file a link points to: the page writes there and the link stays a
    link (it used to be replaced by a plain file, the real file never labelled)."""
    (tmp_path / "kept").mkdir()
    real = write_sample(tmp_path / "kept" / "labels.tsv")
    link = tmp_path / "labels.tsv"
    link.symlink_to(os.path.relpath(real, tmp_path))
    srv = make_server(LabelSheet(link), "127.0.0.1", 0)
    thread = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        assert post(url_of(srv) + "api/label", {"index": 2, "label": "GOOD"})[0] == 200
        assert post(url_of(srv) + "api/label", {"index": 3, "label": "BAD"})[0] == 200
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(5)
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert labels_in(real) == ["", "", "GOOD", "BAD", ""]
    assert sorted(p.name for p in real.parent.iterdir()) == ["labels.tsv"]  # no temporary left
    assert read_labels(link)[0].num_rows == 2


def test_a_link_to_nothing_is_one_line_and_exit_2(tmp_path, caplog):
    link = tmp_path / "labels.tsv"
    link.symlink_to(tmp_path / "gone.tsv")
    rc = label_main([str(link), "--no-browser", "--log-level", "WARNING"])
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert rc == 2 and len(errors) == 1, errors
    assert f"a link to {tmp_path / 'gone.tsv'}, which does not exist" in errors[0], errors


def test_help_explains_every_option(capsys):
    with pytest.raises(SystemExit) as e:
        label_main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for opt in ("FILE", "--port", "--host", "--no-browser", "--log-level", "g = GOOD"):
        assert opt in out, opt


# --- (b) a real browser --------------------------------------------------------------------------


def _playwright():
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        pytest.skip("the playwright package is not installed (pip install playwright)")
    return sync_playwright, expect


@pytest.mark.slow
def test_label_by_keyboard_undo_and_reload_in_chromium(server, sample):
    sync_playwright, expect = _playwright()
    assert shutil.which(CHROMIUM)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            page = browser.new_page()
            page.goto(server)
            expect(page.locator("body")).to_have_attribute("data-ready", "1")
            expect(page.locator("#position")).to_have_text("pair 1 of 5")
            expect(page.locator("#src")).to_have_text("Satz mit Tab und Zeile 0")
            expect(page.locator("#src-prov")).to_contain_text("src_url_or_title")
            expect(page.locator("#trg-prov")).to_contain_text("trg_doc_id-0")
            expect(page.locator("#margin")).to_have_text("margin 1.00")
            for key in ("g", "b", "g"):
                page.keyboard.press(key)
            expect(page.locator("#progress-text")).to_have_text("3 / 5 labelled")
            expect(page.locator("#position")).to_have_text("pair 4 of 5")
            # u: row 3 is unlabelled again and shown; relabel it BAD.
            page.keyboard.press("u")
            expect(page.locator("#position")).to_have_text("pair 3 of 5")
            expect(page.locator("#current-label")).to_have_text("unlabelled")
            expect(page.locator("#progress-text")).to_have_text("2 / 5 labelled")
            page.keyboard.press("b")
            expect(page.locator("#progress-text")).to_have_text("3 / 5 labelled")
            # The text of a mined page is shown as text, never as HTML.
            page.keyboard.press("ArrowLeft")
            expect(page.locator("#position")).to_have_text("pair 3 of 5")
            expect(page.locator("#src")).to_have_text("Quelle <b>2</b>")
            assert labels_in(sample) == ["GOOD", "BAD", "BAD", "", ""]

            page.reload()
            expect(page.locator("body")).to_have_attribute("data-ready", "1")
            expect(page.locator("#progress-text")).to_have_text("3 / 5 labelled")
            expect(page.locator("#fill")).to_have_attribute("style", "width: 60%;")
            expect(page.locator("#position")).to_have_text("pair 4 of 5")  # first unlabelled
            for _ in range(3):
                page.keyboard.press("ArrowLeft")
            for pos, label in [(1, "GOOD"), (2, "BAD"), (3, "BAD"), (4, "unlabelled")]:
                expect(page.locator("#position")).to_have_text(f"pair {pos} of 5")
                expect(page.locator("#current-label")).to_have_text(label)
                if pos < 4:
                    page.keyboard.press("ArrowRight")
            rows = page.locator("#summary tbody tr")
            expect(rows).to_have_count(2)  # per pair: GOOD, BAD, unlabelled, total, enough
            expect(rows.nth(0).locator("td")).to_have_text(["de-en", "1", "1", "1", "3", "no"])
            expect(rows.nth(1).locator("td")).to_have_text(["fr-en", "0", "1", "1", "2", "no"])
            # s skips to the next unlabelled pair without labelling it.
            page.keyboard.press("s")
            expect(page.locator("#position")).to_have_text("pair 5 of 5")
        finally:
            browser.close()
    table, blank = read_labels(sample)
    assert blank == 2
    assert table.column("label").to_pylist() == ["GOOD", "BAD", "BAD"]
    assert table.column("sample_id").to_pylist() == ["10", "11", "12"]
