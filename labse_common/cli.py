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
import itertools
import re
import sys
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NoReturn, TypeVar

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
from labse_common.config_files import PRESETS
from labse_common.config_sections import load
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
    "sub_command",
    "doc_details",
    "exit_with",
    "is_usage_error",
    "load_config",
    "one_line",
    "plain",
    "refuse_inputs_inside_output",
    "run_main",
    "usage_error",
]

T = TypeVar("T")


# --- flags ---------------------------------------------------------------------------------


class CommandParser(argparse.ArgumentParser):
    """The parser of every command: shortened flags refused, errors in one line, help laid out
    one way.

    argparse takes any unambiguous prefix of a flag, so a removed ``--out`` would still parse as
    ``--output``: a command's flags are spelled only one way, so a prefix of one of its flags is
    refused by name (exit 2), before anything else is checked, also where unknown flags go on
    to Beam (``parse_known_args``). A usage error is one line on stderr (``prog: error: ...``),
    exit 2. Sub-commands (``add_subparsers().add_parser``) are built with this class too, so
    they inherit all of it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        argv = list(sys.argv[1:] if args is None else args)
        self._refuse_shortened(argv)
        return super().parse_known_args(argv, namespace)

    def _refuse_shortened(self, argv: list[str]) -> None:
        own = {s for a in self._actions for s in a.option_strings if s.startswith("--")}
        subcommands = {
            name
            for a in self._actions
            if isinstance(a, argparse._SubParsersAction)  # noqa: SLF001 - no public accessor
            for name in a.choices
        }
        for i, token in enumerate(argv):
            if token == "--" or token in subcommands:  # the rest is a sub-command's to check
                return
            flag = token.split("=", 1)[0]
            if not flag.startswith("--") or flag in own:
                continue
            meant = sorted(o for o in own if o.startswith(flag))
            if meant:  # worded as argparse's own, naming what was given with its values
                values = list(itertools.takewhile(lambda a: not a.startswith("-"), argv[i + 1 :]))
                self.error(
                    f"unrecognized arguments: {' '.join([token, *values])} (flags are not "
                    f"shortened: {' or '.join(meant)}?)"
                )

    def error(self, message: str) -> NoReturn:
        """One line on stderr and exit status 2 (argparse would print the usage first)."""
        self.exit(EXIT_USAGE, f"{self.prog}: error: {' '.join(message.split())}\n")


# Source-code markup in a docstring reused as --help: a parenthesised reference to code goes,
# other roles and ``literals`` become 'quoted' words.
_CODE_REFERENCE = re.compile(r"\s*\(:\w+:`[^`]+`\)")
_ROLE = re.compile(r":\w+:`~?([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")


def plain(text: str) -> str:
    """``text`` without Sphinx markup: the words a user reads in ``--help``."""
    text = _CODE_REFERENCE.sub("", text)
    return _LITERAL.sub(r"'\1'", _ROLE.sub(r"'\1'", text))


def doc_details(doc: str | None) -> str:
    """The details of a command's ``--help`` from its module docstring: every paragraph after
    the first line, except those that are only ``command lines`` (its examples say that)."""
    paragraphs = (doc or "").strip().split("\n\n")[1:]
    kept = [p for p in paragraphs if not all(_is_command_line(ln) for ln in p.splitlines())]
    return "\n\n".join(kept)


def _is_command_line(line: str) -> bool:
    line = line.strip()
    quoted = line.startswith("``") and line.endswith("``") and line.count("``") == 2
    return quoted or line.startswith(("python -m ", "labse-"))


def _wrapped(text: str, width: int = 96) -> str:
    """A paragraph given as one long line, wrapped; one written in lines (a docstring's, a
    list) is kept as written (the help formatter prints descriptions as given)."""
    paragraphs = [p for p in text.strip().split("\n\n") if p.strip()]
    return "\n\n".join(
        textwrap.fill(p.strip(), width, break_on_hyphens=False)
        if "\n" not in p.strip() and len(p.strip()) > width
        else p
        for p in paragraphs
    )


def command_parser(
    prog: str,
    summary: str,
    details: str = "",
    examples: Iterable[str] = (),
) -> CommandParser:
    """The one parser builder: ``--help`` says what the command does (``summary``, then
    ``details``), then its options, then ``examples`` (command lines, one per entry).
    Source-code markup in ``summary`` and ``details`` is made plain (:func:`plain`)."""
    return CommandParser(
        prog=prog, description=_description(summary, details), epilog=_epilog(examples)
    )


def _description(summary: str, details: str) -> str:
    summary, details = _wrapped(plain(summary)), _wrapped(plain(details))
    return summary + (f"\n\n{details}" if details else "")


def _epilog(examples: Iterable[str]) -> str | None:
    lines = [e.strip() for e in examples if e.strip()]
    return "examples:\n" + "\n".join(f"  {e}" for e in lines) if lines else None


def sub_command(
    subparsers: argparse._SubParsersAction,
    name: str,
    summary: str,
    details: str = "",
    examples: Iterable[str] = (),
) -> CommandParser:
    """A sub-command (``prog NAME``) in the same help style as :func:`command_parser`: listed
    under its parent with ``summary``; its own ``--help`` gives summary, details, options,
    examples."""
    description, epilog = _description(summary, details), _epilog(examples)
    return subparsers.add_parser(
        name,
        help=_wrapped(plain(summary)),
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


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
