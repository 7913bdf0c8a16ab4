"""A threading HTTP server for test doubles that never prints a dropped connection to stderr.

socketserver prints the traceback of every failed request to ``sys.stderr``. A test double's
client is often killed on purpose, or closed later by the garbage collector, so that traceback
lands in whichever test runs then and breaks its "no traceback on stderr" assertions.
"""

from __future__ import annotations

import http.server
import logging
import sys
from typing import Any

log = logging.getLogger("tests.quiet_http")


class QuietHTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError):
            return
        log.exception("test server: a request from %s failed", client_address)
