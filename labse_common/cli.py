"""What every command line shares: the common flags, the typed config, one error path.

Every CLI spells its common options the same way:

``--config PRESET|FILE``  a preset (demo, paper) or a YAML file; the CLI reads its own section
``--set KEY=VALUE``       override a key of that section (repeatable; ``a.b=v`` reaches nested keys)
``--output DIR``          where the results go
``--overwrite``           replace existing output (where the CLI writes a folder)
``--log-level LEVEL``     DEBUG, INFO (default), WARNING

There are no other spellings: the old ``--preset``, ``--out`` and ``--output-dir`` are usage
errors (exit 2) like any unknown flag. Explicit flags win over ``--set``, which wins over the
preset.

One error mapping, in :func:`run_main` (:mod:`labse_common.command`, re-exported here), for every
command: the project's own errors and a missing file the user named → one line, exit status 2;
Ctrl-C → 130; anything else → a traceback, exit status 1.

Before the body runs, every ``s3://``/``gs://`` value among the parsed arguments is checked
(:mod:`labse_common.remote`): missing credentials, endpoint or bucket is one line within seconds.
User data is read through :mod:`labse_common.datafiles`, which turns damage into an
:class:`~labse_common.errors.InputError` naming the file.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

# The edges every command shares live one layer down (labse_common.command), below both this
# module and labse_common.config; re-exported so that commands import them from here.
from labse_common.command import (
    EXIT_INTERRUPTED,
    EXIT_NEEDS_LABELS,
    EXIT_USAGE,
    LABELS_NEEDED,
    USAGE_ERRORS,
    add_log_level_option,
    exit_with,
    is_usage_error,
    one_line,
    refuse_inputs_inside_output,
    run_main,
    usage_error,
)
from labse_common.config import PRESETS, load
from labse_common.errors import UsageError

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_NEEDS_LABELS",
    "EXIT_USAGE",
    "LABELS_NEEDED",
    "USAGE_ERRORS",
    "UsageError",
    "CommandParser",
    "add_config_options",
    "add_log_level_option",
    "add_output_option",
    "add_overwrite_option",
    "command_parser",
    "exit_with",
    "is_usage_error",
    "load_config",
    "one_line",
    "refuse_inputs_inside_output",
    "run_main",
    "usage_error",
]

T = TypeVar("T")


# --- flags ---------------------------------------------------------------------------------


class CommandParser(argparse.ArgumentParser):
    """The parser of every command: shortened flags refused, help laid out one way.

    argparse takes any unambiguous prefix of a flag, so a removed ``--out`` would still parse as
    ``--output``: a command's flags are spelled only one way, so prefixes are unknown flags
    (exit 2). Sub-commands (``add_subparsers().add_parser``) are built with this class too, so
    they inherit the rule."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)


def command_parser(
    prog: str,
    summary: str,
    details: str = "",
    examples: Iterable[str] = (),
) -> CommandParser:
    """The one parser builder: ``--help`` says what the command does (``summary``, then
    ``details``), then its options, then ``examples`` (command lines, one per entry)."""
    description = summary.strip() + (f"\n\n{details.strip()}" if details.strip() else "")
    lines = [e.strip() for e in examples if e.strip()]
    epilog = "examples:\n" + "\n".join(f"  {e}" for e in lines) if lines else None
    return CommandParser(prog=prog, description=description, epilog=epilog)


def _no_abbreviations(parser: argparse.ArgumentParser) -> None:
    # argparse takes any unambiguous prefix of a flag: the removed ``--out`` would still parse
    # as ``--output``. A command's flags are spelled only one way, so prefixes are unknown flags.
    parser.allow_abbrev = False


def add_config_options(
    parser: argparse.ArgumentParser, section: str, example: str = "", default: str = "demo"
) -> None:
    """``--config`` and repeatable ``--set KEY=VALUE`` for ``section``."""
    _no_abbreviations(parser)
    parser.add_argument(
        "--config",
        dest="config",
        default=default,
        metavar="PRESET|FILE",
        help=f"preset ({', '.join(PRESETS)}) or YAML file whose `{section}` section gives the "
        f"defaults (default: {default})",
    )
    eg = f", e.g. --set {example}" if example else ""
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="set",
        help=f"override a `{section}` config key (repeatable; values are YAML){eg}; "
        "explicit flags win over --set",
    )


def add_output_option(
    parser: argparse.ArgumentParser,
    help: str,
    required: bool = True,
    metavar: str = "DIR",
) -> argparse.Action:
    """``--output``, the one spelling of where a command writes."""
    _no_abbreviations(parser)
    return parser.add_argument(
        "--output", dest="output", required=required, metavar=metavar, help=help
    )


def add_overwrite_option(parser: argparse.ArgumentParser, what: str = "the output folder") -> None:
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help=f"replace existing {what} instead of refusing to run",
    )


def add_quantize_option(parser: argparse.ArgumentParser, default: str | None = "none") -> None:
    """``--quantize``, the one spelling of how an encoder's weights run when it embeds."""
    from labse_common.sections.model import QUANTIZE

    parser.add_argument(
        "--quantize",
        choices=QUANTIZE,
        default=default,
        help="none = float32 as trained; int8 = int8 Linear layers on CPU (a BERT-base "
        "encodes ~1.6x faster, vectors at cosine ~0.998 to float32; not on a GPU)"
        + (f" (default: {default})" if default else ""),
    )


# --- configuration -------------------------------------------------------------------------


def load_config(
    section: str | type[T],
    args: argparse.Namespace,
    flags: Mapping[str, Any] | None = None,
    overrides: Iterable[str] = (),
) -> T:
    """The CLI's typed section: ``--config``, then ``overrides`` and ``--set``, then ``flags``
    (those not None). A bad value raises ConfigError naming the key."""
    sets = [*overrides, *(getattr(args, "set", None) or [])]
    return load(section, getattr(args, "config", "demo"), sets, flags)
