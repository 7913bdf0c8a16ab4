"""The miner's corpora as Arrow columns: the same cleaning as Python strings gave,
no Python object per row kept, and the output gathered slice by slice."""

from __future__ import annotations

import gzip
import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from labse_common.stats import StageCounter
from mining.corpus import make_corpus, prepare_side, read_corpus
from mining.mine import pairs_slices, pairs_table
from mining.output import write_pairs
from mining.retrieval import Pairs

# Whitespace that str.strip() removes but ASCII-only trimming would not, and text that merely
# looks alike (a different byte sequence is a different sentence).
TRICKY = [
    "a b",
    " ",
    "\u3000\u2028",
    "a b",
    None,
    "",
    "\x1c",
    "Ａ b",
    "a b ",
    "x\u00a0",
    "\u00a0",
    "a b",
    "Ａ b",
]


def python_reference(texts: list[str | None]) -> tuple[np.ndarray, list[list[int]]]:
    """What the list-based corpus did: str.strip() for emptiness, a dict for first occurrence."""
    texts = ["" if t is None else t for t in texts]
    rows = [i for i, t in enumerate(texts) if t.strip()]
    groups: dict[str, list[int]] = {}
    for r in rows:
        groups.setdefault(texts[r], []).append(r)
    return np.array(rows), list(groups.values())


def side_groups(side) -> list[list[int]]:
    return [side.members[a:b].tolist() for a, b in zip(side.offsets[:-1], side.offsets[1:])]


def test_cleaning_equals_the_python_string_rules_across_chunks() -> None:
    texts = TRICKY * 3
    # Three chunks cut mid-way through the duplicates: grouping must span chunk boundaries.
    chunked = pa.chunked_array([pa.array(texts[:5]), pa.array(texts[5:20]), pa.array(texts[20:])])
    vecs = np.ones((len(texts), 4), np.float32)
    vecs[2 * len(TRICKY)] = np.nan  # an invalid vector on a non-empty row ("a b" of chunk 3)
    rows, groups = python_reference(texts)
    counter = StageCounter()
    side = prepare_side(chunked, [vecs], True, counter, "s", materialize=False)
    want = [[r for r in g if r != 2 * len(TRICKY)] for g in groups]
    assert side_groups(side) == [g for g in want if g]
    c = {k: v for k, v in counter.counts.items() if v}
    assert c["s/dropped/empty_text"] == len(texts) - len(rows)
    assert c["s/dropped/nonfinite_value"] == 1
    assert c["s/event/duplicate_unified"] == len(rows) - 1 - len(groups)
    # Without unify every kept row is its own group, in row order.
    plain = prepare_side(texts, [vecs], False, StageCounter(), "s", materialize=False)
    assert plain.members.tolist() == [r for r in rows.tolist() if r != 2 * len(TRICKY)]


def test_a_corpus_keeps_no_python_object_per_row(tmp_path: Path) -> None:
    n = 100_000
    path = tmp_path / "c.parquet"
    pq.write_table(
        pa.table(
            {
                "text": [f"sentence number {i} of the corpus" for i in range(n)],
                "id": [f"doc{i}" for i in range(n)],
                "url_or_title": [f"https://example.org/{i}" for i in range(n)],
                "other": np.arange(n),
            }
        ),
        path,
    )
    tracemalloc.start()
    corpus = read_corpus(path, "en")
    held, _ = tracemalloc.get_traced_memory()  # Python's heap only: Arrow's buffers are not in it
    tracemalloc.stop()
    assert (
        len(corpus) == n and corpus.text[n - 1].as_py() == f"sentence number {n - 1} of the corpus"
    )
    # A list of str would hold >= 8 + 49 + len bytes per row (~9 MB for the text alone).
    assert held < 1_000_000, f"read_corpus keeps {held} bytes of Python objects for {n} rows"
    assert "other" not in corpus.table.column_names  # unused columns are not read
    assert set(corpus.meta) == {"id", "url_or_title"}


def test_output_slices_join_to_the_whole_table_and_write_the_same_files(tmp_path: Path) -> None:
    texts = [f"s{i}" for i in range(50)] + ["s3", "s7"]  # two duplicates, unified
    src_c = make_corpus(texts, {"id": [f"a{i}" for i in range(52)]}, "fr")
    trg_c = make_corpus([f"t{i}" for i in range(52)], None, "en")
    ones = [np.ones((52, 4), np.float32)]
    src = prepare_side(src_c.text, ones, True, StageCounter(), "s", materialize=False)
    trg = prepare_side(trg_c.text, ones, True, StageCounter(), "t", materialize=False)
    m = 50
    pairs = Pairs(np.arange(m), np.arange(m)[::-1].copy(), np.linspace(3, 1, m, dtype=np.float32))
    cos = np.linspace(0.9, 0.5, m, dtype=np.float32)
    feats = {"mutual": np.ones(m, np.float32)}
    parts = list(pairs_slices(pairs, cos, src, trg, src_c, trg_c, feats, rows=7))
    whole = pairs_table(pairs, cos, src, trg, src_c, trg_c, feats)
    assert [p.num_rows for p in parts] == [7] * 7 + [3]  # 52 rows: s3 and s7 paired twice
    assert pa.concat_tables(parts).equals(whole)
    rows = list(
        zip(
            whole.column("src").to_pylist(),
            whole.column("src_id").to_pylist(),
            whole.column("trg").to_pylist(),
            whole.column("trg_id").to_pylist(),
        )
    )
    assert rows[3] == ("s3", "a3", "t46", "46") and rows[4] == ("s3", "a50", "t46", "46")
    a_pq, a_tsv = write_pairs(whole, tmp_path / "whole")
    b_pq, b_tsv = write_pairs(iter(parts), tmp_path / "slices")
    assert pq.read_table(a_pq).equals(pq.read_table(b_pq))
    assert gzip.decompress(a_tsv.read_bytes()) == gzip.decompress(b_tsv.read_bytes())
    # No pairs: one empty slice that still has the output's columns.
    empty = list(pairs_slices(Pairs.empty(), np.zeros(0), src, trg, src_c, trg_c))
    assert len(empty) == 1 and empty[0].num_rows == 0 and "src_id" in empty[0].column_names
