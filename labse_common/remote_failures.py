"""Which :class:`~labse_common.errors.RemoteFailure` to report, found behind whatever Beam raised.

An object store that fails mid-run reaches the caller wrapped: per path in Beam's
``BeamIOError``, as a worker process's traceback text in a ``RuntimeError``, or replaced by the
failure of a clean-up that met the same dead server. The command foundation
(:mod:`labse_common.command`) and :mod:`labse_common.filesystems` both unwrap it here; this
module imports nothing but the errors, so it sits below every object-store module.
"""

from __future__ import annotations

import re

from labse_common.errors import RemoteFailure

#: How a Beam worker's traceback text names a failure (a worker process sends its error back
#: as text in a RuntimeError).
_WORKER_FAILURE = re.compile(
    r"labse_common\.remote_errors\.S3Failure: (.+?)(?: \[while running [^\]]*\])?\s*$", re.MULTILINE
)


def failure_in(e: BaseException | None, depth: int = 0) -> RemoteFailure | None:
    """The RemoteFailure behind ``e``: ``e`` itself, one inside a Beam ``BeamIOError``'s
    per-path details (Beam's filesystem wraps each path's error), its explicit cause, or, for
    the RuntimeError of a Beam job whose worker process failed, the failure its traceback text
    names."""
    if e is None or depth > 8:
        return None
    if isinstance(e, RemoteFailure):
        return first_failure(e)
    details = getattr(e, "exception_details", None)
    if isinstance(details, dict):
        for inner in details.values():
            found = failure_in(inner if isinstance(inner, BaseException) else None, depth + 1)
            if found is not None:
                return found
    if isinstance(e, RuntimeError):
        lines = _WORKER_FAILURE.findall(str(e))
        if lines:
            return RemoteFailure(lines[-1].strip())
    return failure_in(e.__cause__, depth + 1)


def first_failure(e: RemoteFailure) -> RemoteFailure:
    """The failure that started it: a clean-up after a failed write (deleting the temporary
    files, releasing the claim) meets the same dead server and fails too, and its failure
    replaces the first one; the first names the operation that actually broke. Python keeps
    the first in the ``__context__`` chain (through Beam's and botocore's own wrappers)."""
    first: RemoteFailure = e
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen and len(seen) < 64:
        seen.add(id(cur))
        if isinstance(cur, RemoteFailure):
            first = cur
        cur = cur.__context__
    return first
