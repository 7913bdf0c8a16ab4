"""Blocks of the docs that are a command's output, regenerated from the code so they cannot drift.

A block in README.md, CHANGELOG.md, docs/*.md or bench/*.md is marked with the command that
prints it (run from the repository root), and holds its standard output as a ``text`` block::

    <!-- generated: python -m pipelines.run --help -->
    ```text
    usage: python -m pipelines.run [-h] ...
    ```
    <!-- end generated -->

``<!-- generated markdown: ... -->`` holds the output as it is (it is Markdown itself: the
configuration reference). ``python -m tests.docs.generated`` (``make docs``) rewrites every block
with what its command prints now; ``tests/docs/test_generated.py`` runs each command again and
fails with a diff naming the block that differs. Nothing is cached.

What would differ from machine to machine is normalised: the repository's own path is dropped
(paths print relative to it), the stand-in data folder ``tests/docs/example_data`` reads as
``/data/mine`` and its encoder as ``/models/LaBSE`` (the names the docs use), the help is
wrapped at 100 columns, and log lines (on stderr, with times) are not part of a block.
"""

from __future__ import annotations

import difflib
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "tests" / "docs" / "example_data"
# Longest first: the encoder lies inside the example folder.
SHOWN_AS = ((EXAMPLE / "models" / "LaBSE", "/models/LaBSE"), (EXAMPLE, "/data/mine"))

_BLOCK = re.compile(
    r"^<!-- generated(?P<markdown> markdown)?: (?P<command>.+?) -->\n"
    r"(?P<body>.*?)"
    r"^<!-- end generated -->$",
    flags=re.S | re.M,
)


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int  # of the opening marker, 1-based
    command: str
    markdown: bool
    body: str

    @property
    def name(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line} `{self.command}`"


def documents() -> list[Path]:
    return sorted(
        [ROOT / "README.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").glob("*.md")]
        + list((ROOT / "bench").glob("*.md"))
    )


def blocks(doc: Path) -> list[Block]:
    text = doc.read_text(encoding="utf-8")
    return [
        Block(
            doc,
            text.count("\n", 0, m.start()) + 1,
            m.group("command"),
            bool(m.group("markdown")),
            m.group("body"),
        )
        for m in _BLOCK.finditer(text)
    ]


def all_blocks() -> list[Block]:
    return [b for doc in documents() for b in blocks(doc)]


def normalise(text: str) -> str:
    for path, shown in SHOWN_AS:
        text = text.replace(str(path), shown)
    text = text.replace(str(ROOT) + os.sep, "").replace(str(ROOT), ".")
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


def run(command: str) -> str:
    """What ``command`` (``python -m MODULE ...``) prints on stdout, normalised."""
    words = shlex.split(command)
    if words[:2] != ["python", "-m"]:
        raise ValueError(f"a generated block runs `python -m MODULE ...`, not `{command}`")
    env = {**os.environ, "COLUMNS": "100", "LC_ALL": "C.UTF-8", "PYTHONPATH": str(ROOT)}
    env.pop("LABSE_KILL_AFTER", None)
    done = subprocess.run(
        [sys.executable, *words[1:]], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0:
        raise RuntimeError(f"`{command}` exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return normalise(done.stdout)


def render(block: Block, output: str) -> str:
    """The block's body for ``output``."""
    return output if block.markdown else f"```text\n{output}```\n"


def diff(block: Block) -> str:
    """Empty when the block holds what its command prints now, else a unified diff."""
    want = render(block, run(block.command))
    if want == block.body:
        return ""
    return "".join(
        difflib.unified_diff(
            block.body.splitlines(keepends=True),
            want.splitlines(keepends=True),
            f"{block.name} (in the doc)",
            "what the command prints now",
        )
    )


def regenerate(doc: Path) -> int:
    """Rewrite every block of ``doc``; the number of blocks that changed."""
    text, changed = doc.read_text(encoding="utf-8"), 0
    # From the end, so that the offsets of the blocks before stay valid.
    for block, m in reversed(list(zip(blocks(doc), _BLOCK.finditer(text)))):
        body = render(block, run(block.command))
        if body != block.body:
            changed += 1
            text = text[: m.start("body")] + body + text[m.end("body") :]
    if changed:
        doc.write_text(text, encoding="utf-8")
    return changed


def main() -> int:
    for doc in documents():
        n = len(blocks(doc))
        if n:
            changed = regenerate(doc)
            print(f"{doc.relative_to(ROOT)}: {n} generated block(s), {changed} rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
