"""The project's own errors: every command reports them as one line with exit status 2.

Anything else (a bug in this code, numpy or pyarrow) is not caught by the command foundation
(:mod:`labse_common.cli`): it ends with a traceback and exit status 1, so a real defect never
looks like a user mistake.
"""

from __future__ import annotations

import os


class UsageError(Exception):
    """A wrong path, argument or configuration value: reported clearly, exit status 2.

    ``labse_common.config.ConfigError``, :class:`InputError`, :class:`RemoteError` and
    ``labse_common.output_dir.OutputError`` are all UsageErrors, so one ``except UsageError``
    in the command foundation catches every error the user can fix.
    """


class InputError(UsageError):
    """User data that cannot be used: damaged, truncated, empty, the wrong shape or encoding.

    The message names the file (and the flag when known), e.g.
    ``--input /data/pairs.parquet: damaged Parquet (Corrupt snappy compressed data)``.
    """

    def __init__(self, path: str | os.PathLike | None, problem: str, flag: str | None = None):
        self.path = None if path is None else os.fspath(path)
        self.problem = problem
        self.flag = flag
        where = " ".join(x for x in (flag, self.path) if x)
        super().__init__(f"{where}: {problem}" if where else problem)


class RemoteError(UsageError):
    """An object-store path that cannot be used: no credentials, no endpoint, no bucket."""


class RemoteFailure(RemoteError):
    """An object store that failed during the work, after the start-up check passed: it stopped
    answering, closed the connection, refused a request or answered something that is not S3.

    One line naming the operation, the path and the endpoint, e.g. ``PutObject
    s3://b/out/x.npy: S3 endpoint http://10.0.0.5:9000 did not answer within 30 s (3
    attempts)``. ``code`` is the HTTP status when the server answered one (else None).
    Keyword fields are optional so the error pickles (a Beam worker sends it back by its
    message).
    """

    def __init__(
        self,
        message: str,
        *,
        operation: str | None = None,
        path: str | None = None,
        endpoint: str | None = None,
        code: int | None = None,
    ) -> None:
        super().__init__(message)
        self.operation = operation
        self.path = path
        self.endpoint = endpoint
        self.code = code
