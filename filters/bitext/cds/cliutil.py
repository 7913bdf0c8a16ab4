"""What the cds-train, cds-score, calibrate and apply commands share: config flags, errors."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable

from filters.bitext.calibrate import CalibrationError
from filters.bitext.pair_io import PairFileError
from labse_common.config import ConfigError, load
from labse_common.logs import setup_logging
from labse_common.sections.cds import CdsConfig

# Errors that mean "the user gave something unusable": one line on stderr and exit status 2.
USAGE_ERRORS = (ConfigError, PairFileError, CalibrationError, FileNotFoundError,
                NotADirectoryError, FileExistsError, ValueError)  # fmt: skip


def add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default="demo",
                   help="preset (demo, paper) or YAML file; its cds: section (default demo)")  # fmt: skip
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a cds: key, e.g. --set noisy_epochs=4 or --set model.d_model=64 "
                   "(repeatable)")  # fmt: skip
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="same as --set")


def load_config(args: argparse.Namespace, flags: dict | None = None) -> CdsConfig:
    return load("cds", args.config, [*args.set, *args.overrides], flags or {})


def quiet_transformers() -> None:
    """transformers' own bars on every save/load would drown ours."""
    try:
        from transformers.utils import logging as tlog

        tlog.disable_progress_bar()
        tlog.set_verbosity_error()
    except ImportError:  # pragma: no cover - transformers is a dependency
        pass


def run_cli(
    name: str,
    body: Callable[[], int],
    models: bool = False,
    errors: tuple[type[BaseException], ...] = (),
) -> int:
    """Run a ``python -m filters`` command body: usage errors (and ``errors``) are one line on
    stderr and status 2. ``models``: the command loads transformers models (their own progress
    bars are turned off)."""
    setup_logging()
    if models:
        quiet_transformers()
    try:
        return body()
    except (*USAGE_ERRORS, *errors) as e:
        print(f"error: filters {name}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"filters {name}: interrupted", file=sys.stderr)
        return 130


log = logging.getLogger(__name__)
