"""The edges of every command: its ``--log-level`` flag and the one way it exits.

One error mapping, in :func:`run_main`, for every command:

* the project's own errors (:class:`~labse_common.errors.UsageError` and its kinds: config,
  input data, remote store, output claim) and a missing/unreadable file the user named → one
  line on stderr naming the file or flag, exit status 2;
* Ctrl-C → exit status 130;
* anything else (a bug here, in numpy or pyarrow) → not caught: a traceback and exit status 1.
  Nothing catches bare ``ValueError``: a library bug must not look like a user mistake.

Every ``if __name__ == "__main__":`` block is ``exit_with(main)``, where ``main`` returns what
:func:`run_main` returns.

This module sits below :mod:`labse_common.cli` (the common flags and the typed config) and
:mod:`labse_common.config` (whose own command, ``python -m labse_common.config``, exits the same
way), so neither of those two imports the other back. :mod:`labse_common.cli` re-exports all of
it: commands import it from there.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable

from labse_common.errors import UsageError
from labse_common.filesystems import is_remote

EXIT_USAGE = 2

#: The errors a CLI reports in one line with exit status 2. The OSErrors count only when they
#: name a file (``exc.filename``): a path the user gave that is missing, a folder, or unreadable.
USAGE_ERRORS: tuple[type[BaseException], ...] = (
    UsageError,  # ConfigError, InputError, RemoteError, OutputError are kinds of it
    FileNotFoundError,
    NotADirectoryError,
    IsADirectoryError,
    PermissionError,
)
EXIT_INTERRUPTED = 130
#: ``pipelines.run``: the run waits for a person to label the sample of mined pairs (not a failure).
EXIT_NEEDS_LABELS = 3
#: ... and how the one line that names the file to label begins.
LABELS_NEEDED = "labels needed:"


# --- flags ---------------------------------------------------------------------------------


def add_log_level_option(parser: argparse.ArgumentParser, subcommand: bool = False) -> None:
    """``--log-level``; on a subcommand too, without overwriting the value given before it."""
    parser.add_argument(
        "--log-level",
        metavar="LEVEL",
        default=argparse.SUPPRESS if subcommand else None,
        type=_log_level,
        help="DEBUG, INFO (default), WARNING, ERROR",
    )


def _log_level(value: str) -> str:
    from labse_common.logs import LEVELS

    if value.upper() not in LEVELS:
        raise argparse.ArgumentTypeError(f"not one of {', '.join(LEVELS)}")
    return value.upper()


# --- the one error path --------------------------------------------------------------------


def one_line(exc: BaseException) -> str:
    """The error's message on one line (YAML errors span several)."""
    msg = " ".join(str(exc).split())
    if isinstance(exc, OSError) and exc.filename and not isinstance(exc, UsageError):
        reason = exc.strerror or type(exc).__name__
        msg = f"{exc.filename}: {reason}"
    return msg or type(exc).__name__


def usage_error(exc: BaseException | str, logger: logging.Logger | str | None = None) -> int:
    """Report ``exc`` as one error line; the exit status 2, for ``except USAGE_ERRORS`` blocks."""
    lg = logging.getLogger(logger) if isinstance(logger, str) or logger is None else logger
    lg.error("%s", one_line(exc))
    return EXIT_USAGE


def is_usage_error(exc: BaseException) -> bool:
    """True for the errors reported in one line with exit status 2 (see the module docstring)."""
    if isinstance(exc, UsageError):
        return True
    return isinstance(exc, USAGE_ERRORS) and bool(getattr(exc, "filename", None))


def run_main(
    body: Callable[[], int | None],
    logger: logging.Logger | str | None = None,
    args: argparse.Namespace | None = None,
    check_remote: bool = True,
) -> int:
    """Run a CLI body under the one error mapping (module docstring).

    ``args``: the parsed arguments; their ``s3://``/``gs://`` values are checked before the body
    runs (``check_remote=False`` for Beam jobs, which check once their options are parsed)."""
    try:
        if args is not None:
            refuse_inputs_inside_output(args)
        if args is not None and check_remote:
            from labse_common.remote import check_paths, remote_paths

            check_paths(remote_paths(vars(args).values()))
        return int(body() or 0)
    except KeyboardInterrupt:
        logging.getLogger(logger if isinstance(logger, str) else None).error("interrupted")
        return EXIT_INTERRUPTED
    except USAGE_ERRORS as e:
        if not is_usage_error(e):
            raise
        from labse_common.errors import RemoteFailure

        if isinstance(e, RemoteFailure):  # not the clean-up's failure on the same dead server
            from labse_common.remote_failures import first_failure

            e = first_failure(e)
        return usage_error(e, logger)
    except (OSError, RuntimeError) as e:
        # Beam wraps an object store's failure mid-run (labse_common.remote_errors): per path in
        # a BeamIOError, as a worker's traceback text in a RuntimeError. The user's to fix: one
        # line like any RemoteError; anything else stays a traceback.
        from labse_common.remote_failures import failure_in

        found = failure_in(e)
        if found is None:
            raise
        return usage_error(found, logger)


def refuse_inputs_inside_output(args: argparse.Namespace) -> None:
    """With ``--overwrite`` a command replaces its whole ``--output`` folder at the end, so an
    input inside it (``--pairs X/p.tsv --output X``) would be deleted by the command that reads
    it. Every existing local path among the arguments is checked, once, for every command."""
    output, overwrite = getattr(args, "output", None), getattr(args, "overwrite", False)
    if (
        not (overwrite and isinstance(output, str))
        or is_remote(output)
        or not os.path.isdir(output)
    ):
        return
    out = os.path.realpath(output)
    for name, value in vars(args).items():
        if name == "output":
            continue
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if not isinstance(v, (str, os.PathLike)) or is_remote(v) or not os.path.exists(v):
                continue
            real = os.path.realpath(v)
            if real == out or real.startswith(out + os.sep):
                flag = "--" + name.replace("_", "-")
                raise UsageError(
                    f"{flag} {v} is inside --output {output}: --overwrite would delete "
                    "it while the command reads it; write the output elsewhere"
                )


def exit_with(main: Callable[[], int | None]) -> None:
    """``if __name__ == "__main__": exit_with(main)``: the process exits with the status
    ``main`` returns (``main`` maps errors to statuses through :func:`run_main`)."""
    sys.exit(int(main() or 0))
