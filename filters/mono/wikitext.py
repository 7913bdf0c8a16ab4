"""Wikitext to plain text with mwparserfromhell.

We walk the parse tree rather than calling ``strip_code()`` so each kind of markup has an
explicit rule: templates, tables, references, galleries, math/code blocks, headings, comments,
file/image/category and interlanguage links are removed; ordinary links keep their visible text;
bold/italic/list markup keeps its content. A final line filter removes the residue that
malformed markup leaves behind (stray table rows, unbalanced braces).
"""

from __future__ import annotations

import html
import re

import mwparserfromhell
from mwparserfromhell.nodes import (
    Argument,
    Comment,
    ExternalLink,
    Heading,
    HTMLEntity,
    Tag,
    Template,
    Text,
    Wikilink,
)

# Tags whose content is not running prose.
_DROP_TAGS = frozenset(
    """ref references table gallery math chem ce code pre syntaxhighlight source imagemap timeline
    score hiero graph mapframe maplink templatestyles templatedata noinclude includeonly
    categorytree inputbox indicator section charinsert""".split()
)
_DROP_LINK_NS = frozenset(
    """file image media category kategorie catégorie categoría categoria категория 分类
    wikt wiktionary s wikisource commons""".split()
)
_LANG_PREFIX = re.compile(r"^:?[a-z]{2,3}(-[a-z]{2,8})*$")
_MAGIC = re.compile(r"__[A-Z]+__")
_STYLE_QUOTES = re.compile(r"'{2,}")
_EMPTY_PARENS = re.compile(r"\([ \t]*[,;:]?[ \t]*\)|\[[ \t]*\]")
_SPACE_BEFORE_PUNCT = re.compile(r"[ \t]+([,.;:!?)])")
_MULTISPACE = re.compile(r"[ \t]{2,}")
# Lines that are markup residue, not prose: table rows, unbalanced template/link braces.
_RESIDUE_LINE = re.compile(r"^\s*(\{\||\|\}|\|-|\||!|\{\{|\}\}|\[\[|\]\]|=)")
# Unbalanced brackets the parser left as text (e.g. the tail of a caption spanning lines).
_STRAY_BRACKETS = re.compile(r"\[\[|\]\]|\{\{|\}\}")


# Inline templates whose output is part of the sentence; every other template is removed.
_DASHES = {
    "ndash": "–",
    "mdash": "—",
    "snd": " – ",
    "spaced ndash": " – ",
    "nbsp": " ",
    "spnd": " – ",
    "sndash": " – ",
    "en dash": "–",
    "em dash": "—",
}
_KEEP_FIRST_PARAM = frozenset({"nowrap", "small", "nobr", "lang-rtl", "transl"})


def _inline_template(node: Template) -> str | None:
    name = str(node.name).strip().lower()
    if name in _DASHES:
        return _DASHES[name]
    params = [p for p in node.params if not p.showkey]
    if name in _KEEP_FIRST_PARAM and params:
        return wikitext_to_text(str(params[-1].value)) if name == "transl" else _plain(params[0])
    if (name == "lang" or name.startswith("lang-")) and params:
        return _plain(params[-1])
    if name in ("convert", "cvt") and len(params) >= 2:
        return f"{_plain(params[0])} {_plain(params[1])}"
    return None


def _plain(param) -> str:
    out: list[str] = []
    _render(param.value.nodes, out)
    return "".join(out).strip()


class WikitextError(Exception):
    """Raised when mwparserfromhell cannot parse a page."""


def _render(nodes, out: list[str]) -> None:
    for node in nodes:
        if isinstance(node, Text):
            out.append(str(node.value))
        elif isinstance(node, Wikilink):
            title = str(node.title).strip()
            prefix = title.split(":", 1)[0].strip().lower() if ":" in title else ""
            if prefix and (prefix.lstrip(":") in _DROP_LINK_NS or _LANG_PREFIX.match(prefix)):
                continue
            if node.text is not None:
                _render(node.text.nodes, out)
            else:
                out.append(title.split("#", 1)[0].lstrip(":"))
        elif isinstance(node, Tag):
            tag = str(node.tag).strip().lower()
            if tag in _DROP_TAGS or node.self_closing:
                if tag == "br":
                    out.append("\n")
                continue
            if node.contents is not None:
                # List items and definition markers start a new line in the rendered text.
                if tag in ("li", "dt", "dd"):
                    out.append("\n")
                _render(node.contents.nodes, out)
        elif isinstance(node, ExternalLink):
            if node.title is not None:
                _render(node.title.nodes, out)
        elif isinstance(node, HTMLEntity):
            out.append(html.unescape(str(node)))
        elif isinstance(node, Template):
            inline = _inline_template(node)
            if inline is not None:
                out.append(inline)
        elif isinstance(node, (Heading, Comment, Argument)):
            continue
        else:  # unknown node types: keep their text form rather than lose content
            out.append(str(node))


# References and comments are removed before parsing: the tokenizer gives up on refs with
# unbalanced brackets inside (leaving "<ref>[ ..." as text), and dropping them first also makes
# the parse tree smaller.
_REF_SELF = re.compile(r"<ref(\s[^<>]*)?/>", re.I)
_REF_PAIR = re.compile(r"<ref(\s[^<>]*)?>.*?</ref\s*>", re.I | re.S)
_REF_OPEN = re.compile(r"<ref(\s[^<>]*)?>[^\n]*", re.I)
_COMMENT = re.compile(r"<!--.*?(-->|$)", re.S)


def strip_refs(wikitext: str) -> str:
    wikitext = _COMMENT.sub("", wikitext)
    wikitext = _REF_SELF.sub("", wikitext)
    wikitext = _REF_PAIR.sub("", wikitext)
    return _REF_OPEN.sub("", wikitext)


_BRACES = re.compile(r"\{\{|\}\}")
_TABLE_EDGE = re.compile(r"^[ \t]*(\{\||\|\})", re.M)
_TEMPLATE_NAME = re.compile(r"\{\{\s*([^|{}]*?)\s*(\||\}\})")


def _cut_spans(text: str, edges: re.Pattern, opener: str, keep) -> str:
    """Remove balanced opener..closer spans (outermost only), found by a depth count over the
    delimiter positions: far cheaper than letting the parser build nodes we would drop."""
    out: list[str] = []
    depth = 0
    start = last = 0
    for m in edges.finditer(text):
        tok = m.group(1) if m.groups() else m.group(0)
        if tok == opener:
            if depth == 0:
                start = m.start()
            depth += 1
        elif depth > 0:
            depth -= 1
            if depth == 0:
                span = text[start : m.end()]
                if keep is None or not keep(span):
                    out.append(text[last:start])
                    last = m.end()
    out.append(text[last:])
    return "".join(out)


def _is_inline_template(span: str) -> bool:
    m = _TEMPLATE_NAME.match(span)
    if not m:
        return False
    name = m.group(1).lower()
    return (
        name in _DASHES
        or name in _KEEP_FIRST_PARAM
        or name == "lang"
        or name.startswith("lang-")
        or name in ("convert", "cvt")
    )


_LINK_EDGES = re.compile(r"\[\[|\]\]")
# List/indent markers at line start (* # : ;): the item text stays, on its own line.
_LIST_MARKER = re.compile(r"^[*#:;]+[ \t]*", re.M)


def _resolve_links(text: str) -> str:
    """Replace outermost ``[[...]]`` links: drop file/category/interlanguage links, keep the
    visible text of plain ones. Links with nested links, templates or tags inside (rare outside
    file captions, which are dropped) are left for the parser."""
    out: list[str] = []
    depth = 0
    start = last = 0
    nested = False
    for m in _LINK_EDGES.finditer(text):
        if m.group(0) == "[[":
            if depth == 0:
                start, nested = m.start(), False
            else:
                nested = True
            depth += 1
        elif depth > 0:
            depth -= 1
            if depth:
                continue
            inner = text[start + 2 : m.start()]
            target = inner.split("|", 1)[0].strip()
            prefix = target.split(":", 1)[0].strip().lower() if ":" in target else ""
            if prefix and (prefix.lstrip(":") in _DROP_LINK_NS or _LANG_PREFIX.match(prefix)):
                repl = ""
            elif nested or "{{" in inner or "<" in inner:
                continue  # let the parser handle it
            elif "|" in inner:
                repl = inner.rsplit("|", 1)[1]
            else:
                repl = target.split("#", 1)[0].lstrip(":")
            out.append(text[last:start])
            out.append(repl)
            last = m.end()
    out.append(text[last:])
    return "".join(out)


def prestrip(wikitext: str) -> str:
    """Drop comments, references, non-inline templates and tables before parsing.

    Infoboxes, citation templates and tables are most of an article's markup and plain links
    most of its nodes; cutting/resolving them by delimiter counting leaves mwparserfromhell
    (whose tree building is Python) a much smaller document: lists, HTML tags, external links,
    entities, and whatever is nested or unusual.
    """
    text = strip_refs(wikitext)
    if "{{" in text:
        text = _cut_spans(text, _BRACES, "{{", _is_inline_template)
    if "{|" in text:
        text = _cut_spans(text, _TABLE_EDGE, "{|", None)
    if "[[" in text:
        text = _resolve_links(text)
    return _LIST_MARKER.sub("", text)


def wikitext_to_text(wikitext: str) -> str:
    """Plain text of a page: paragraphs separated by newlines, markup removed."""
    try:
        # Bold/italic quotes are stripped as text below: building a Tag node for every styled
        # run costs more than the rest of the parse.
        code = mwparserfromhell.parse(prestrip(wikitext), skip_style_tags=True)
    except Exception as e:  # ParserError, RecursionError and tokenizer bugs
        raise WikitextError(f"{type(e).__name__}: {e}") from e
    parts: list[str] = []
    _render(code.nodes, parts)
    text = _STYLE_QUOTES.sub("", _MAGIC.sub("", "".join(parts)))
    # Residue lines go first (they are recognised by their start), then whole-text clean-ups:
    # one regex pass over the page instead of one per line.
    text = "\n".join(ln for ln in text.split("\n") if not _RESIDUE_LINE.match(ln))
    text = _STRAY_BRACKETS.sub("", text)
    text = _EMPTY_PARENS.sub("", text)
    text = _SPACE_BEFORE_PUNCT.sub(r"\1", text)
    text = _MULTISPACE.sub(" ", text)
    return "\n".join(ln.strip() for ln in text.split("\n") if ln.strip())
