"""Multi-member gzip that survives damage: a corrupt member is skipped, the next one is found.

A WARC.gz compresses every record as its own gzip member, so a few damaged bytes spoil one
record, not the rest of the file. ``gzip.GzipFile`` stops at the first bad member; here each
member is decompressed whole and checked (zlib verifies the CRC-32 and length of a gzip
member), and only then passed on. On damage, the bytes up to the next ``1f 8b 08`` (gzip magic,
deflate) that really starts a member are skipped and counted.

A member larger than ``max_member_bytes`` decompressed (a whole file gzipped as one member) is
passed on in pieces before its check, as a plain gzip reader would: damage inside it can then
cut a record, which the WARC reader's own resynchronisation deals with.
"""

from __future__ import annotations

import io
import logging
import zlib
from collections.abc import Iterator
from typing import BinaryIO

log = logging.getLogger(__name__)

GZIP_MAGIC = b"\x1f\x8b\x08"
_CHUNK = 1 << 16
_FEED = 1 << 14  # bytes per decompress call: small, so a 2 KB member copies little
_KEEP = 1 << 22


class Damage:
    """What recovery skipped: damaged regions (each lost at least one member) and bytes."""

    def __init__(self) -> None:
        self.regions = 0
        self.bytes_skipped = 0
        self.error: str | None = None  # "truncated_archive" | "corrupt_archive" | None
        self.detail = ""
        self.members_ok = 0


def iter_members(
    raw: BinaryIO, damage: Damage, max_member_bytes: int = 64 << 20
) -> Iterator[bytes]:
    """Decompressed data of every intact member of a gzip stream, in order."""
    pending = bytearray()  # compressed bytes from the current member's start (or a later point)
    at_eof = False

    def more() -> bool:
        nonlocal at_eof
        if at_eof:
            return False
        b = raw.read(_CHUNK)
        if not b:
            at_eof = True
            return False
        pending.extend(b)
        return True

    resyncing = False
    while pending or more():
        dec = zlib.decompressobj(31)
        out: list[bytes] = []
        size = 0
        streamed = False  # part of this member was already passed on unchecked
        pos = 0  # bytes of ``pending`` fed to ``dec``
        failed: str | None = None
        try:
            while not dec.eof:
                if pos == len(pending) and not more():
                    failed = "truncated"
                    break
                n = min(len(pending) - pos, _FEED)
                with memoryview(pending) as mv:
                    piece = dec.decompress(mv[pos : pos + n])
                pos += n
                if piece:
                    out.append(piece)
                    size += len(piece)
                if size > max_member_bytes:
                    streamed = True
                    yield b"".join(out)
                    out, size = [], 0
                if pos > _KEEP and not dec.eof:  # a huge member: bound the memory held
                    del pending[:pos]
                    pos = 0
        except zlib.error as e:
            failed = f"corrupt: {e}"
        if failed is None:
            del pending[: pos - len(dec.unused_data)]
            damage.members_ok += 1
            resyncing = False
            if out:
                yield b"".join(out)
            continue
        if failed == "truncated":
            # The file ends inside a member: what it decoded is passed on (the reader keeps the
            # records that are whole) and the file is counted truncated.
            if not resyncing:
                damage.error, damage.detail = "truncated_archive", "gzip member cut short"
                if out:
                    yield b"".join(out)
            else:
                damage.bytes_skipped += len(pending)
            return
        if not resyncing:
            damage.regions += 1
            damage.detail = failed
            log.warning("corrupt gzip member (%s); looking for the next member", failed)
        if streamed:
            damage.error = "corrupt_archive"  # unchecked data of it was already passed on
        resyncing = True
        skip = _next_magic(pending, 1, more)  # a later member start, verified by the next loop
        damage.bytes_skipped += skip
        del pending[:skip]
    if resyncing and damage.members_ok == 0:
        damage.error = damage.error or "corrupt_archive"


def _next_magic(pending: bytearray, start: int, more) -> int:
    """Offset of the next GZIP_MAGIC at or after ``start`` (reading more if needed), or len."""
    pos = start
    while True:
        i = pending.find(GZIP_MAGIC, pos)
        if i >= 0:
            return i
        pos = max(start, len(pending) - len(GZIP_MAGIC) + 1)
        if not more():
            return len(pending)


class ChunkReader(io.RawIOBase):
    """A raw binary stream over an iterator of byte blocks (for io.BufferedReader)."""

    def __init__(self, blocks: Iterator[bytes]) -> None:
        self.blocks = blocks
        self.left = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        while not self.left:
            nxt = next(self.blocks, None)
            if nxt is None:
                return 0
            self.left = memoryview(nxt)
        n = min(len(b), len(self.left))
        b[:n] = self.left[:n]
        self.left = self.left[n:]
        return n


def open_gzip_members(raw: BinaryIO) -> tuple[io.BufferedReader, Damage]:
    damage = Damage()
    return io.BufferedReader(ChunkReader(iter_members(raw, damage)), 1 << 16), damage
