"""On-disk formats shared by the stages: one definition of each schema.

The sentence contract of DESIGN.md (kept and dropped rows share the row columns).
"""

from __future__ import annotations

import pyarrow as pa

# The columns of DESIGN.md's sentence contract; kept and dropped rows share them.
SENTENCE_ROW_FIELDS = [
    ("text", pa.string()),
    ("lang", pa.string()),
    ("lang_score", pa.float32()),
    ("quality_score", pa.float32()),
    ("source", pa.string()),
    ("doc_id", pa.string()),
    ("url_or_title", pa.string()),
]
SENTENCE_ROW_NAMES = tuple(n for n, _ in SENTENCE_ROW_FIELDS)
SENTENCE_SCHEMA = pa.schema([*SENTENCE_ROW_FIELDS, ("dup_count", pa.int32())])
DROPPED_SCHEMA = pa.schema([*SENTENCE_ROW_FIELDS, ("reason", pa.string()), ("unit", pa.string())])
