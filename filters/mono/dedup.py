"""Exact-duplicate keys for sentences.

Two sentences are duplicates when they are equal after Unicode compatibility folding, case
folding, and removal of punctuation and whitespace ("Hello, world!" == "hello world"). The key is
a 96-bit BLAKE2 digest in hex: short enough to shuffle billions of keys, and by the birthday
bound (n^2 / 2^97) the chance of any collision among 1e9 distinct sentences is about 1e-11.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

_STRIP = re.compile(r"[\W_]+", re.UNICODE)


def normalize_for_dedup(text: str) -> str:
    if text.isascii():  # ASCII is NFKC already and casefolds like lower(): skip the Unicode work
        return _STRIP.sub("", text.lower())
    return _STRIP.sub("", unicodedata.normalize("NFKC", text).casefold())


def dedup_key(text: str) -> str:
    norm = normalize_for_dedup(text) or text  # all-punctuation lines fall back to the raw text
    return hashlib.blake2b(norm.encode("utf-8"), digest_size=12).hexdigest()
