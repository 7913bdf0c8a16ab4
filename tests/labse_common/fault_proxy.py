"""An HTTP proxy on 127.0.0.1 in front of the loopback S3 server that misbehaves on demand.

It forwards every request to the real server until a test arms a fault for the requests a
predicate picks (e.g. the first PutObject under ``_tmp-``):

* ``stall``: read the request, never answer (the connection stays open);
* ``die``: read part of the request body, then the whole server dies: every open connection is
  cut and the port refuses new ones (a server killed mid-upload);
* ``html``: answer status 200 with a web page, as a captive portal or a web server would.

Nothing leaves the machine: the proxy listens on 127.0.0.1 and forwards to a 127.0.0.1 port.
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import socket
import threading
from collections.abc import Callable

from tests.support.quiet_http import QuietHTTPServer

#: A request the fault applies to: (method, path with query, headers) -> bool.
Picker = Callable[[str, str, "http.client.HTTPMessage"], bool]
_HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "expect",
    "proxy-connection",
    "te",
    "upgrade",
    "content-length",
}
PAGE = b"<html><body><h1>Welcome to nginx!</h1></body></html>"


class FaultProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.fault: tuple[str, Picker] | None = None
        self.hits = 0  # requests the fault applied to
        self.seen: list[str] = []  # every request, "METHOD path"
        self.release = threading.Event()  # ends stalled requests (teardown)
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # answers botocore's "Expect: 100-continue"

            def setup(self) -> None:
                super().setup()
                with proxy._lock:
                    proxy._conns.append(self.connection)

            def _any(self) -> None:
                proxy._handle(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any  # noqa: N815

            def log_message(self, *args) -> None:
                pass

        self.server = QuietHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        # A short poll: close() waits for the serve loop's next poll (0.5 s by default).
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def arm(self, kind: str, picker: Picker) -> None:
        assert kind in ("stall", "die", "html")
        self.fault = (kind, picker)

    def _picked(self, h) -> str | None:
        if self.fault is None:
            return None
        kind, picker = self.fault
        if picker(h.command, h.path, h.headers):
            self.hits += 1
            return kind
        return None

    def _handle(self, h) -> None:
        self.seen.append(f"{h.command} {h.path}")
        kind = self._picked(h)
        length = int(h.headers.get("Content-Length") or 0)
        if kind == "stall":
            self.release.wait(120)
            h.close_connection = True
            return
        if kind == "die":
            h.rfile.read(min(length, 64 << 10))  # part of the body arrived, then the end
            self.kill()
            return
        body = h.rfile.read(length) if length else b""
        if kind == "html":
            page = b"" if h.command == "HEAD" else PAGE
            h.send_response(200)
            h.send_header("Content-Type", "text/html")
            h.send_header("Content-Length", str(len(PAGE)))
            h.end_headers()
            h.wfile.write(page)
            return
        up = http.client.HTTPConnection("127.0.0.1", self.upstream_port, timeout=60)
        try:
            headers = {k: v for k, v in h.headers.items() if k.lower() not in _HOP}
            headers["Content-Length"] = str(len(body))
            up.request(h.command, h.path, body=body, headers=headers)
            r = up.getresponse()
            data = r.read()
        finally:
            up.close()
        h.send_response(r.status)
        for k, v in r.getheaders():
            if k.lower() not in _HOP:
                h.send_header(k, v)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(data)

    def kill(self) -> None:
        """The server dies: the port stops listening, every connection is cut."""
        self.server.socket.close()  # new connections are refused from now on
        with self._lock:
            for s in self._conns:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
