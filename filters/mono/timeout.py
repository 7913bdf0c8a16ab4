"""Run a function in a helper process with a time limit per call.

Some wikitext makes mwparserfromhell's C tokenizer run for minutes. Signals cannot interrupt it
inside a Beam worker (bundles run on non-main threads), so the parse runs in one long-lived
helper process per worker; a call that overruns kills and restarts the helper and reports a
timeout instead of stalling the pipeline.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


def _serve(fn: Callable[[Any], Any], conn) -> None:
    conn.send(("ready", None))  # imports are done: only the call itself is timed
    while True:
        try:
            arg = conn.recv()
        except EOFError:
            return
        try:
            conn.send(("ok", fn(arg)))
        except Exception as e:  # the caller decides what an error means
            conn.send(("error", f"{type(e).__name__}: {e}"))


class TimeLimitedWorker:
    """``worker(arg)`` returns ("ok", result) | ("error", message) | ("timeout", None).

    ``fn`` must be importable at module level (the helper is started with 'spawn', which is
    safe in threaded parents such as Beam workers). ``timeout_s <= 0`` runs in-process.
    """

    def __init__(self, fn: Callable[[Any], Any], timeout_s: float) -> None:
        self.fn = fn
        self.timeout_s = timeout_s
        self._proc = None
        self._conn = None
        self.restarts = 0

    startup_timeout_s = 120.0

    def start(self) -> None:
        """Start the helper now (otherwise it starts on the first call)."""
        if self.timeout_s > 0 and (self._proc is None or not self._proc.is_alive()):
            self._start()

    def _start(self) -> None:
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(self.fn, child), daemon=True)
        self._proc.start()
        child.close()
        self._conn = parent
        # Interpreter start-up and imports can take seconds on a busy machine; they must not
        # count against the per-call limit.
        if not parent.poll(self.startup_timeout_s):
            self.close()
            raise RuntimeError(f"time-limited helper did not start in {self.startup_timeout_s}s")
        parent.recv()

    def __call__(self, arg: Any) -> tuple[str, Any]:
        if self.timeout_s <= 0:
            try:
                return "ok", self.fn(arg)
            except Exception as e:
                return "error", f"{type(e).__name__}: {e}"
        if self._proc is None or not self._proc.is_alive():
            self._start()
        try:
            self._conn.send(arg)
            if self._conn.poll(self.timeout_s):
                return self._conn.recv()
        except (EOFError, BrokenPipeError, OSError) as e:  # the helper died (e.g. out of memory)
            self.close()
            return "error", f"helper died: {e}"
        self.close()
        self.restarts += 1
        return "timeout", None

    def close(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join(timeout=5)
        if self._conn is not None:
            self._conn.close()
        self._proc = self._conn = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
