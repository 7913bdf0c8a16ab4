"""CommonCrawl WARC/WET records to Documents, with warcio.

- WET ``conversion`` records are already text.
- WARC ``response`` records with an HTML payload go through resiliparse's main-content
  extractor (maintained, C++ speed; boilerplate-aware ``main_content=True``).
- Other record types (warcinfo, request, metadata, non-HTML responses) are counted and skipped.

A malformed record header (wrong Content-Length, a damaged status line) makes warcio stop. We
resynchronise instead: skip to the next line that starts a WARC record and go on, counting a
``malformed_record`` for the damaged one. A header block whose ``WARC/1.x`` line was eaten by a
wrong Content-Length is recovered by restoring the version line.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import BinaryIO

from warcio.archiveiterator import ArchiveIterator
from warcio.exceptions import ArchiveLoadFailed

from filters.mono.cleaner import Document
from filters.mono.text import decode_bytes
from labse_common.stats import StageCounter
from pipelines.readers.streams import GuardedStream, PrefixedStream, open_decompressed

log = logging.getLogger(__name__)
logging.getLogger("warcio").setLevel(logging.ERROR)

_WARC_START = re.compile(rb"^WARC/\d\.\d+\s*$")
_FIRST_LINE = re.compile(r"first line: (.*)$", re.S)
_CHARSET = re.compile(r"charset=([\w.:-]+)", re.I)


def _resync(reader, err: ArchiveLoadFailed) -> tuple[PrefixedStream | None, bool]:
    """After a header parse failure, return (stream at the next record start, recovered).

    ``recovered`` is True when the failing record itself could be restored (its version line was
    eaten by the previous record's wrong Content-Length), False when it had to be skipped.
    """
    m = _FIRST_LINE.search(str(err))
    first = m.group(1).strip() if m else ""
    if first.startswith("WARC-") and ":" in first:
        return PrefixedStream(b"WARC/1.0\r\n" + first.encode("utf-8") + b"\r\n", reader), True
    while True:
        line = reader.readline()
        if not line:
            return None, False
        if _WARC_START.match(line):
            return PrefixedStream(line, reader), False


def _extract_html(payload: bytes, content_type: str) -> tuple[str, bool]:
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.encoding import detect_encoding
    from resiliparse.parse.html import HTMLTree

    m = _CHARSET.search(content_type)
    enc = m.group(1) if m else detect_encoding(payload)
    tree = HTMLTree.parse_from_bytes(payload, enc)
    text = extract_plain_text(
        tree, main_content=True, alt_texts=False, links=False, list_bullets=False, form_fields=False
    )
    return text, not m


def iter_warc_documents(raw: BinaryIO, path: str, counter: StageCounter) -> Iterator[Document]:
    """Yield Documents from one WARC/WET file (gzip or plain), counting everything."""
    counter.add_in("files")
    stream, empty = open_decompressed(raw)
    if empty:
        counter.add_dropped("files", "empty_file")
        return
    n_records = 0
    source: GuardedStream | PrefixedStream = stream
    name = path.rsplit("/", 1)[-1]
    while source is not None:
        it = ArchiveIterator(source, check_digests=False)
        # Offsets are exact until the first resynchronisation; after damage the position in the
        # file is unknown and the record id (doc_id) alone locates the record.
        exact = source is stream
        try:
            swallowed = None
            for rec in it:
                n_records += 1
                doc, swallowed = _record_to_document(rec, path, counter)
                if doc is not None:
                    # Only once the content is read: warcio reads to the record's end to know it
                    # (past its content: not for a record that ran into the next ones).
                    exact_here = exact and swallowed is None
                    doc.locator = f"{name}@{it.get_record_offset()}" if exact_here else name
                if doc is not None:
                    yield doc
                if swallowed is not None:
                    break
            # A Content-Length longer than its record read the next records as its content:
            # they are read again from where they start, not credited to this record's URL.
            source = PrefixedStream(swallowed, it.reader) if swallowed is not None else None
            if swallowed is not None:
                counter.add_event("documents", "overlong_record_resynced")
                log.warning(
                    "%s: a record's Content-Length runs into the next record; resynchronising", path
                )
        except ArchiveLoadFailed as e:
            if n_records == 0 and not str(e).count("WARC-"):
                source = None  # not a WARC file at all: nothing to resynchronise to
                break
            source, recovered = _resync(it.reader, e)
            if recovered:
                counter.add_event("documents", "warc_header_repaired")
            else:
                counter.add_in("documents")
                counter.add_dropped("documents", "malformed_record")
            log.warning("%s: malformed WARC record, resynchronising (%s)", path, str(e)[:120])
    damage = stream.damage
    if damage is not None and damage.regions:
        # Each damaged region lost at least one record (its header is unreadable, so how many
        # is unknown): counted as one dropped document per region, and the bytes skipped.
        counter.add_in("documents", damage.regions)
        counter.add_dropped("documents", "corrupt_member", damage.regions)
        counter.add_event("files", "bytes_skipped", damage.bytes_skipped)
        log.warning(
            "%s: %d damaged gzip region(s), %d bytes skipped (%s); %d member(s) intact",
            path,
            damage.regions,
            damage.bytes_skipped,
            damage.detail,
            damage.members_ok,
        )
    if stream.error:
        counter.add_dropped("files", stream.error)
        log.warning(
            "%s: %s after %d records (%s)",
            path,
            stream.error,
            n_records,
            getattr(stream, "detail", ""),
        )
    elif n_records == 0:
        counter.add_dropped("files", "not_warc")
        log.warning("%s: no WARC records found", path)
    else:
        counter.add_out("files")


def _split_overlong(payload: bytes) -> tuple[bytes, bytes | None]:
    """(this record's content, the bytes of the records its too long Content-Length took)."""
    m = _NEXT_RECORD.search(payload)
    if m is None:
        return payload, None
    return payload[: m.start()], payload[m.start() :].lstrip(b"\r\n")


#: A record boundary inside a record's content: the blank lines that end a record, then the
#: version line and a header of the next one.
_NEXT_RECORD = re.compile(rb"\r?\n\r?\nWARC/\d\.\d+\r?\nWARC-[A-Za-z-]+:")


def _record_to_document(
    rec, path: str, counter: StageCounter
) -> tuple[Document | None, bytes | None]:
    """The record as a Document (or None, counted), and the bytes of following records its
    content swallowed (None when its Content-Length was right)."""
    swallowed = None

    def content() -> bytes:
        nonlocal swallowed
        payload, swallowed = _split_overlong(rec.content_stream().read())
        return payload

    doc = _to_document(rec, path, counter, content)
    return doc, swallowed


def _to_document(rec, path: str, counter: StageCounter, content) -> Document | None:
    # Every WARC record is a document in the stats; the cleaner counts the kept ones out.
    counter.add_in("documents")
    rtype = rec.rec_type
    url = rec.rec_headers.get_header("WARC-Target-URI") or ""
    rid = rec.rec_headers.get_header("WARC-Record-ID") or f"{path}#{counter.counts['documents/in']}"
    try:
        if rtype == "conversion":
            payload = content()
            text, fallback = decode_bytes(payload)
        elif rtype == "response":
            ctype = (rec.http_headers.get_header("Content-Type") or "") if rec.http_headers else ""
            if "html" not in ctype.lower():
                content()  # warcio would read past it anyway; a swallowed record is found
                counter.add_dropped("documents", "not_html")
                return None
            payload = content()
            text, fallback = _extract_html(payload, ctype)
        else:
            content()
            counter.add_dropped("documents", f"skipped_{rtype}")
            return None
    except (ArchiveLoadFailed, ValueError, EOFError, OSError) as e:
        counter.add_dropped("documents", "malformed_record")
        log.warning("%s: unreadable record %s: %s", path, rid, e)
        return None
    if fallback:
        counter.add_event("documents", "charset_fallback")
    if not text.strip():
        counter.add_dropped("documents", "empty_payload")
        return None
    return Document(text=text, source="commoncrawl", doc_id=rid.strip("<>"), url_or_title=url)
