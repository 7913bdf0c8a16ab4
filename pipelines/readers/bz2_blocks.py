"""Recovering the intact blocks of a damaged bzip2 stream, as bzip2recover does.

A bzip2 stream is a sequence of independently compressed blocks (up to 900 kB of text each),
each starting with the 48-bit magic 0x314159265359 and ending where the next block's magic, or
the end-of-stream magic 0x177245385090, begins. Blocks are NOT byte-aligned, so they are found
by a bit-level search: for each of the 8 bit offsets, the 5 or 6 bytes of the magic that are
whole at that offset are searched with ``bytes.find`` (C speed), and each hit is checked on all
48 bits. A block is decompressed on its own by wrapping its bits in a one-block stream (header
``BZh9``, the block, the end-of-stream magic and the stream CRC, which for one block equals the
block's CRC); the standard ``bz2`` module then verifies the block's CRC, so a damaged block fails
and an intact one comes back exactly.
"""

from __future__ import annotations

import bz2
from collections.abc import Iterator

BLOCK_MAGIC = 0x314159265359
EOS_MAGIC = 0x177245385090
BLOCK, EOS = "block", "eos"


def _patterns(magic: int) -> list[tuple[int, bytes, int]]:
    """(bit shift, bytes wholly inside the magic at that shift, their index in the window)."""
    out = []
    for shift in range(8):
        window = (magic << (8 - shift)).to_bytes(7, "big")  # magic starts ``shift`` bits in
        out.append((shift, window[0:6], 0) if shift == 0 else (shift, window[1:6], 1))
    return out


_PATTERNS = [(BLOCK, BLOCK_MAGIC, _patterns(BLOCK_MAGIC)), (EOS, EOS_MAGIC, _patterns(EOS_MAGIC))]


def read_bits(buf: bytes | bytearray, bitpos: int, nbits: int) -> int:
    """``nbits`` bits of ``buf`` from bit ``bitpos`` (most significant bit first), as an int."""
    b0, b1 = bitpos >> 3, (bitpos + nbits + 7) >> 3
    v = int.from_bytes(buf[b0:b1], "big")
    v >>= (b1 - b0) * 8 - (bitpos - b0 * 8) - nbits
    return v & ((1 << nbits) - 1)


def find_marks(buf: bytes | bytearray, lo: int = 0) -> list[tuple[int, str]]:
    """Block and end-of-stream magics in ``buf`` starting at byte ``lo`` or later, as sorted
    (bit position, kind); a magic is reported only when all of its 48 bits are in ``buf``."""
    found: dict[int, str] = {}
    nbits = len(buf) * 8
    for kind, magic, pats in _PATTERNS:
        for shift, fixed, lead in pats:
            i = buf.find(fixed, lo + lead)
            while i >= 0:
                bit = (i - lead) * 8 + shift
                if bit >= lo * 8 and bit + 48 <= nbits and read_bits(buf, bit, 48) == magic:
                    found[bit] = kind
                i = buf.find(fixed, i + 1)
    return sorted(found.items())


def decode_block(buf: bytes | bytearray, start: int, end: int) -> bytes:
    """Decompress the block occupying bits [start, end) of ``buf``; raises OSError/ValueError
    (via the bz2 module) when the block is damaged."""
    n = end - start
    if n < 48 + 32 + 1:
        raise ValueError("bz2 block too short")
    bits = read_bits(buf, start, n)
    crc = (bits >> (n - 80)) & 0xFFFFFFFF  # the 32 bits after the block magic
    v = (int.from_bytes(b"BZh9", "big") << n) | bits
    v = (((v << 48) | EOS_MAGIC) << 32) | crc
    total = 32 + n + 80
    pad = -total % 8
    return bz2.decompress((v << pad).to_bytes((total + pad) // 8, "big"))


class BlockRecovery:
    """What block recovery skipped."""

    def __init__(self) -> None:
        self.regions = 0  # runs of consecutive damaged blocks (each lost at least one page)
        self.bytes_skipped = 0
        self.blocks_ok = 0
        self.truncated = False


GAP = object()  # yielded where damaged data was left out: text on both sides is not contiguous


class _Marks:
    """The block and end-of-stream marks of ``buf``, found as more compressed bytes come in
    (a mark may straddle two chunks: the last bytes scanned are scanned again)."""

    def __init__(self, buf: bytearray, chunks: Iterator[bytes]) -> None:
        self.buf = buf
        self.chunks = chunks
        self.marks = find_marks(buf)
        self.scanned = len(buf)

    def read_more(self) -> bool:
        nxt = next(self.chunks, None)
        if nxt is None:
            return False
        self.buf.extend(nxt)
        lo = max(0, self.scanned - 6)
        last = self.marks[-1][0] if self.marks else -1
        self.marks.extend(m for m in find_marks(self.buf, lo) if m[0] > last)
        self.scanned = len(self.buf)
        return True

    def end_of(self, j: int) -> int | None:
        """The bit position where mark ``j``'s block ends (the next mark); None at the end."""
        while j + 1 >= len(self.marks):
            if not self.read_more():
                return None
        return self.marks[j + 1][0]

    def first_unpassed(self, fail_bit: int) -> int:
        """The index of the first block the streaming decompressor had not passed on."""
        j = 0
        while True:
            while j >= len(self.marks) and self.read_more():
                pass
            if j >= len(self.marks):
                return j
            e = self.end_of(j)
            if self.marks[j][1] == BLOCK and (e is None or e > fail_bit):
                return j
            j += 1

    def forget_before(self, j: int) -> int:
        """Forget the bytes before mark ``j`` (memory stays about one block); mark j's index."""
        if j < len(self.marks):
            cut = (self.marks[j][0] >> 3) - 1
            if cut > 0:
                del self.buf[:cut]
                self.marks[:] = [(p - cut * 8, k) for p, k in self.marks[j:]]
                self.scanned -= cut
                return 0
        return j


def recover_blocks(
    buf: bytearray, base: int, fail_at: int, chunks: Iterator[bytes], rec: BlockRecovery
) -> Iterator[bytes | object]:
    """Decode block by block from the first block that had not been passed on yet.

    ``buf`` holds compressed bytes from absolute offset ``base`` (some before the failure),
    ``fail_at`` is the absolute offset of the first byte of the decompress call that failed: a
    block that ended before it was already passed on by the streaming decompressor, one that
    ends after it was not (bz2 emits a block only once all of its bits are read). ``chunks``
    gives the rest of the compressed bytes. Yields decompressed bytes, and ``GAP`` at each run
    of damaged blocks.
    """
    scan = _Marks(buf, chunks)
    marks = scan.marks  # one list, updated in place as bytes come in and are forgotten
    fail_bit = (fail_at - base) * 8  # bit positions below are relative to ``base``
    j = scan.first_unpassed(fail_bit)
    in_gap = False
    rel = fail_at - base
    at_stream_start = (
        buf[rel : rel + 3] == b"BZh" and j < len(marks) and marks[j][0] == fail_bit + 32
    )
    if j < len(marks) and marks[j][0] > fail_bit and not at_stream_start:
        # The block that failed started before the bytes kept: it is lost.
        rec.regions += 1
        rec.bytes_skipped += (marks[j][0] - fail_bit) // 8
        in_gap = True
        yield GAP
    elif j >= len(marks):
        rec.regions += 1
        rec.bytes_skipped += max(0, len(buf) - fail_at + base)
        yield GAP
        return
    while j < len(marks):
        pos, kind = marks[j]
        e = scan.end_of(j)
        if kind != BLOCK:
            j += 1
            continue
        end = e if e is not None else len(buf) * 8
        try:
            out = decode_block(buf, pos, end)
        except (OSError, ValueError, EOFError):
            out = None
        if out is None:
            rec.bytes_skipped += (end - pos) // 8
            if e is None:
                rec.truncated = True
            if not in_gap:
                rec.regions += 1
                in_gap = True
                yield GAP
        else:
            rec.blocks_ok += 1
            in_gap = False
            if out:
                yield out
            if e is None:
                rec.truncated = True  # a last block without its end-of-stream marker
        j = scan.forget_before(j + 1)
