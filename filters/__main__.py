"""Command line: ``python -m filters <command> ...`` for bitext filtering.

Each command lives in its own module ``filters/bitext/cli_<command>.py`` (dashes become underscores)
with ``main(argv: list[str]) -> int``, so adding a command touches no shared file.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "rules": "hard rules on pairs: keep, or drop with a named reason",
    "margin-score": "LaBSE margin score of given pairs, neighbourhoods from each side's sentences",
    "cds-train": "train the CDS scorer: theta_noisy on candidates, theta_clean on trusted pairs",
    "cds-score": "score pairs with a trained CDS scorer",
    "calibrate": "choose the threshold that keeps ~80% GOOD on a labelled sample",
    "apply": "apply a calibrated threshold: kept pairs, Moses export, rejected with reasons",
}


def _usage() -> str:
    lines = ["usage: python -m filters <command> [options]  (each command has --help)", ""]
    lines += [f"  {name:<13} {what}" for name, what in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"error: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"filters.bitext.cli_{name.replace('-', '_')}")
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
