"""A local web page where a person labels a sample of mined pairs GOOD or BAD.

``python -m filters label FILE`` (:mod:`filters.bitext.cli_label`) serves it; this module is the
library:

* :class:`LabelSheet`: a labelling TSV (as :func:`filters.bitext.sample.write_for_labelling`
  writes it, possibly with extra columns such as the provenance of both sides) held in memory
  with every row, labelled or not. Each label given is saved at once: the whole file is
  rewritten atomically (:func:`filters.bitext.label_sheet.replace_text`: a temporary file
  beside it, then ``os.replace``; a symbolic link stays one and the file it points to is
  rewritten), keeping the header, every column and the row order, so
  :func:`filters.bitext.sample.read_labels` reads it as before and a spreadsheet still opens
  it. A lock serialises the requests.
* :func:`make_server`: a ``ThreadingHTTPServer`` on a loopback address serving one
  self-contained page (inline CSS and JS, no external assets) and a small JSON API:

  - ``GET /api/state``: every row (index, src, trg, src_lang, trg_lang, margin, label, the
    provenance of each side and the other columns), the progress and the counts per language
    pair, the guideline;
  - ``POST /api/label`` ``{"index": i, "label": "GOOD" | "BAD" | ""}``: set (or clear) a label;
  - ``POST /api/undo``: restore the label the last labelled row had before, and say which row;
  - ``GET /api/estimate``: the GOOD share ``combine`` would estimate at its threshold, with its
    interval, on the labels as they are now (:class:`LabelJudge`: ``combine``'s own code; needs
    the mined pairs).

  Every answer to a label or an undo carries the counts per language pair and per margin
  stratum and whether the labels are enough to continue (``combine.min_labelled`` and
  ``combine.min_per_label``, judged by ``combine``'s own check), overall and per pair. The page
  heads with ``combine.label_guideline`` (what GOOD means), shows margins to 3 significant digits
  and each side's provenance as a link to its page and a readable locator
  (:mod:`filters.bitext.label_view` says all of these).

Requests are refused unless they come to a loopback host name (no DNS rebinding), and a POST
must be ``application/json`` (a page of another site cannot send one without a preflight this
server never answers), so only the person at this machine labels.
"""

from __future__ import annotations

import html
import ipaddress
import json
import logging
import os
import socket
import sys
import threading
from collections.abc import Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pyarrow as pa

from filters.bitext.calibrate import BAD, GOOD
from filters.bitext.label_match import key_of
from filters.bitext.label_rounds import PAGE_ROUNDS, rounds_of
from filters.bitext.label_sheet import LABEL, read_sheet, replace_text, tsv_cell
from filters.bitext.label_view import LabelJudge, margin_text, source_view, strata_counts
from labse_common.errors import InputError, UsageError
from labse_common.sections.combine import CombineConfig

log = logging.getLogger("filters.bitext.label_page")

LABELS = (GOOD, BAD)
#: Columns the page shows in their own place; every other column is shown as provenance (the
#: ``src_*``/``trg_*`` ones next to their side) or in the details line.
SHOWN = ("src", "trg", LABEL, "src_lang", "trg_lang", "margin")
MAX_BODY = 64 * 1024


class SheetChanged(Exception):
    """The file was changed on disk by something else since it was read: not overwritten."""


class LabelSheet:
    """Every row of a labelling TSV, and the one place that changes and saves its labels."""

    def __init__(
        self,
        path: str | os.PathLike,
        cfg: CombineConfig | None = None,
        pairs: pa.Table | None = None,
        earlier: dict[tuple[str, str], str] | None = None,
    ) -> None:
        """``cfg``: the ``combine:`` settings the run uses (what "enough" and the estimate are
        judged by; its ``label_guideline`` heads the page); ``pairs``: the mined pairs
        ``combine`` fits on, for the live estimate (None: no estimate); ``earlier``: the labels
        of ``combine.labels``, which the run adds to the person's."""
        self.path = Path(path)
        self.lock = threading.Lock()
        self.cfg = cfg if cfg is not None else CombineConfig()
        self.version = 0  # bumped by every change of a label: the estimate's cache key
        self.bom = ""
        self.header: list[str] = []
        self.rows: list[list[str]] = []
        self.labels: list[str] = []
        self.history: list[tuple[int, str]] = []
        self._load()
        self.label_col = self.header.index(LABEL)
        self._col = {h: i for i, h in reversed(list(enumerate(self.header)))}
        self.judge = LabelJudge(self.cfg, self._keys(), pairs, earlier)

    def use_pairs(
        self, pairs: pa.Table | None, earlier: dict[tuple[str, str], str] | None = None
    ) -> None:
        """Judge the labels against ``pairs`` (and ``earlier`` labels) from now on."""
        with self.lock:
            self.judge = LabelJudge(self.cfg, self._keys(), pairs, earlier)

    # --- reading -----------------------------------------------------------------------------

    def _load(self) -> None:
        path = self.path
        if not path.exists():
            if path.is_symlink():
                raise InputError(path, f"a link to {os.readlink(path)}, which does not exist")
            raise InputError(path, "no such file")
        if not path.is_file():
            raise InputError(path, "not a file")
        try:
            sheet = read_sheet(path)
        except PermissionError as e:
            raise InputError(path, "not readable (permission denied)") from e
        self.bom = "\ufeff" if sheet.bom else ""  # a spreadsheet's UTF-8 export: kept as it came
        header = sheet.header
        self.rows, self.labels = sheet.rows, sheet.labels
        if not self.rows:
            raise InputError(path, "no rows to label (only a header)")
        folder = path.resolve().parent
        if not os.access(folder, os.W_OK | os.X_OK):
            raise InputError(
                path,
                f"its folder {folder} is not writable: each label is saved "
                "by writing a new copy of the file there",
            )
        self.header = header
        self._stamp = self._stat()

    def _stat(self) -> tuple[int, int, int]:
        st = os.stat(self.path)
        return st.st_ino, st.st_size, st.st_mtime_ns

    def _get(self, row: list[str], column: str) -> str:
        i = self._col.get(column)
        return row[i] if i is not None else ""

    # --- what the page shows -----------------------------------------------------------------

    def _keys(self) -> list[tuple[str, str]]:
        return [key_of(self._get(r, "src"), self._get(r, "trg")) for r in self.rows]

    def label_rows(self) -> list[dict[str, str]]:
        """Every row as the readers of labels see it (label upper-cased, blank ones too)."""
        return [
            {**dict(zip(self.header, row)), LABEL: lab} for row, lab in zip(self.rows, self.labels)
        ]

    def pair_of(self, index: int) -> str:
        row = self.rows[index]
        src, trg = self._get(row, "src_lang"), self._get(row, "trg_lang")
        return f"{src}-{trg}" if (src or trg) else "all"

    def row_json(self, index: int) -> dict[str, Any]:
        row = self.rows[index]
        side: dict[str, dict[str, str]] = {"src": {}, "trg": {}, "other": {}}
        for h, v in zip(self.header, row):
            if h in SHOWN:
                continue
            key = h.split("_", 1)[0] if h.startswith(("src_", "trg_")) else "other"
            side[key][h] = v
        return {
            "index": index,
            "label": self.labels[index],
            "src": self._get(row, "src"),
            "trg": self._get(row, "trg"),
            "src_lang": self._get(row, "src_lang"),
            "trg_lang": self._get(row, "trg_lang"),
            "margin": self._get(row, "margin"),
            "margin_text": margin_text(self._get(row, "margin")),
            "pair": self.pair_of(index),
            "stratum": self._get(row, "stratum"),
            "src_provenance": side["src"],
            "trg_provenance": side["trg"],
            "src_source": source_view(side["src"], "src", self._get(row, "src_lang")),
            "trg_source": source_view(side["trg"], "trg", self._get(row, "trg_lang")),
            "other": side["other"],
        }

    def progress(self) -> dict[str, int]:
        done = sum(1 for lab in self.labels if lab)
        return {"labelled": done, "total": len(self.labels)}

    def pair_counts(self) -> list[dict[str, Any]]:
        """Per language pair (first-seen order): GOOD, BAD, unlabelled and total rows."""
        counts: dict[str, dict[str, Any]] = {}
        for i, lab in enumerate(self.labels):
            pair = self.pair_of(i)
            c = counts.setdefault(pair, {"pair": pair, GOOD: 0, BAD: 0, "unlabelled": 0})
            c[lab or "unlabelled"] += 1
        for c in counts.values():
            c["total"] = c[GOOD] + c[BAD] + c["unlabelled"]
        return list(counts.values())

    def strata_counts(self) -> list[dict[str, Any]]:
        """Per language pair and margin stratum (the ``stratum`` column): :func:`strata_counts`."""
        get = self._get
        return strata_counts(
            (self.pair_of(i), get(r, "stratum"), lab, get(r, "margin"))
            for i, (r, lab) in enumerate(zip(self.rows, self.labels))
        )

    def summary(self) -> dict[str, Any]:
        """What the page shows after every label: progress, counts per pair and per stratum,
        and whether the labels are enough to continue."""
        return {
            "progress": self.progress(),
            "pairs": self.pair_counts(),
            "strata": self.strata_counts(),
            "enough": self.judge.enough(self.label_rows(), self.pair_of, self.path),
            "version": self.version,
        }

    def estimate(self) -> dict[str, Any]:
        """The estimate ``combine`` would make on the labels as they are now (cached per
        version; fitted outside the sheet's lock, so labelling never waits for it)."""
        with self.lock:
            version, rows = self.version, self.label_rows()
        return {**self.judge.estimate(version, rows, self.path), "version": version}

    def state(self) -> dict[str, Any]:
        with self.lock:
            return {
                "file": str(self.path),
                "guideline": self.cfg.label_guideline,
                "has_pairs": self.judge.pairs is not None,
                "columns": list(self.header),
                "rows": [self.row_json(i) for i in range(len(self.rows))],
                "can_undo": bool(self.history),
                **self.summary(),
            }

    # --- changing it -------------------------------------------------------------------------

    def set_label(self, index: int, label: str) -> dict[str, Any]:
        """Set row ``index``'s label (``""`` clears it) and save; remembered for :meth:`undo`."""
        with self.lock:
            previous = self.labels[index]
            self._apply(index, label)
            self.history.append((index, previous))
            return {
                "index": index,
                "label": label,
                "previous": previous,
                "can_undo": True,
                **self.summary(),
            }

    def undo(self) -> dict[str, Any] | None:
        """Give the last labelled row back the label it had before; None when nothing to undo."""
        with self.lock:
            if not self.history:
                return None
            index, previous = self.history[-1]
            undone = self.labels[index]
            self._apply(index, previous)
            self.history.pop()
            return {
                "index": index,
                "label": previous,
                "undone": undone,
                "can_undo": bool(self.history),
                **self.summary(),
            }

    def _apply(self, index: int, label: str) -> None:
        """Under the lock: change one label and save; on failure nothing changes in memory."""
        row = self.rows[index]
        old_cell, old_label = row[self.label_col], self.labels[index]
        if old_label == label:
            return
        row[self.label_col], self.labels[index] = label, label
        try:
            self._save()
        except BaseException:
            row[self.label_col], self.labels[index] = old_cell, old_label
            raise
        self.version += 1

    def _save(self) -> None:
        """Rewrite the whole file atomically, as write_for_labelling writes it."""
        if self._stat() != self._stamp:
            raise SheetChanged(
                f"{self.path} was changed on disk by something else since this page read it; "
                "the label was not saved: stop python -m filters label and start it again "
                "to label the file as it is now"
            )
        text = self.bom + "".join(
            "\t".join(tsv_cell(v) for v in row) + "\n" for row in [self.header, *self.rows]
        )
        replace_text(self.path, text)  # through a link, onto the file it points to
        self._stamp = self._stat()


# --- the server ---------------------------------------------------------------------------------


def check_loopback(host: str) -> str:
    """``host`` when it is a loopback address or ``localhost``, else a UsageError."""
    if host == "localhost":
        return host
    try:
        ok = ipaddress.ip_address(host).is_loopback
    except ValueError:
        ok = False
    if not ok:
        raise UsageError(
            f"--host {host}: the labelling page listens on a loopback address only "
            "(127.0.0.1, ::1 or localhost); from another machine, forward the port "
            "(ssh -L PORT:127.0.0.1:PORT host)"
        )
    return host


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, addr: tuple[str, int], sheet: LabelSheet) -> None:
        if ":" in addr[0]:
            self.address_family = socket.AF_INET6
        self.sheet = sheet
        super().__init__(addr, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A request that failed: logged, never printed to stderr as socketserver does.

        A browser drops connections as a matter of course (a closed tab, a speculative
        preconnect never used), so a connection the client ended is a debug line, not a
        traceback in the labeller's terminal.
        """
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError):
            log.debug("%s ended the connection (%s)", client_address[0], type(exc).__name__)
            return
        log.exception("a request from %s failed", client_address[0])


def make_server(sheet: LabelSheet, host: str = "127.0.0.1", port: int = 0) -> _Server:
    """A server for ``sheet`` on ``host:port`` (0: a free port), not yet serving."""
    check_loopback(host)
    if not 0 <= port <= 65535:
        raise UsageError(f"--port {port}: not a port number (0-65535; 0 picks a free one)")
    try:
        return _Server((host, port), sheet)
    except OSError as e:
        why = e.strerror or str(e)
        raise UsageError(
            f"--port {port}: cannot listen on {host}:{port} ({why}); "
            "pick another port or 0 for a free one"
        ) from e


def url_of(server: _Server) -> str:
    host, port = server.server_address[:2]
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "labse-label/1"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, obj: Mapping[str, Any]) -> None:
        self._send(status, json.dumps(obj).encode("utf-8"), "application/json; charset=utf-8")

    def _error(self, status: int, message: str) -> None:
        self._json(status, {"error": message})

    def _host_ok(self) -> bool:
        host = (self.headers.get("Host") or "").strip()
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        name = name.strip("[]")
        if name == "localhost":
            return True
        try:
            return ipaddress.ip_address(name).is_loopback
        except ValueError:
            return False

    def do_GET(self) -> None:
        if not self._host_ok():
            return self._error(HTTPStatus.FORBIDDEN, "only a loopback host name is served")
        path = self.path.split("?", 1)[0]
        if path in ("/", "/index.html"):
            sheet = self.server.sheet
            body = PAGE.replace("__TITLE__", html.escape(sheet.path.name)).replace(
                "__GUIDELINE__", html.escape(sheet.cfg.label_guideline)
            )
            return self._send(HTTPStatus.OK, body.encode("utf-8"), "text/html; charset=utf-8")
        if path == "/api/state":
            return self._json(HTTPStatus.OK, self.server.sheet.state())
        if path == "/api/estimate":
            return self._json(HTTPStatus.OK, self.server.sheet.estimate())
        if path == "/api/rounds":  # round two (filters.bitext.label_rounds)
            return self._json(HTTPStatus.OK, rounds_of(self.server.sheet).state())
        return self._error(HTTPStatus.NOT_FOUND, f"no such page: {path}")

    def _body(self) -> dict[str, Any] | None:
        ctype = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
        if ctype != "application/json":
            self._error(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "send application/json")
            return None
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY:
            self._error(HTTPStatus.BAD_REQUEST, "a JSON body of at most 64 KiB is expected")
            return None
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except (UnicodeDecodeError, json.JSONDecodeError):
            body = None
        if not isinstance(body, dict):
            self._error(HTTPStatus.BAD_REQUEST, "the body must be a JSON object")
            return None
        return body

    def do_POST(self) -> None:
        if not self._host_ok():
            return self._error(HTTPStatus.FORBIDDEN, "only a loopback host name is served")
        path = self.path.split("?", 1)[0]
        if path not in ("/api/label", "/api/undo", "/api/round2"):
            return self._error(HTTPStatus.NOT_FOUND, f"no such endpoint: {path}")
        body = self._body()
        if body is None:
            return None
        sheet = self.server.sheet
        if path == "/api/round2":
            return self._json(*rounds_of(sheet).answer())
        try:
            if path == "/api/undo":
                result = sheet.undo()
                if result is None:
                    return self._error(HTTPStatus.CONFLICT, "nothing to undo")
            else:
                index, label = body.get("index"), body.get("label")
                last = len(sheet.rows) - 1
                if type(index) is not int or not 0 <= index <= last:
                    return self._error(HTTPStatus.BAD_REQUEST, f"index must be 0..{last}")
                if label not in (*LABELS, ""):
                    why = f'label must be GOOD, BAD or "" (got {label!r})'
                    return self._error(HTTPStatus.BAD_REQUEST, why)
                result = sheet.set_label(index, label)
        except SheetChanged as e:
            log.error("%s", e)
            return self._error(HTTPStatus.CONFLICT, str(e))
        except OSError as e:  # the disk is full, the folder went away: say so on the page
            log.error("%s: could not save the label (%s)", sheet.path, e)
            return self._error(
                HTTPStatus.INTERNAL_SERVER_ERROR, f"could not save {sheet.path}: {e}"
            )
        log.debug("%s row %d: %r", path, result["index"], result["label"])
        return self._json(HTTPStatus.OK, result)


def summary_lines(sheet: LabelSheet) -> list[str]:
    """Labelled rows per language pair, for the log when the server stops."""
    p = sheet.progress()
    lines = [f"{sheet.path}: {p['labelled']} of {p['total']} pairs labelled"]
    for c in sheet.pair_counts():
        lines.append(f"  {c['pair']}: {c[GOOD]} GOOD, {c[BAD]} BAD, {c['unlabelled']} unlabelled")
    return lines


# --- the page -----------------------------------------------------------------------------------
# Every value from the file is put in the page with textContent, never as HTML.

PAGE = r"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Label: __TITLE__</title>
<style>
  :root { --good: #1a7f37; --bad: #cf222e; --muted: #656d76; --line: #d0d7de; }
  * { box-sizing: border-box; }
  body { font: 15px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 1100px;
         padding: 12px 20px 40px; color: #1f2328; }
  h1 { font-size: 18px; margin: 4px 0 10px; }
  #bar { height: 14px; background: #eaeef2; border-radius: 7px; overflow: hidden; }
  #fill { height: 100%; width: 0; background: var(--good); transition: width .2s; }
  #progress-text { color: var(--muted); margin: 4px 0 12px; }
  #card { border: 1px solid var(--line); border-radius: 8px; padding: 12px 16px; }
  #meta { display: flex; gap: 16px; flex-wrap: wrap; align-items: center; }
  #current-label { font-weight: 700; padding: 2px 10px; border-radius: 10px;
                   background: #eaeef2; }
  #current-label.GOOD { background: var(--good); color: #fff; }
  #current-label.BAD { background: var(--bad); color: #fff; }
  .sides { display: grid; grid-template-columns: 1fr 1fr; gap: 16px; margin-top: 10px; }
  .side h2 { font-size: 13px; color: var(--muted); margin: 0 0 4px; font-weight: 600; }
  .text { font-size: 19px; white-space: pre-wrap; overflow-wrap: anywhere;
          background: #f6f8fa; border-radius: 6px; padding: 10px 12px; min-height: 3em; }
  dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 10px; margin: 6px 0 0;
       font-size: 13px; color: var(--muted); }
  dt { font-weight: 600; } dd { margin: 0; overflow-wrap: anywhere; }
  #other { margin-top: 8px; font-size: 13px; color: var(--muted); }
  #buttons { margin: 12px 0; display: flex; gap: 8px; flex-wrap: wrap; }
  button { font: inherit; padding: 6px 14px; border-radius: 6px; border: 1px solid var(--line);
           background: #f6f8fa; cursor: pointer; }
  button kbd { font-size: 12px; color: var(--muted); }
  #btn-good { border-color: var(--good); color: var(--good); }
  #btn-bad { border-color: var(--bad); color: var(--bad); }
  #message { min-height: 1.5em; }
  #message.error { color: var(--bad); font-weight: 600; }
  table { border-collapse: collapse; margin-top: 8px; }
  th, td { border: 1px solid var(--line); padding: 3px 10px; text-align: right; }
  th:first-child, td:first-child { text-align: left; }
  #keys { color: var(--muted); font-size: 13px; }
  #guideline { background: #fff8c5; border: 1px solid #d4a72c; border-radius: 6px;
               padding: 6px 12px; margin: 0 0 10px; }
  #status { margin: 0 0 12px; display: grid; gap: 4px; }
  #enough.ok { color: var(--good); font-weight: 600; }
  #enough.no { color: var(--bad); font-weight: 600; }
  .prov { font-size: 13px; margin-top: 6px; overflow-wrap: anywhere; }
  .prov .where { color: var(--muted); }
  details { font-size: 13px; color: var(--muted); }
  td.yes { color: var(--good); font-weight: 600; } td.no { color: var(--bad); }
</style>
</head>
<body>
<h1>Label mined pairs: <span id="file"></span></h1>
<p id="guideline">__GUIDELINE__</p>
<div id="bar"><div id="fill"></div></div>
<div id="progress-text">loading...</div>
<div id="status"><div id="enough"></div><div id="estimate"></div></div>
<div id="card">
  <div id="meta">
    <span id="position"></span><span id="langs"></span><span id="margin"></span>
    <span id="current-label"></span>
  </div>
  <div class="sides">
    <div class="side"><h2 id="src-head">source</h2><div class="text" id="src" dir="auto"></div>
      <div class="prov"><a id="src-link" target="_blank" rel="noopener noreferrer"></a>
        <span class="where" id="src-where"></span></div>
      <details><summary>all fields</summary><dl id="src-prov"></dl></details></div>
    <div class="side"><h2 id="trg-head">target</h2><div class="text" id="trg" dir="auto"></div>
      <div class="prov"><a id="trg-link" target="_blank" rel="noopener noreferrer"></a>
        <span class="where" id="trg-where"></span></div>
      <details><summary>all fields</summary><dl id="trg-prov"></dl></details></div>
  </div>
  <div id="other"></div>
</div>
<div id="buttons">
  <button id="btn-good" data-action="good">GOOD <kbd>g</kbd></button>
  <button id="btn-bad" data-action="bad">BAD <kbd>b</kbd></button>
  <button id="btn-skip" data-action="skip">skip <kbd>s / space</kbd></button>
  <button id="btn-undo" data-action="undo">undo <kbd>u</kbd></button>
  <button id="btn-prev" data-action="prev">&larr; previous</button>
  <button id="btn-next" data-action="next">next &rarr;</button>
</div>
<div id="message"></div>
<p id="keys">Keys: <b>g</b> GOOD, <b>b</b> BAD, <b>s</b> or <b>space</b> skip to the next
unlabelled pair, <b>u</b> undo the last label, <b>&larr; &rarr;</b> previous / next pair.
Every label is saved to the file at once; closing this tab loses nothing.</p>
<h2 style="font-size:15px">Per language pair</h2>
<table id="summary"><thead><tr><th>pair</th><th>GOOD</th><th>BAD</th><th>unlabelled</th>
<th>total</th><th title="its own labels pass combine's check">enough</th></tr></thead>
<tbody></tbody></table>
<h2 style="font-size:15px">Per language pair and margin stratum</h2>
<table id="strata"><thead><tr><th>pair</th><th>stratum</th><th>margins</th><th>GOOD</th>
<th>BAD</th><th>unlabelled</th><th>total</th></tr></thead><tbody></tbody></table>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
let rows = [], cur = 0, progress = {labelled: 0, total: 0}, pairs = [], canUndo = false;
let strata = [], enough = null, version = 0, estimating = false;
let queue = Promise.resolve();

async function api(path, body) {
  const opts = body === undefined ? {} : {method: "POST", body: JSON.stringify(body),
    headers: {"Content-Type": "application/json"}};
  let r;
  try { r = await fetch(path, opts); }
  catch (e) { throw new Error("the labelling server is not running (nothing was saved)"); }
  let data = {};
  try { data = await r.json(); } catch (e) { data = {error: r.statusText}; }
  if (!r.ok) throw new Error(data.error || r.statusText);
  return data;
}

function show(text, error) {
  const m = $("message");
  m.textContent = text || "";
  m.className = error ? "error" : "";
}

function take(d) {
  if (d.progress) progress = d.progress;
  if (d.pairs) pairs = d.pairs;
  if (d.strata) strata = d.strata;
  if (d.enough) enough = d.enough;
  if (d.version !== undefined) version = d.version;
  if (d.can_undo !== undefined) canUndo = d.can_undo;
}

const pct = (x) => (x === null || x === undefined) ? "?" : (100 * x).toFixed(1) + "%";

function renderEstimate(e) {
  const el = $("estimate");
  if (!e.ok) { el.textContent = "Estimate: " + e.why; return; }
  const [lo, hi] = e.precision_ci || [null, null];
  const thr = e.threshold === null ? "?" : e.threshold.toPrecision(3);
  el.textContent = `Estimated GOOD at the threshold: ${pct(e.precision)} `
    + `[${pct(lo)}, ${pct(hi)}] (${Math.round(100 * e.confidence)}% interval), `
    + `combined score >= ${thr}, on ${e.labelled} labels; target ${pct(e.target)} `
    + (e.target_reached ? "reached" : "NOT reached (the best reachable threshold)");
}

async function refreshEstimate() {
  if (estimating) return;  // one at a time; the loop fetches again if labels came meanwhile
  estimating = true;
  try {
    for (;;) {
      const e = await api("/api/estimate");
      renderEstimate(e);
      document.body.dataset.estimateVersion = e.version;
      if (e.version >= version) break;
    }
  } catch (err) {
    $("estimate").textContent = "Estimate: " + err.message;
  } finally {
    estimating = false;
  }
}

function renderEnough() {
  const el = $("enough");
  if (!enough) return;
  el.className = enough.ok ? "ok" : "no";
  el.textContent = enough.ok
    ? `Enough to continue: combine accepts these ${enough.labelled} labels `
      + `(${enough.GOOD} GOOD, ${enough.BAD} BAD)`
    : "Not enough to continue yet: " + enough.why;
  if (!enough.matched) el.textContent += " (labels in this file; not matched to the mined pairs)";
  document.body.dataset.enough = enough.ok ? "1" : "0";
}

function fillTables() {
  const tb = $("summary").tBodies[0];
  tb.replaceChildren();
  for (const p of pairs) {
    const tr = tb.insertRow();
    for (const v of [p.pair, p.GOOD, p.BAD, p.unlabelled, p.total])
      tr.insertCell().textContent = v;
    const verdict = enough && enough.pairs[p.pair], td = tr.insertCell();
    td.textContent = verdict ? (verdict.ok ? "yes" : "no") : "";
    td.className = verdict ? (verdict.ok ? "yes" : "no") : "";
    td.title = verdict && verdict.why ? verdict.why : "";
  }
  const sb = $("strata").tBodies[0];
  sb.replaceChildren();
  for (const s of strata) {
    const tr = sb.insertRow();
    for (const v of [s.pair, s.stratum, s.margins, s.GOOD, s.BAD, s.unlabelled, s.total])
      tr.insertCell().textContent = v;
  }
}

function fillSource(side, view) {
  const a = $(side + "-link");
  const ok = view.url && /^https?:\/\//i.test(view.url);
  a.textContent = ok ? (view.text || view.url) : (view.text || "");
  if (ok) a.href = view.url; else a.removeAttribute("href");
  $(side + "-where").textContent = view.locator ? " \u00b7 " + view.locator : "";
}

function nextUnlabelled(from) {
  for (let k = 1; k < rows.length; k++) {
    const i = (from + k) % rows.length;
    if (!rows[i].label) return i;
  }
  return -1;
}

function fillDl(dl, obj) {
  dl.replaceChildren();
  for (const [k, v] of Object.entries(obj)) {
    const dt = document.createElement("dt"), dd = document.createElement("dd");
    dt.textContent = k; dd.textContent = v === "" ? "-" : v;
    dl.append(dt, dd);
  }
}

function render() {
  const done = progress.labelled, total = progress.total;
  $("fill").style.width = (total ? 100 * done / total : 0) + "%";
  $("progress-text").textContent = `${done} / ${total} labelled`
    + (total && done === total ? " - all done" : "");
  document.body.dataset.labelled = done;
  renderEnough();
  fillTables();
  $("btn-undo").disabled = !canUndo;
  if (!rows.length) return;
  const r = rows[cur];
  document.body.dataset.index = cur;
  $("position").textContent = `pair ${cur + 1} of ${rows.length}`;
  $("langs").textContent = r.src_lang || r.trg_lang ? `${r.src_lang} \u2192 ${r.trg_lang}` : "";
  $("margin").textContent = r.margin_text === "" ? "" : "margin " + r.margin_text;
  const lab = $("current-label");
  lab.textContent = r.label || "unlabelled";
  lab.className = r.label;
  $("src").textContent = r.src; $("src").lang = r.src_lang;
  $("trg").textContent = r.trg; $("trg").lang = r.trg_lang;
  $("src-head").textContent = "source" + (r.src_lang ? ` (${r.src_lang})` : "");
  $("trg-head").textContent = "target" + (r.trg_lang ? ` (${r.trg_lang})` : "");
  fillSource("src", r.src_source);
  fillSource("trg", r.trg_source);
  fillDl($("src-prov"), r.src_provenance);
  fillDl($("trg-prov"), r.trg_provenance);
  $("other").textContent = Object.entries(r.other).map(([k, v]) => `${k}: ${v}`).join(" \u00b7 ");
}

async function setLabel(value) {
  const i = cur;
  const d = await api("/api/label", {index: i, label: value});
  rows[i].label = d.label;
  take(d);
  const j = nextUnlabelled(i);
  cur = j >= 0 ? j : Math.min(i + 1, rows.length - 1);
  show(j >= 0 || rows[i].label === "" ? "" : "All pairs are labelled (saved).");
  render();
  refreshEstimate();
}

const actions = {
  good: () => setLabel("GOOD"),
  bad: () => setLabel("BAD"),
  skip: async () => {
    const j = nextUnlabelled(cur);
    cur = j >= 0 ? j : Math.min(cur + 1, rows.length - 1);
    show(""); render();
  },
  undo: async () => {
    const d = await api("/api/undo", {});
    rows[d.index].label = d.label;
    take(d);
    cur = d.index;
    show(`undone: pair ${d.index + 1} is ${d.label || "unlabelled"} again`);
    render();
    refreshEstimate();
  },
  prev: async () => { cur = Math.max(cur - 1, 0); show(""); render(); },
  next: async () => { cur = Math.min(cur + 1, rows.length - 1); show(""); render(); },
};

function run(name) {
  queue = queue.then(actions[name]).catch((e) => show(e.message, true));
}

const KEYS = {g: "good", b: "bad", s: "skip", " ": "skip", u: "undo", ArrowLeft: "prev",
              ArrowUp: "prev", ArrowRight: "next", ArrowDown: "next"};
document.addEventListener("keydown", (e) => {
  if (e.ctrlKey || e.metaKey || e.altKey) return;
  const name = KEYS[e.key.length === 1 ? e.key.toLowerCase() : e.key];
  if (!name) return;
  e.preventDefault();
  run(name);
});
for (const b of document.querySelectorAll("button[data-action]")) {
  b.addEventListener("mousedown", (e) => e.preventDefault());  // keep the focus off buttons
  b.addEventListener("click", () => run(b.dataset.action));
}

queue = queue.then(async () => {
  const s = await api("/api/state");
  rows = s.rows; take(s);
  $("file").textContent = s.file;
  const first = rows.findIndex((r) => !r.label);
  cur = first >= 0 ? first : 0;
  render();
  document.body.dataset.ready = "1";
  refreshEstimate();
}).catch((e) => show(e.message, true));
</script>
</body>
</html>
""".replace("</body>", PAGE_ROUNDS + "</body>")  # round two's part (label_rounds)
