"""MediaWiki pages-articles dumps (XML, .bz2, multistream .bz2) to pages, by byte range.

To spread one 20 GB dump over many workers, a dump is cut into byte ranges that each decompress
on their own:
- a multistream dump with its ``...-multistream-index.txt.bz2`` index: the distinct stream
  offsets of the index (each stream holds ~100 pages), grouped into ranges;
- a multistream dump without the index: the offsets of bz2 stream headers found by scanning the
  compressed bytes (stream starts are byte-aligned; a candidate is kept only if it decompresses);
- a plain ``.xml`` or single-stream ``.bz2``: one range, read as a stream.
Pages are cut out of the decompressed text by their ``<page>``/``</page>`` tags and parsed one at
a time with ElementTree, so a range that starts mid-dump needs no XML header.
"""

from __future__ import annotations

import bz2
import codecs
import dataclasses
import logging
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from labse_common.stats import StageCounter
from labse_common.textio import sniff_bom
from pipelines.readers.bz2_blocks import GAP, BlockRecovery, recover_blocks

log = logging.getLogger(__name__)

_BZ2_STREAM_MAGIC = re.compile(rb"BZh[1-9]1AY&SY")
_CHUNK = 1 << 20
# Compressed bytes kept behind the decompressor: enough to hold the start of the block being
# decoded when damage is found (a bz2 block is at most ~1 MB compressed).
_KEEP_COMPRESSED = 2 << 20


@dataclass(frozen=True)
class ByteRange:
    path: str
    start: int
    end: int | None  # None: to the end of the file
    compression: str  # "bz2" | "none"
    encoding: str | None = None  # the dump's text encoding; None: sniffed from the range's head


@dataclass
class Page:
    title: str
    ns: int
    page_id: str
    redirect: bool
    text: str
    locator: str = ""  # "<dump file>@<offset of the bz2 byte range holding the page>"


def compression_of(path: str) -> str:
    return "bz2" if path.endswith(".bz2") else "none"


def ranges_from_offsets(
    path: str, offsets: Iterable[int], streams_per_range: int
) -> list[ByteRange]:
    offs = sorted(set(offsets))
    if not offs or offs[0] != 0:
        offs = [0, *offs]
    starts = offs[::streams_per_range]
    ends: list[int | None] = [*starts[1:], None]
    return [ByteRange(path, s, e, "bz2") for s, e in zip(starts, ends)]


def read_index_offsets(index_stream: BinaryIO) -> list[int]:
    """Offsets from a multistream index (lines ``offset:page_id:title``)."""
    offsets = set()
    with bz2.BZ2File(index_stream) as f:
        for line in f:
            head = line.split(b":", 1)[0]
            if head.isdigit():
                offsets.add(int(head))
    return sorted(offsets)


def scan_stream_offsets(raw: BinaryIO) -> list[int]:
    """Byte offsets of bz2 stream headers, verified by decompressing a few bytes at each."""
    offsets: list[int] = []
    pos = 0
    tail = b""
    while True:
        block = raw.read(_CHUNK * 8)
        if not block:
            break
        data = tail + block
        base = pos - len(tail)
        for m in _BZ2_STREAM_MAGIC.finditer(data):
            off = base + m.start()
            if not offsets or off > offsets[-1]:
                offsets.append(off)
        tail = data[-9:]
        pos += len(block)
    return offsets


def plan_ranges(
    path: str, raw: BinaryIO, index: BinaryIO | None, streams_per_range: int
) -> list[ByteRange]:
    """Cut one dump into independently readable byte ranges."""
    if compression_of(path) != "bz2":
        return [ByteRange(path, 0, None, "none")]
    offsets = read_index_offsets(index) if index is not None else scan_stream_offsets(raw)
    if len(offsets) <= 1:
        return [ByteRange(path, 0, None, "bz2")]
    ranges = ranges_from_offsets(path, offsets, streams_per_range)
    # A range after the first has no XML declaration to read its encoding from.
    enc = _dump_encoding(raw)
    if enc != "utf-8":
        ranges = [dataclasses.replace(r, encoding=enc) for r in ranges]
    return ranges


def _dump_encoding(raw: BinaryIO) -> str:
    """The encoding declared at the head of a bz2 dump (its first stream)."""
    raw.seek(0)
    dec, out = bz2.BZ2Decompressor(), b""
    try:
        while len(out) < 256 and not dec.eof:
            b = raw.read(1 << 16)
            if not b:
                break
            out += dec.decompress(b)
    except OSError:
        pass
    return sniff_xml_encoding(out)[0]


class _RangeReader:
    """Reads bytes [start, end) of a seekable stream in chunks."""

    def __init__(self, raw: BinaryIO, start: int, end: int | None) -> None:
        if start:
            raw.seek(start)
        self.raw = raw
        self.left = None if end is None else end - start

    def chunks(self) -> Iterator[bytes]:
        while self.left is None or self.left > 0:
            n = _CHUNK if self.left is None else min(_CHUNK, self.left)
            b = self.raw.read(n)
            if not b:
                return
            if self.left is not None:
                self.left -= len(b)
            yield b


class DecodeState:
    """What went wrong while decompressing a range (None when it ended cleanly), and what block
    recovery skipped in a damaged bz2 stream."""

    def __init__(self) -> None:
        self.error: str | None = None
        self.detail = ""
        self.recovery = BlockRecovery()


def _decompress_bz2(chunks: Iterable[bytes], state: DecodeState) -> Iterator[bytes | object]:
    """Decompress concatenated bz2 streams (multistream), recording truncation; on damage,
    go on block by block from the first block not yet passed on (``GAP`` marks a loss)."""
    chunks = iter(chunks)
    dec = bz2.BZ2Decompressor()
    fed = False  # has the current decompressor seen any bytes of its stream?
    window = bytearray()  # the last compressed bytes, to find block starts after a failure
    base = 0  # absolute offset of window[0]
    pos = 0  # absolute offset of the next chunk
    emitted = False
    for chunk in chunks:
        if len(window) > _KEEP_COMPRESSED:
            cut = len(window) - _KEEP_COMPRESSED
            del window[:cut]
            base += cut
        window.extend(chunk)
        at, pos = pos, pos + len(chunk)
        while chunk:
            fed = True
            try:
                out = dec.decompress(chunk)
            except OSError as e:
                state.detail = str(e)
                log.warning("damaged bz2 data near byte %d (%s): recovering block by block", at, e)
                yield from recover_blocks(window, base, at, chunks, state.recovery)
                if state.recovery.truncated:
                    state.error = "truncated_archive"
                elif state.recovery.blocks_ok == 0 and not emitted:
                    state.error = "corrupt_archive"
                return
            if out:
                emitted = True
                yield out
            if not dec.eof:
                break
            at += len(chunk) - len(dec.unused_data)
            chunk = dec.unused_data
            dec, fed = bz2.BZ2Decompressor(), False
    if fed and not dec.eof:
        state.error, state.detail = "truncated_archive", "bz2 stream ended early"


_XML_DECL_ENCODING = re.compile(rb"\s*<\?xml[^>]*?encoding\s*=\s*[\"']([A-Za-z][\w.:-]*)[\"']")
# XML 1.0 appendix F: the first four bytes of a document without a byte-order mark.
_NO_BOM_WIDE = {
    b"\x00\x00\x00<": "utf-32-be",
    b"<\x00\x00\x00": "utf-32-le",
    b"\x00<\x00?": "utf-16-be",
    b"<\x00?\x00": "utf-16-le",
}


def sniff_xml_encoding(head: bytes) -> tuple[str, int]:
    """(encoding, bytes to skip) of an XML document from its first bytes: a byte-order mark,
    the UTF-16/32 layout of ``<?``, or the declaration's ``encoding="..."``; else UTF-8."""
    enc, skip = sniff_bom(head)
    if enc:
        return enc, skip
    if head[:4] in _NO_BOM_WIDE:
        return _NO_BOM_WIDE[head[:4]], 0
    m = _XML_DECL_ENCODING.match(head)
    if m:
        try:
            name = codecs.lookup(m.group(1).decode("ascii")).name
        except LookupError:
            log.warning("unknown XML encoding %r: reading as UTF-8", m.group(1))
            return "utf-8", 0
        # A UTF-16/32 declaration on ASCII-compatible bytes is wrong; the bytes win.
        if not name.startswith(("utf-16", "utf-32")):
            return name, 0
    return "utf-8", 0


def _decode_text(chunks: Iterable[bytes | object], encoding: str | None) -> Iterator[str | object]:
    """Decompressed bytes -> text in the document's encoding (sniffed from its head when
    ``encoding`` is None); ``GAP`` passes through and resets a half-read character."""
    decoder = codecs.getincrementaldecoder(encoding)(errors="replace") if encoding else None
    head = b""
    for chunk in chunks:
        if chunk is GAP:
            if decoder is not None:
                decoder.reset()
            yield GAP
            continue
        if decoder is None:
            head += chunk
            if len(head) < 256:
                continue
            enc, skip = sniff_xml_encoding(head)
            decoder = codecs.getincrementaldecoder(enc)(errors="replace")
            chunk, head = head[skip:], b""
        yield decoder.decode(chunk)
    if decoder is None:
        enc, skip = sniff_xml_encoding(head)
        decoder = codecs.getincrementaldecoder(enc)(errors="replace")
        yield decoder.decode(head[skip:])
    yield decoder.decode(b"", final=True)


def iter_pages(
    chunks: Iterable[bytes | object],
    counter: StageCounter,
    state: DecodeState,
    encoding: str | None = None,
) -> Iterator[Page]:
    """Cut decompressed dump bytes into pages; malformed page XML is counted, not raised.

    A page whose end tag is damaged (another ``<page>`` comes first) and a page whose start
    tag is damaged (a ``</page>`` outside any page) are counted ``malformed_page_xml`` and
    reading goes on at the next ``<page>``. After a ``GAP`` (data lost to damage) the partial
    page is dropped: text on both sides of a gap is never joined into one page.
    """
    buf = ""
    saw_xml = False
    after_gap = False  # the tail of a page cut by a gap is not counted again

    def discard(end: int) -> None:
        """Text before ``end`` is dropped: a ``</page>`` in it ended a page that never began."""
        n = buf.count("</page>", 0, end) if not after_gap and end > 0 else 0
        if n:
            counter.add_in("documents", n)
            counter.add_dropped("documents", "malformed_page_xml", n)
            log.warning("page end without a page start (damaged <page> tag): %d page(s)", n)

    for text in _decode_text(chunks, encoding):
        if text is GAP:
            buf, after_gap = "", True
            continue
        buf += text
        if not saw_xml and any(
            t in buf for t in ("<page>", "<mediawiki", "</mediawiki>", "<siteinfo")
        ):
            saw_xml = True
        while True:
            i = buf.find("<page>")
            if i < 0:
                discard(len(buf) - 16)
                buf = buf[-16:]  # keep a possible partial tag
                break
            discard(i)
            after_gap = False
            j = buf.find("</page>", i + 6)
            if j < 0:
                buf = buf[i:]
                break
            k = buf.find("<page>", i + 6, j)
            if k >= 0:  # this page's end tag is damaged: drop it, go on at the next page
                counter.add_in("documents")
                counter.add_dropped("documents", "malformed_page_xml")
                log.warning("page without an end tag (damaged </page>): skipped")
                buf = buf[k:]
                continue
            xml = buf[i : j + 7]
            buf = buf[j + 7 :]
            page = _parse_page(xml, counter)
            if page is not None:
                yield page
    if not saw_xml and state.error is None:
        state.error = "not_xml"
    elif "<page>" in buf and "</mediawiki>" in buf[buf.rfind("<page>") :]:
        counter.add_in("documents")  # the last page's end tag is damaged, the dump is whole
        counter.add_dropped("documents", "malformed_page_xml")
    elif "<page>" in buf and state.error is None:
        state.error = "truncated_archive"


def _parse_page(xml: str, counter: StageCounter) -> Page | None:
    try:
        el = ET.fromstring(xml)
    except ET.ParseError as e:
        counter.add_in("documents")
        counter.add_dropped("documents", "malformed_page_xml")
        log.warning("malformed page XML: %s", e)
        return None
    ns_text = el.findtext("ns") or "0"
    rev = el.find("revision")
    text = rev.findtext("text") if rev is not None else None
    return Page(
        title=el.findtext("title") or "",
        ns=int(ns_text) if ns_text.strip().lstrip("-").isdigit() else -999,
        page_id=el.findtext("id") or "",
        redirect=el.find("redirect") is not None,
        text=text or "",
    )


def iter_range_pages(raw: BinaryIO, rng: ByteRange, counter: StageCounter) -> Iterator[Page]:
    """All pages of one byte range, counting the range (unit ``file_ranges``) and its errors."""
    counter.add_in("file_ranges")
    state = DecodeState()
    chunks = iter(_RangeReader(raw, rng.start, rng.end).chunks())
    first = next(chunks, b"")
    if not first:
        counter.add_dropped("file_ranges", "empty_file")
        log.warning("%s [%s:%s]: empty", rng.path, rng.start, rng.end)
        return
    stream: Iterable[bytes] = _prepend(first, chunks)
    if rng.compression == "bz2":
        stream = _decompress_bz2(stream, state)
    locator = f"{rng.path.rsplit('/', 1)[-1]}@{rng.start}"
    for page in iter_pages(stream, counter, state, rng.encoding):
        page.locator = locator
        yield page
    rec = state.recovery
    if rec.regions:
        # Each run of damaged blocks lost at least one page; which ones is unknowable.
        counter.add_in("documents", rec.regions)
        counter.add_dropped("documents", "corrupt_block", rec.regions)
        counter.add_event("file_ranges", "bytes_skipped", rec.bytes_skipped)
        log.warning(
            "%s [%s:%s]: %d damaged bz2 region(s), %d compressed bytes skipped, "
            "%d block(s) recovered",
            rng.path,
            rng.start,
            rng.end,
            rec.regions,
            rec.bytes_skipped,
            rec.blocks_ok,
        )
    if state.error:
        log.warning("%s [%s:%s]: %s %s", rng.path, rng.start, rng.end, state.error, state.detail)
        counter.add_dropped("file_ranges", state.error)
    else:
        counter.add_out("file_ranges")


def _prepend(first: bytes, rest: Iterable[bytes]) -> Iterator[bytes]:
    yield first
    yield from rest


class PageConverter:
    """Page -> Document: namespace/redirect checks, then wikitext -> text under a time limit."""

    def __init__(self, timeout_s: float, max_page_chars: int) -> None:
        from filters.mono.timeout import TimeLimitedWorker
        from filters.mono.wikitext import wikitext_to_text

        self.max_page_chars = max_page_chars
        self.worker = TimeLimitedWorker(wikitext_to_text, timeout_s)

    def __call__(self, page: Page, counter: StageCounter):
        from filters.mono.cleaner import Document

        counter.add_in("documents")
        if page.ns != 0:
            counter.add_dropped("documents", "other_namespace")
            return None
        if page.redirect:
            counter.add_dropped("documents", "redirect")
            return None
        if len(page.text) > self.max_page_chars:
            counter.add_dropped("documents", "page_too_large")
            return None
        status, text = self.worker(page.text)
        if status != "ok":
            reason = "parser_timeout" if status == "timeout" else "parser_error"
            counter.add_dropped("documents", reason)
            log.warning("page %r (%s): %s %s", page.title, page.page_id, reason, text or "")
            return None
        if not text.strip():
            counter.add_dropped("documents", "empty_text")
            return None
        return Document(
            text=text,
            source="wikipedia",
            doc_id=page.page_id,
            url_or_title=page.title,
            locator=page.locator,
        )

    def close(self) -> None:
        self.worker.close()
