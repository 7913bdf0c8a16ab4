"""Byte-stream helpers: gzip sniffing, and turning decoder failures into a recorded EOF."""

from __future__ import annotations

import gzip
import zlib
from typing import BinaryIO

from pipelines.readers.gzip_members import Damage, open_gzip_members


class PrefixedStream:
    """A read-only stream that first returns ``prefix`` and then the rest of ``inner``."""

    def __init__(self, prefix: bytes, inner) -> None:
        self.prefix = prefix
        self.inner = inner

    def read(self, size: int = -1) -> bytes:
        if not self.prefix:
            return self.inner.read(size)
        if size is None or size < 0:
            out, self.prefix = self.prefix + self.inner.read(), b""
            return out
        out, self.prefix = self.prefix[:size], self.prefix[size:]
        if len(out) < size:
            out += self.inner.read(size - len(out))
        return out

    def readline(self, size: int = -1) -> bytes:
        if self.prefix:
            i = self.prefix.find(b"\n")
            if i >= 0:
                out, self.prefix = self.prefix[: i + 1], self.prefix[i + 1 :]
                return out
            out, self.prefix = self.prefix, b""
            return out + self.inner.readline()
        return self.inner.readline()


class GuardedStream:
    """Wraps a decompressing stream; a truncated or corrupt archive becomes EOF + ``error``.

    Libraries downstream (warcio, the XML page splitter) treat EOFError as a clean end of input,
    which would lose the truncation silently. Recording it here lets the reader count it.
    """

    def __init__(self, inner: BinaryIO, damage: Damage | None = None) -> None:
        self.inner = inner
        self._error: str | None = None
        self.detail = ""
        self.damage = damage  # what a resynchronising decompressor skipped

    @property
    def error(self) -> str | None:
        return self._error or (self.damage.error if self.damage else None)

    @error.setter
    def error(self, value: str | None) -> None:
        self._error = value

    def read(self, size: int = -1) -> bytes:
        if self.error:
            return b""
        try:
            # read1: at most one underlying read, so the data decoded before a truncation point
            # is returned instead of being discarded with the exception (io.BufferedReader.read
            # would lose it).
            read1 = getattr(self.inner, "read1", None)
            return read1(size if size and size > 0 else 1 << 16) if read1 else self.inner.read(size)
        except (EOFError, zlib.error, gzip.BadGzipFile, OSError) as e:
            self.error = "truncated_archive" if isinstance(e, EOFError) else "corrupt_archive"
            self.detail = str(e)
            return b""

    def readline(self, size: int = -1) -> bytes:
        if self.error:
            return b""
        try:
            return self.inner.readline(size)
        except (EOFError, zlib.error, gzip.BadGzipFile, OSError) as e:
            self.error = "truncated_archive" if isinstance(e, EOFError) else "corrupt_archive"
            self.detail = str(e)
            return b""


def open_decompressed(raw: BinaryIO) -> tuple[GuardedStream, bool]:
    """Sniff gzip/bz2 by magic bytes; returns (guarded decompressed stream, is_empty).

    gzip is read member by member, skipping damaged members (``stream.damage`` counts them).
    """
    head = raw.read(4)
    if not head:
        return GuardedStream(PrefixedStream(b"", raw)), True
    stream = PrefixedStream(head, raw)
    if head[:2] == b"\x1f\x8b":
        members, damage = open_gzip_members(stream)
        return GuardedStream(members, damage), False
    if head[:3] == b"BZh":
        import bz2

        return GuardedStream(bz2.BZ2File(stream, mode="rb")), False
    return GuardedStream(stream), False
