"""The limits of every S3 request, set in the environment (so Beam's local workers inherit them).

* ``LABSE_S3_CONNECT_TIMEOUT``: seconds to open a connection (default 5);
* ``LABSE_S3_READ_TIMEOUT``: seconds to wait for an answer, or to send one chunk (default 30);
* ``LABSE_S3_MAX_ATTEMPTS``: attempts per request, first included (default 3; botocore's
  "standard" retries of timeouts, dropped connections, 5xx and throttling).

The bottom of the object-store modules: the client builder (:mod:`labse_common.s3_client`), the
failure lines (:mod:`labse_common.remote_errors`) and the start-up check
(:mod:`labse_common.remote`) all read the limits here, so none of them imports another for them.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from labse_common.errors import UsageError

CONNECT_TIMEOUT_ENV = "LABSE_S3_CONNECT_TIMEOUT"
READ_TIMEOUT_ENV = "LABSE_S3_READ_TIMEOUT"
MAX_ATTEMPTS_ENV = "LABSE_S3_MAX_ATTEMPTS"
DEFAULT_CONNECT_TIMEOUT_S = 5.0
DEFAULT_READ_TIMEOUT_S = 30.0
DEFAULT_MAX_ATTEMPTS = 3
LIMIT_ENVS = (CONNECT_TIMEOUT_ENV, READ_TIMEOUT_ENV, MAX_ATTEMPTS_ENV)


@dataclass(frozen=True)
class S3Limits:
    """Bounds of one S3 request: the worst case of a silent server is about
    ``attempts * (connect_s + read_s)`` plus botocore's short back-off."""

    connect_s: float
    read_s: float
    attempts: int

    @property
    def bound_s(self) -> float:
        """The deadline of one call, all its attempts together (labse_common.s3_client)."""
        return self.attempts * (self.connect_s + self.read_s)


def _env_number(name: str, default: float, integer: bool = False) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw, 10) if integer else float(raw)
    except ValueError:
        value = math.nan
    top = 20 if integer else 3600.0  # beyond that a silent server is a hang again
    if not (math.isfinite(value) and 0 < value <= top):
        kind = "a whole number of attempts" if integer else "seconds"
        raise UsageError(f"{name}={raw!r}: not {kind} > 0 and <= {top:g}")
    return value


def s3_limits() -> S3Limits:
    """The limits of every S3 request, from the environment (module docstring); a bad value is
    a UsageError naming the variable."""
    return S3Limits(
        _env_number(CONNECT_TIMEOUT_ENV, DEFAULT_CONNECT_TIMEOUT_S),
        _env_number(READ_TIMEOUT_ENV, DEFAULT_READ_TIMEOUT_S),
        int(_env_number(MAX_ATTEMPTS_ENV, DEFAULT_MAX_ATTEMPTS, integer=True)),
    )
