"""On-disk formats shared by the stages: one definition of each schema.

The sentence contract of docs/design.md (kept and dropped rows share the row columns).
"""

from __future__ import annotations

import pyarrow as pa

# The columns of docs/design.md's sentence contract; kept and dropped rows share them.
SENTENCE_ROW_FIELDS = [
    ("text", pa.string()),
    ("lang", pa.string()),
    ("lang_score", pa.float32()),
    ("quality_score", pa.float32()),
    ("source", pa.string()),
    ("doc_id", pa.string()),
    ("url_or_title", pa.string()),
    # Where in the source file the document is: "<file>@<byte offset of its WARC record in the
    # decompressed WARC>" for CommonCrawl, "<dump file>" for Wikipedia (page id and title are
    # doc_id and url_or_title); empty when unknown (e.g. records after a damaged region).
    ("locator", pa.string()),
]
SENTENCE_ROW_NAMES = tuple(n for n, _ in SENTENCE_ROW_FIELDS)
SENTENCE_SCHEMA = pa.schema([*SENTENCE_ROW_FIELDS, ("dup_count", pa.int32())])
DROPPED_SCHEMA = pa.schema([*SENTENCE_ROW_FIELDS, ("reason", pa.string()), ("unit", pa.string())])


# Translation pairs (training input; the Parquet form of `labse_model train --pairs`).
PAIR_FIELDS = [
    ("src", pa.string()),
    ("trg", pa.string()),
    ("src_lang", pa.string()),
    ("trg_lang", pa.string()),
]
PAIR_SCHEMA = pa.schema(PAIR_FIELDS)
PAIR_REQUIRED = ("src", "trg")

# The provenance of a sentence, carried per side through mining and filtering as src_*/trg_*:
# where its first copy came from, and how many copies dedup collapsed into it (``dup_count``).
PROVENANCE_COLUMNS = ("url_or_title", "source", "doc_id", "locator", "dup_count")
PROVENANCE_TYPES = {"dup_count": pa.int64()}  # the rest are strings

# Mined pairs (`mining mine`: mined.parquet, by decreasing margin); optionally the direction
# features and, per side, the provenance columns ``{side}_url_or_title`` ... when the corpus has them.
MINED_PAIR_FIELDS = [
    *PAIR_FIELDS,
    ("margin", pa.float32()),
    ("src_id", pa.string()),
    ("trg_id", pa.string()),
    ("cosine", pa.float32()),
]
# What each search direction said of a pair (mining.mine.direction_features): its margin in the
# source's and in the target's candidate list (NaN where absent) and whether it is mutual (1/0).
MINED_DIRECTION_FIELDS = [
    ("margin_fwd", pa.float32()),
    ("margin_bwd", pa.float32()),
    ("mutual", pa.float32()),
]
# With a lexicon (``mining mine --lexicon``): the IBM Model 1 scores of the pair both ways.
MINED_LEXICAL_FIELDS = [("lex_fwd", pa.float32()), ("lex_bwd", pa.float32())]
MINED_PAIR_OPTIONAL = [
    *MINED_DIRECTION_FIELDS,
    *MINED_LEXICAL_FIELDS,
    *[
        (f"{side}_{name}", PROVENANCE_TYPES.get(name, pa.string()))
        for side in ("src", "trg")
        for name in PROVENANCE_COLUMNS
    ],
]
MINED_PAIR_SCHEMA = pa.schema([*MINED_PAIR_FIELDS, *MINED_PAIR_OPTIONAL])
MINED_PAIR_REQUIRED = tuple(n for n, _ in MINED_PAIR_FIELDS)

# Scored pairs (the CDS filter's output): mined pairs plus their CDS score.
SCORED_PAIR_SCHEMA = pa.schema(
    [*MINED_PAIR_FIELDS, ("cds_score", pa.float32()), *MINED_PAIR_OPTIONAL]
)
SCORED_PAIR_REQUIRED = (*MINED_PAIR_REQUIRED, "cds_score")


def conform(table: pa.Table, schema: pa.Schema, required: tuple[str, ...]) -> pa.Table:
    """``table`` with ``schema``'s column types and order (its other columns after them);
    a missing required column is a ValueError naming it."""
    missing = [n for n in required if n not in table.column_names]
    if missing:
        raise ValueError(f"table lacks required column(s) {missing} (has {table.column_names})")
    known = [f for f in schema if f.name in table.column_names]
    extra = [n for n in table.column_names if n not in schema.names]
    cols = [table.column(f.name).cast(f.type) for f in known] + [table.column(n) for n in extra]
    return pa.table(cols, names=[f.name for f in known] + extra)
