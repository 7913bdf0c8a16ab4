"""Command line: ``python -m filters <command> ...`` for bitext filtering.

The commands are the modules ``filters/bitext/cli_<command>.py`` (underscores become dashes),
each with ``main(argv: list[str]) -> int`` and a docstring whose first line is its one-line help.
The list below is read from those files, so adding a command touches no shared file.
"""

from __future__ import annotations

import ast
import importlib
import re
import sys
from pathlib import Path

import filters.bitext
from labse_common.cli import exit_with, run_main
from labse_common.errors import UsageError
from labse_common.logs import setup_logging

PREFIX = "cli_"
# A first line may start by naming its command ("``python -m filters rules``: ..."): not help.
_SELF_NAME = re.compile(r"^``python -m filters [\w-]+``:\s*")


def commands() -> dict[str, str]:
    """``{command: one-line help}`` of every ``filters/bitext/cli_*.py``, sorted by name.

    The help is read from the module's source (its docstring's first line) without importing
    it, so ``--help`` does not load pyarrow, torch or transformers."""
    found = {}
    for path in sorted(Path(filters.bitext.__file__).parent.glob(f"{PREFIX}*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        name = path.stem[len(PREFIX) :].replace("_", "-")
        found[name] = _SELF_NAME.sub("", doc.strip().splitlines()[0]) if doc.strip() else ""
    return found


def _usage(cmds: dict[str, str]) -> str:
    lines = ["usage: python -m filters <command> [options]  (each command has --help)", ""]
    width = max(map(len, cmds), default=0) + 2
    lines += [f"  {name:<{width}}{what}" for name, what in cmds.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cmds = commands()
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage(cmds), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]

    def body() -> int:
        if name not in cmds:
            setup_logging()  # the command's own --log-level is never parsed
            raise UsageError(f"unknown command {name!r}; the commands: {', '.join(cmds)}")
        module = importlib.import_module(f"filters.bitext.{PREFIX}{name.replace('-', '_')}")
        return int(module.main(rest) or 0)

    # Each command maps its own errors; this maps the dispatcher's, the same way.
    return run_main(body, "filters")


if __name__ == "__main__":
    exit_with(main)
