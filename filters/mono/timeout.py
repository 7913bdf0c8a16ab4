"""Run a function in a helper process with a time limit per call.

Some wikitext makes mwparserfromhell's C tokenizer run for minutes. Signals cannot interrupt it
inside a Beam worker (bundles run on non-main threads), so the parse runs in one long-lived
helper process per worker; a call that overruns kills and restarts the helper and reports a
timeout instead of stalling the pipeline.

The helper is a plain ``subprocess`` (``python -c``, calling :func:`serve_fds`), not a
``multiprocessing.Process``: workers started the stock way on managed clusters (``dask worker``,
whose worker processes are daemonic) may not start multiprocessing children, but they may start
subprocesses. Requests and answers are pickled over two private pipes (not stdin/stdout, which
the parsed function may print to).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

log = logging.getLogger(__name__)
_HELPER = f"import sys; from {__name__} import serve_fds; serve_fds(*sys.argv[1:3])"


def _serve(conn_in: Connection, conn_out: Connection) -> None:
    # The function arrives pickled by reference: unpickling imports its module here, before
    # "ready", so imports never count against the per-call limit.
    try:
        fn = conn_in.recv()
    except Exception as e:
        conn_out.send(("failed", f"{type(e).__name__}: {e}"))
        return
    conn_out.send(("ready", None))
    while True:
        try:
            arg = conn_in.recv()
        except EOFError:
            return
        try:
            conn_out.send(("ok", fn(arg)))
        except Exception as e:  # the caller decides what an error means
            conn_out.send(("error", f"{type(e).__name__}: {e}"))


class TimeLimitedWorker:
    """``worker(arg)`` returns ("ok", result) | ("error", message) | ("timeout", None).

    ``fn`` must be importable at module level (it is pickled by reference and imported by the
    helper, which gets this process's ``sys.path``). ``timeout_s <= 0`` runs in-process.
    """

    def __init__(self, fn: Callable[[Any], Any], timeout_s: float) -> None:
        self.fn = fn
        self.timeout_s = timeout_s
        self._proc: subprocess.Popen | None = None
        self._send: Connection | None = None
        self._recv: Connection | None = None
        self.restarts = 0

    startup_timeout_s = 120.0

    def start(self) -> None:
        """Start the helper now (otherwise it starts on the first call)."""
        if self.timeout_s > 0 and not self._alive():
            self._start()

    def _alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _start(self) -> None:
        req_r, req_w = os.pipe()
        res_r, res_w = os.pipe()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        try:
            self._proc = subprocess.Popen(
                # -c, not -m: the helper is not a command of its own (no main guard here).
                [sys.executable, "-c", _HELPER, str(req_r), str(res_w)],
                pass_fds=(req_r, res_w),
                stdin=subprocess.DEVNULL,
                env=env,
            )
        finally:
            os.close(req_r)
            os.close(res_w)
        self._send = Connection(req_w, readable=False)
        self._recv = Connection(res_r, writable=False)
        try:
            self._send.send(self.fn)
            # Interpreter start-up and imports can take seconds on a busy machine; they must not
            # count against the per-call limit.
            ready = self._recv.poll(self.startup_timeout_s)
            status, detail = self._recv.recv() if ready else ("failed", "no answer")
        except (EOFError, BrokenPipeError, OSError) as e:
            status, detail = "failed", f"helper exited: {e}"
        if status != "ready":
            self.close()
            raise RuntimeError(
                f"time-limited helper did not start in {self.startup_timeout_s}s ({detail})"
            )

    def __call__(self, arg: Any) -> tuple[str, Any]:
        if self.timeout_s <= 0:
            try:
                return "ok", self.fn(arg)
            except Exception as e:
                return "error", f"{type(e).__name__}: {e}"
        if not self._alive():
            self.close()
            self._start()
        try:
            self._send.send(arg)
            if self._recv.poll(self.timeout_s):
                return self._recv.recv()
        except (EOFError, BrokenPipeError, OSError) as e:  # the helper died (e.g. out of memory)
            self.close()
            return "error", f"helper died: {e}"
        self.close()
        self.restarts += 1
        return "timeout", None

    def close(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                log.warning("time-limited helper %d did not exit after kill", self._proc.pid)
        for conn in (self._send, self._recv):
            if conn is not None:
                conn.close()
        self._proc = self._send = self._recv = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def serve_fds(fd_in: str, fd_out: str) -> None:
    """The helper's body: serve on the two inherited pipe ends (file descriptor numbers)."""
    _serve(Connection(int(fd_in), writable=False), Connection(int(fd_out), readable=False))
