"""A local web page where a person labels a sample of mined pairs GOOD or BAD.

``python -m filters label FILE`` (:mod:`filters.bitext.cli_label`) serves it; this module is the
library:

* :class:`~filters.bitext.label_store.LabelSheet` (:mod:`filters.bitext.label_store`): the
  labelling TSV in memory with every row, each label saved at once, atomically;
* :func:`make_server`: a ``ThreadingHTTPServer`` on a loopback address serving one
  self-contained page (:mod:`filters.bitext.label_page_html`) and a small JSON API:

  - ``GET /api/state``: every row (index, src, trg, src_lang, trg_lang, margin, label, the
    provenance of each side and the other columns), the progress and the counts per language
    pair, the guideline;
  - ``POST /api/label`` ``{"index": i, "label": "GOOD" | "BAD" | ""}``: set (or clear) a label;
  - ``POST /api/undo``: restore the label the last labelled row had before, and say which row;
  - ``GET /api/estimate``: the GOOD share ``combine`` would estimate at its threshold, with its
    interval, on the labels as they are now (:class:`~filters.bitext.label_view.LabelJudge`:
    ``combine``'s own code; needs the mined pairs).

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
import socket
import sys
from collections.abc import Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from filters.bitext.calibrate import BAD, GOOD
from filters.bitext.label_page_html import PAGE
from filters.bitext.label_rounds import rounds_of
from filters.bitext.label_store import LabelSheet, SheetChanged
from labse_common.errors import UsageError

log = logging.getLogger("filters.bitext.label_page")

LABELS = (GOOD, BAD)
MAX_BODY = 64 * 1024


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
