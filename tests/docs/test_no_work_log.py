"""The project speaks of itself: its markdown names versions, dates, commands and figures, not how
the work on it was organised ("the tenth session", "issue 33", "(issue 46 item 4)")."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Sessions of other things are words of the trade, not of the project's history.
_ALLOWED = re.compile(r"session cluster|graphical session|sessions? of (?:Flink|Beam|Spark)", re.I)
_WORK_LOG = re.compile(r"\bsessions?\b|\bissues?\s+#?\d+|\bissue #\d+|\bitem \d+\b", re.I)


def markdown() -> list[Path]:
    return sorted(
        [ROOT / "README.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").glob("*.md")]
        + list((ROOT / "bench").glob("*.md"))
    )


def work_log_mentions(text: str) -> list[tuple[int, str]]:
    """``(line number, line)`` for each line that tells how the work was organised."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        if _WORK_LOG.search(_ALLOWED.sub("", line)):
            found.append((n, line.strip()))
    return found


def test_the_markdown_does_not_tell_how_the_work_was_organised():
    wrong = [
        f"{doc.relative_to(ROOT)}:{n}: {line[:120]}"
        for doc in markdown()
        for n, line in work_log_mentions(doc.read_text(encoding="utf-8"))
    ]
    assert not wrong, f"{len(wrong)} line(s) name sessions or issues:\n" + "\n".join(wrong)


def test_the_check_finds_the_ways_it_was_written():
    for said in (
        "## 2026-11-28 (tenth session): a lexicon stage (issue 33)",
        "the session-8 preset",
        "(issue 46 item 4, 2026-11-29)",
        "issues 47 and 49",
        "what this session measured",
    ):
        assert work_log_mentions(said), said
    for fine in ("a Flink 1.19 session cluster", "no graphical session is detected"):
        assert not work_log_mentions(fine), fine


# Code may speak of boto or HTTP sessions, so in Python sources only the work log's own phrases
# count: an issue number, "the tenth session", "this session", "session 8".
_CODE_LOG = re.compile(
    r"\bissues?\s+#?\d+|\b(?:\w+th|first|second|third|this|last|next) session\b|\bsession[ -]\d+",
    re.I,
)


def python_sources() -> list[Path]:
    here = Path(__file__).resolve()
    dirs = ("labse_common", "labse_model", "mining", "filters", "pipelines", "tests", "bench")
    return sorted(p for d in dirs for p in (ROOT / d).rglob("*.py") if p.resolve() != here)


def test_the_code_does_not_tell_how_the_work_was_organised():
    wrong = [
        f"{src.relative_to(ROOT)}:{n}: {line.strip()[:120]}"
        for src in python_sources()
        for n, line in enumerate(src.read_text(encoding="utf-8").splitlines(), 1)
        if _CODE_LOG.search(line)
    ]
    assert not wrong, f"{len(wrong)} line(s) name sessions or issues:\n" + "\n".join(wrong)
    for said in ("(issue 47, item 4)", "Issue 34: a config error", "the tenth session's figure"):
        assert _CODE_LOG.search(said), said
    assert not _CODE_LOG.search("a boto3 session with no credentials")
