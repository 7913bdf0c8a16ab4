"""What the ``python -m filters`` commands share beyond :mod:`labse_common.cli`.

* :func:`add_common_options`: ``--output DIR``, ``--overwrite``, ``--config``/``--set`` for the
  command's config section and ``--log-level``, spelled as every other command spells them
  (overrides are ``--set KEY=VALUE`` only; a bare ``KEY=VALUE`` word is an unknown argument);
* :func:`section_config`: the typed section from those flags;
* :func:`run_command`: logging, then :func:`labse_common.cli.run_main` (the one error mapping),
  after checking that the output is a local folder (these commands write with local writers;
  the Beam job ``pipelines.filter_pairs`` writes to object stores) and preflighting every
  ``s3://``/``gs://`` input;
* :func:`score_values`: a score column as float64, refusing one stored as text;
* :func:`quiet_transformers` for the commands that load transformers models.

Outputs are folders claimed with :class:`labse_common.output_dir.OutputDir`: everything is
written under ``out.tmp`` and committed at the end, with one ``stats.json`` that counts what the
command wrote there (:func:`write_stats`).
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from labse_common.cli import (
    add_config_options,
    add_log_level_option,
    add_output_option,
    add_overwrite_option,
    load_config,
    run_main,
)
from labse_common.errors import InputError, UsageError
from labse_common.filesystems import is_remote
from labse_common.logs import setup_logging
from labse_common.remote import check_paths, remote_paths, require_local
from labse_common.stats import check_balanced, write_report

STATS = "stats.json"


def add_common_options(
    p: argparse.ArgumentParser, section: str, output_help: str, example: str = ""
) -> None:
    """The common flags of a filters command whose config section is ``section``."""
    add_output_option(p, output_help)
    add_overwrite_option(p)
    add_config_options(p, section, example)
    add_log_level_option(p)


def add_layout_option(p: argparse.ArgumentParser, what: str = "TSV pair files") -> None:
    p.add_argument(
        "--layout",
        choices=["auto", "src-trg", "scored"],
        default="auto",
        help=f"columns of {what}: src<TAB>trg..., margin<TAB>src<TAB>trg... (mining), "
        "or auto (decided by most of the first lines)",
    )


def section_config(section: str, args: argparse.Namespace, flags: Mapping[str, Any] | None = None):
    """The typed ``section``: ``--config``, then ``--set``, then ``flags``."""
    return load_config(section, args, flags)


def positive(value: int, flag: str) -> int:
    if value < 1:
        raise UsageError(f"{flag} must be >= 1 (got {value})")
    return value


def local_input(path: str | None, flag: str, what: str = "a local folder") -> None:
    """For inputs only read from local disk (model folders): one clear line for a URL."""
    if path is not None and is_remote(path):
        raise UsageError(f"{flag} {path}: this command reads {what}; copy it to local disk first")


def run_command(
    args: argparse.Namespace,
    body: Callable[[], int | None],
    log: logging.Logger,
    command: str,
    models: bool = False,
) -> int:
    """Run a filters command body under the one error mapping (:func:`run_main`)."""
    setup_logging(getattr(args, "log_level", None))
    if models:
        quiet_transformers()

    def checked() -> int | None:
        # Before the remote preflight: "writes only locally" is the useful line for an s3://
        # --output, whatever the credentials.
        require_local(getattr(args, "output", None), "--output", f"python -m filters {command}")
        check_paths(remote_paths(vars(args).values()))
        return body()

    return run_main(checked, log, args=args, check_remote=False)


def write_stats(folder: str | os.PathLike, report: Mapping) -> None:
    """``folder/stats.json``, after checking every unit balances (an imbalance is a bug here)."""
    problems = check_balanced(report)
    if "steps" in report:
        problems += check_balanced({"counts": report["steps"]})
    if problems:
        raise RuntimeError("unbalanced counts: " + "; ".join(problems))
    write_report(os.path.join(os.fspath(folder), STATS), report)


def check_score_type(schema: pa.Schema, column: str, path: str, flag: str) -> None:
    """A score column must be numeric. Text that looks like numbers is refused rather than
    parsed: it means the file was not written by a scorer, and "nan"/"" would be read silently.
    ``calibrate`` and ``apply`` both go through here, so they accept the same files."""
    if column not in schema.names:
        raise InputError(
            path,
            f"no {column!r} column (columns: {', '.join(schema.names)}); run "
            "python -m filters cds-score first",
            flag,
        )
    check_numeric_column(
        schema, column, path, flag, "a score column must be numeric (as cds-score writes it)"
    )


def check_numeric_column(schema: pa.Schema, column: str, path: str, flag: str, why: str) -> None:
    """InputError naming the file and ``column`` when it holds anything but numbers (a column
    that is absent is the caller's business)."""
    t = schema.field(column).type
    if not (pa.types.is_floating(t) or pa.types.is_integer(t) or pa.types.is_decimal(t)):
        raise InputError(path, f"column {column!r} holds {t}, not numbers: {why}", flag)


def score_values(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A numeric score column as float64, nulls as NaN."""
    return np.asarray(column.cast(pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)


def quiet_transformers() -> None:
    """transformers' own bars on every save/load would drown ours."""
    try:
        from transformers.utils import logging as tlog

        tlog.disable_progress_bar()
        tlog.set_verbosity_error()
    except ImportError:  # pragma: no cover - transformers is a dependency
        pass
