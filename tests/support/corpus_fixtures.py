"""Generators of good and deliberately broken corpus files for the pipeline tests."""

from __future__ import annotations

import bz2
import gzip
import io
from pathlib import Path

from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

NEWS = [
    "The city council approved the new budget for public schools on Monday evening.",
    "Local farmers reported a strong harvest after the unusually warm and rainy summer.",
    "Der Stadtrat hat am Montagabend den neuen Haushalt für die öffentlichen Schulen beschlossen.",
]
BOILER = ["Skip to main content", "Share on Facebook", "Home | News | Sport | Contact"]


def write_wet(path: Path, docs: list[tuple[str, bytes]], gz: bool = True) -> Path:
    buf = io.BytesIO()
    w = WARCWriter(buf, gzip=gz)
    for url, payload in docs:
        rec = w.create_warc_record(
            url, "conversion", payload=io.BytesIO(payload), warc_content_type="text/plain"
        )
        w.write_record(rec)
    path.write_bytes(buf.getvalue())
    return path


def write_warc_html(path: Path, url: str, html: bytes, charset: str | None) -> Path:
    buf = io.BytesIO()
    w = WARCWriter(buf, gzip=True)
    ctype = "text/html" + (f"; charset={charset}" if charset else "")
    http = StatusAndHeaders("200 OK", [("Content-Type", ctype)], protocol="HTTP/1.1")
    w.write_record(
        w.create_warc_record(url, "response", payload=io.BytesIO(html), http_headers=http)
    )
    w.write_record(
        w.create_warc_record(url, "request", payload=io.BytesIO(b"GET / HTTP/1.1\r\n\r\n"))
    )
    path.write_bytes(buf.getvalue())
    return path


def good_wet_payload(extra: str = "") -> bytes:
    return ("\n".join([BOILER[0], *NEWS, BOILER[1], extra])).encode("utf-8")


def make_bad_cc_inputs(d: Path) -> dict[str, Path]:
    d.mkdir(parents=True, exist_ok=True)
    files = {}
    files["good"] = write_wet(d / "good.warc.wet.gz", [("http://a.example/1", good_wet_payload())])
    # Truncated gzip: a multi-record file cut in the middle of its second record.
    full = write_wet(
        d / "tmp.wet.gz",
        [
            ("http://b.example/1", good_wet_payload()),
            ("http://b.example/2", good_wet_payload("Second page.")),
        ],
    )
    data = full.read_bytes()
    full.unlink()
    first_len = len(
        write_wet(d / "one.tmp", [("http://b.example/1", good_wet_payload())]).read_bytes()
    )
    (d / "one.tmp").unlink()
    files["truncated"] = d / "truncated.warc.wet.gz"
    files["truncated"].write_bytes(data[: first_len + (len(data) - first_len) // 2])
    # Malformed header in the middle of an uncompressed WARC: the record after it survives.
    a = write_wet(d / "x.tmp", [("http://c.example/1", good_wet_payload())], gz=False).read_bytes()
    b = write_wet(
        d / "y.tmp", [("http://c.example/3", good_wet_payload("Third page here."))], gz=False
    ).read_bytes()
    (d / "x.tmp").unlink()
    (d / "y.tmp").unlink()
    # A record whose header block was overwritten: no parsable status line before the next one.
    garbage = b"@@\x00\x01 garbled header line\r\nmore garbage\r\n\r\n"
    files["malformed"] = d / "malformed.warc.wet"
    files["malformed"].write_bytes(a + garbage + b)
    # Non-UTF-8 payload (Latin-1) in a WET record and an HTML response in windows-1251.
    latin = "Die Straße in Köln wurde für den Verkehr gesperrt, berichtete die Polizei heute früh."
    files["latin1"] = write_wet(
        d / "latin1.warc.wet.gz", [("http://d.example/", latin.encode("latin-1"))]
    )
    ru = (
        "<html><head><title>t</title></head><body><nav>Главная | Новости</nav><article><p>"
        "Городской совет утвердил новый бюджет для государственных школ в понедельник вечером."
        "</p><p>Местные фермеры сообщили о хорошем урожае после необычно тёплого лета.</p>"
        "</article></body></html>"
    )
    files["cp1251_html"] = write_warc_html(
        d / "ru.warc.gz", "http://e.example/", ru.encode("cp1251"), None
    )
    files["empty"] = d / "empty.warc.gz"
    files["empty"].write_bytes(b"")
    files["not_warc"] = d / "notes.warc.gz"
    files["not_warc"].write_bytes(gzip.compress(b"just some text\nthat is not a WARC file\n"))
    return files


# ------------------------------------------------------------------------------------------
# Wikipedia dumps

HEADER = (
    '<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10" '
    'xml:lang="en">\n  <siteinfo><sitename>Wikipedia</sitename></siteinfo>\n'
)
FOOTER = "</mediawiki>\n"


def page_xml(title: str, text: str, ns: int = 0, pid: int = 1, redirect: str | None = None) -> str:
    from xml.sax.saxutils import escape

    red = f'<redirect title="{escape(redirect)}" />' if redirect else ""
    return (
        f"  <page>\n    <title>{escape(title)}</title>\n    <ns>{ns}</ns>\n    <id>{pid}</id>\n"
        f'    {red}\n    <revision><id>{pid}0</id><text xml:space="preserve">{escape(text)}'
        "</text></revision>\n  </page>\n"
    )


def article(i: int) -> str:
    return (
        f"'''Topic {i}''' is a [[village]] in the [[Example County|county]].{{{{citation needed}}}}\n"
        f"== History ==\nThe village of Topic {i} was founded by farmers in the year {1200 + i}.\n"
        f"It has a church, a school and a small market square near the river.\n"
        f"[[Category:Villages]]\n"
    )


def write_dump(path: Path, pages: list[str]) -> Path:
    path.write_bytes(bz2.compress((HEADER + "".join(pages) + FOOTER).encode("utf-8")))
    return path


def write_multistream(path: Path, pages: list[str], per_stream: int) -> tuple[Path, Path]:
    """A real multistream layout: header stream, streams of pages, footer stream, plus index."""
    blobs = [bz2.compress(HEADER.encode())]
    index_lines = []
    offset = len(blobs[0])
    for s in range(0, len(pages), per_stream):
        chunk = pages[s : s + per_stream]
        for j, _ in enumerate(chunk):
            index_lines.append(f"{offset}:{s + j + 1}:Topic {s + j}")
        blob = bz2.compress("".join(chunk).encode())
        blobs.append(blob)
        offset += len(blob)
    blobs.append(bz2.compress(FOOTER.encode()))
    path.write_bytes(b"".join(blobs))
    index = path.with_name(path.name.replace(".xml.bz2", "-index.txt.bz2"))
    index.write_bytes(bz2.compress(("\n".join(index_lines) + "\n").encode()))
    return path, index


def make_bad_wiki_inputs(d: Path) -> dict[str, Path]:
    d.mkdir(parents=True, exist_ok=True)
    files = {}
    pages = [page_xml(f"Topic {i}", article(i), pid=i + 1) for i in range(6)]
    pages.append(
        page_xml("Talk:Topic 0", "A talk page sentence that is long enough.", ns=1, pid=100)
    )
    pages.append(page_xml("Old name", "#REDIRECT [[Topic 0]]", pid=101, redirect="Topic 0"))
    # Pathological wikitext: deeply nested template/link openers, slow for the tokenizer.
    patho = "{{a|" * 3000 + "[[b|" * 3000 + "text " * 20000
    pages.append(page_xml("Pathological", patho, pid=102))
    pages.append("  <page>\n    <title>Broken</title>\n    <ns>0<ns>\n  </page>\n")  # bad XML
    files["good"] = write_dump(d / "good-pages-articles.xml.bz2", pages)
    data = write_dump(
        d / "t.tmp", [page_xml(f"T{i}", article(i), pid=200 + i) for i in range(40)]
    ).read_bytes()
    (d / "t.tmp").unlink()
    files["truncated"] = d / "truncated-pages-articles.xml.bz2"
    files["truncated"].write_bytes(data[: len(data) * 2 // 3])
    files["not_xml"] = d / "notxml-pages-articles.xml.bz2"
    files["not_xml"].write_bytes(bz2.compress(b"this is not xml at all\n" * 50))
    files["empty"] = d / "empty-pages-articles.xml.bz2"
    files["empty"].write_bytes(b"")
    return files
