"""A command group: one program (``python -m filters``) whose commands are modules of a package.

How to use it, in ``<package>/__main__.py``::

    from labse_common.command_group import CommandGroup

    GROUP = CommandGroup(
        prog="python -m filters",
        summary="Score, filter and label bitext pairs.",
        package="filters.bitext",  # where the command modules live
        prefix="cli_",  # filters/bitext/cli_margin_score.py is the command margin-score
        examples=["python -m filters rules --pairs p.tsv --output out/"],
    )
    commands = GROUP.commands  # {name: one-line help}, for tests and docs


    def main(argv: list[str] | None = None) -> int:
        return GROUP.main(argv)


    if __name__ == "__main__":
        exit_with(main)

A command is a module ``<package>.<prefix><name>`` (dashes in the command name are underscores
in the file name) with

* ``main(argv: list[str]) -> int``: builds its parser with ``labse_common.cli.command_parser``
  (prog ``"<group prog> <name>"``), and returns what ``run_main`` returns;
* a module docstring whose first line is its one-line help (a leading "``python -m x cmd``:" is
  dropped).

The commands and their help are read from the files without importing them, so the group's
``--help`` and an unknown command cost no import of torch or pyarrow, and adding a command touches
no shared file. A group whose commands do not share a prefix names them instead:
``modules={"mine": "mining.cli_mine", ...}`` (each module's docstring still gives its help).

What the group does itself: ``--help`` / ``-h`` (usage, summary, the commands, examples, exit 0);
no command (the same text on stderr, exit 2); an unknown command (one line naming it and listing
the commands, exit 2, through ``run_main``); ``--log-level LEVEL`` before the command is passed on
to the command (``python -m mining --log-level DEBUG mine ...``). Everything after the command
name is the command's own: its flags, its ``--help``, its errors.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from labse_common.command import EXIT_USAGE, run_main
from labse_common.errors import UsageError

__all__ = ["CommandGroup", "one_line_help"]

# A docstring may start by naming its command ("``python -m filters rules``: ..."): not help.
_SELF_NAME = re.compile(r"^``(python -m |labse-)[\w.-]+( [\w-]+)?``:\s*")
_GROUP_OPTIONS = ("--log-level",)


def one_line_help(path: str | Path) -> str:
    """The first line of the module docstring of the file at ``path`` (parsed, not imported)."""
    doc = ast.get_docstring(ast.parse(Path(path).read_text(encoding="utf-8"))) or ""
    first = doc.strip().splitlines()[0] if doc.strip() else ""
    return _SELF_NAME.sub("", first)


def _module_file(module: str) -> Path:
    """The source file of ``module``, found without running it (its parent packages are
    imported, as Python must to find it)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ImportError(f"no module {module}")
    return Path(spec.origin)


@dataclass(frozen=True)
class CommandGroup:
    """``prog <command> [options]``: see the module docstring."""

    prog: str
    summary: str
    package: str = ""
    prefix: str = "cli_"
    modules: Mapping[str, str] = field(default_factory=dict)
    examples: Iterable[str] = ()
    logger: str = ""

    # --- the commands ----------------------------------------------------------------------

    def module_names(self) -> dict[str, str]:
        """``{command: module}``, sorted by command name."""
        found = dict(self.modules)
        if self.package:
            folder = _module_file(self.package).parent
            for path in folder.glob(f"{self.prefix}*.py"):
                name = path.stem[len(self.prefix) :].replace("_", "-")
                found.setdefault(name, f"{self.package}.{path.stem}")
        return dict(sorted(found.items()))

    def commands(self) -> dict[str, str]:
        """``{command: one-line help}``, sorted by name, read without importing the commands."""
        return {name: one_line_help(_module_file(mod)) for name, mod in self.module_names().items()}

    def load(self, name: str) -> ModuleType:
        """The module of command ``name`` (imported); UsageError for an unknown name."""
        modules = self.module_names()
        if name not in modules:
            raise UsageError(f"unknown command {name!r}; the commands: {', '.join(modules)}")
        return importlib.import_module(modules[name])

    # --- the program -----------------------------------------------------------------------

    def help_text(self) -> str:
        """usage, summary, the commands with their help, then examples."""
        cmds = self.commands()
        width = max(map(len, cmds), default=0) + 2
        lines = [f"usage: {self.prog} <command> [options]", "", self.summary.strip(), ""]
        lines += ["commands:"] + [f"  {name:<{width}}{what}" for name, what in cmds.items()]
        lines += ["", f"Each command has its own --help: {self.prog} <command> --help"]
        examples = [e.strip() for e in self.examples if e.strip()]
        if examples:
            lines += ["", "examples:"] + [f"  {e}" for e in examples]
        return "\n".join(lines)

    def main(self, argv: list[str] | None = None) -> int:
        """Run ``argv`` (default: ``sys.argv[1:]``): the group's own options, then the command's
        ``main(rest)``. Returns the exit status."""
        argv = list(sys.argv[1:] if argv is None else argv)
        if argv[:1] in (["-h"], ["--help"]):
            print(self.help_text())
            return 0
        passed, argv = _group_options(argv)
        if not argv:
            print(self.help_text(), file=sys.stderr)
            return EXIT_USAGE
        name, rest = argv[0], argv[1:]

        def body() -> int:
            try:
                if name.startswith("-"):
                    raise UsageError(f"{self.prog}: {name} before the command; give it after")
                module = self.load(name)
            except UsageError:
                from labse_common.logs import setup_logging

                setup_logging()  # the command's own --log-level is never parsed
                raise
            return int(module.main(passed + rest) or 0)

        # Each command maps its own errors; this maps the group's (unknown command) the same way.
        return run_main(body, self.logger or self.prog.split()[-1])


def _group_options(argv: list[str]) -> tuple[list[str], list[str]]:
    """``--log-level X`` (or ``--log-level=X``) before the command, split off to be passed on."""
    passed: list[str] = []
    while argv:
        head = argv[0]
        if head in _GROUP_OPTIONS and len(argv) > 1:
            passed, argv = [*passed, head, argv[1]], argv[2:]
        elif head.split("=", 1)[0] in _GROUP_OPTIONS and "=" in head:
            passed, argv = [*passed, head], argv[1:]
        else:
            break
    return passed, argv
