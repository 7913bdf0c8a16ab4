"""The run report's blocks rendered as Markdown (figures beside it) and as one self-contained
HTML page (figures inlined)."""

from __future__ import annotations

import base64
import html
from pathlib import Path

from pipelines.report_data import Block


def markdown(blocks: list[Block], img_dir: Path) -> str:
    """The blocks as Markdown; the figures written into ``img_dir``."""
    out = []
    for b in blocks:
        kind = b[0]
        if kind in ("h1", "h2"):
            out.append(("# " if kind == "h1" else "## ") + b[1])
        elif kind == "p":
            out.append(b[1])
        elif kind == "pre":
            out.append("```\n" + b[1] + "\n```")
        elif kind == "summary":
            out.append(_md_summary(b[1]))
        elif kind == "raw_md":
            out.append(b[1].strip())
        elif kind == "table":
            rows = [_md_row(b[1]), "|" + "---|" * len(b[1]), *[_md_row(r) for r in b[2]]]
            out.append("\n".join(rows))
        elif kind == "img":
            img_dir.mkdir(parents=True, exist_ok=True)
            (img_dir / f"{b[1]}.png").write_bytes(b[2])
            out.append(f"![{b[3]}]({img_dir.name}/{b[1]}.png)")
    return "\n\n".join(out) + "\n"


def html_page(blocks: list[Block]) -> str:
    """The blocks as one self-contained HTML page (figures inlined)."""
    import re

    def inline(t: str) -> str:
        t = html.escape(t)
        t = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", t)
        return re.sub(r"`(.+?)`", r"<code>\1</code>", t)

    parts = []
    for b in blocks:
        kind = b[0]
        if kind in ("h1", "h2"):
            parts.append(f"<{kind}>{inline(b[1])}</{kind}>")
        elif kind == "p":
            parts.append(f"<p>{inline(b[1])}</p>")
        elif kind == "pre":
            parts.append(f"<pre>{html.escape(b[1])}</pre>")
        elif kind == "summary":
            items = "".join(f'<li class="{c}">{inline(t)}</li>' for c, t in b[1])
            parts.append(f'<section id="summary"><h2>Summary</h2><ul>{items}</ul></section>')
        elif kind == "raw_md":
            parts.append(_md_table_html(b[1], inline))
        elif kind == "table":
            head = "".join(f"<th>{inline(str(c))}</th>" for c in b[1])
            body = "".join(
                "<tr>" + "".join(f"<td>{inline(str(c))}</td>" for c in r) + "</tr>" for r in b[2]
            )
            parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        elif kind == "img":
            data = base64.b64encode(b[2]).decode()
            parts.append(f'<img alt="{html.escape(b[3])}" src="data:image/png;base64,{data}">')
    style = (
        "body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
        "table{border-collapse:collapse;margin:1em 0;font-size:13px}"
        "td,th{border:1px solid #ccc;padding:3px 7px;text-align:left}th{background:#f3f3f3}"
        "img{max-width:100%}code{background:#f3f3f3;padding:0 3px}"
        # The summary box answers first: framed, its verdict and warnings coloured.
        "#summary{border:2px solid #4c72b0;border-radius:6px;padding:.2em 1em;margin:1em 0;"
        "background:#f7f9fc}#summary h2{margin:.4em 0}#summary ul{padding-left:1.2em}"
        "#summary li{margin:.3em 0}#summary .good{color:#1b6e2e}"
        "#summary .bad{color:#a3141b;font-size:1.1em}#summary .warn{color:#8a4b00}"
    )
    return (
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>LaBSE run report</title>'
        f"<style>{style}</style></head><body>{''.join(parts)}</body></html>\n"
    )


def _md_summary(lines: list[tuple[str, str]]) -> str:
    """The summary box as a Markdown block quote (one bullet a line)."""
    return "> **Summary**\n>\n" + "\n".join(f"> - {t}" for _, t in lines)


def _md_row(cells: list) -> str:
    return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |"


def _md_table_html(md: str, inline) -> str:
    """Markdown from the evaluation CLI: its tables become HTML tables, other lines paragraphs."""
    out, table = [], []
    for line in md.splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(set(c) <= set("-: ") for c in cells):
                table.append(cells)
            continue
        if table:
            head = "".join(f"<th>{inline(c)}</th>" for c in table[0])
            body = "".join(
                "<tr>" + "".join(f"<td>{inline(c)}</td>" for c in r) + "</tr>" for r in table[1:]
            )
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
            table = []
        if line.strip():
            out.append(f"<p>{inline(line.lstrip('# '))}</p>")
    return "".join(out)
