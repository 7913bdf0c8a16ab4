"""One side of a mining run: its sentences, metadata, vectors, and the cleaning before kNN.

Cleaning drops rows whose text is empty or whose vector is NaN/inf/zero (counted), and with
``unify`` folds duplicate sentences into one representative (counted as an event) that is mapped
back to every original row after mining, as LASER's ``--unify``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from labse_common.datafiles import read_parquet
from labse_common.errors import InputError
from labse_common.formats import PROVENANCE_COLUMNS
from labse_common.output_dir import is_remote
from labse_common.stats import StageCounter
from labse_common.textio import read_lines
from mining.embeddings import MANIFEST, EmbeddingStore, normalized, valid_mask

log = logging.getLogger(__name__)

META_COLUMNS = ("id", *PROVENANCE_COLUMNS)


@dataclass
class Corpus:
    texts: list[str]
    meta: dict[str, list]  # always has "id"; optional provenance (url_or_title, source, ...)
    lang: str = ""


def read_corpus(path: str | os.PathLike, lang: str = "", flag: str | None = None) -> Corpus:
    """Read one sentence per line (``.txt``, any other suffix) or a Parquet with ``text``;
    a missing, damaged or foreign file is an InputError naming it (and ``flag``)."""
    if is_remote(os.fspath(path)):  # an embedding store on s3://, gs://: its shard Parquets
        table, p = EmbeddingStore(os.fspath(path)).all_metadata(), Path("store")
    else:
        p = Path(path)
        if not p.exists():
            raise InputError(p, "corpus not found", flag)
    if is_remote(os.fspath(path)) or p.is_dir() or p.suffix == ".parquet":
        # An embedding store directory carries its sentences in its shard Parquets.
        if not is_remote(os.fspath(path)):
            table = (EmbeddingStore(p).all_metadata() if (p / MANIFEST).is_file()
                     else read_parquet(p, flag=flag) if p.is_file() else pq.read_table(p))  # fmt: skip
        if "text" not in table.column_names:
            raise InputError(p, f"Parquet corpus needs a 'text' column, has {table.column_names}",
                             flag)  # fmt: skip
        texts = ["" if t is None else str(t) for t in table.column("text").to_pylist()]
        meta = {c: table.column(c).to_pylist() for c in META_COLUMNS if c in table.column_names}
        if not lang and "lang" in table.column_names and table.num_rows:
            lang = str(table.column("lang")[0].as_py() or "")
    else:
        texts = read_lines(p)
        meta = {}
    meta["id"] = [str(v) for v in meta.get("id", range(len(texts)))]
    return Corpus(texts, meta, lang)


@dataclass
class Side:
    """A cleaned side: compact unit vectors ``x`` and, per compact row, its original rows."""

    x: np.ndarray  # (n_unique, dim) float32 unit rows (empty when not materialised)
    offsets: np.ndarray  # CSR: members[offsets[u]:offsets[u+1]] are the rows of unique u
    members: np.ndarray
    n_rows: int

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    def representative(self) -> np.ndarray:
        return self.members[self.offsets[:-1]]


def gather_rows(blocks: Sequence[np.ndarray], rows: np.ndarray, dim: int) -> np.ndarray:
    """Rows (sorted global indices) of a list of blocks, as one float32 array."""
    out = np.empty((len(rows), dim), dtype=np.float32)
    start = 0
    for b in blocks:
        lo, hi = np.searchsorted(rows, [start, start + len(b)])
        if hi > lo:
            out[lo:hi] = b[rows[lo:hi] - start]
        start += len(b)
    return out


def prepare_side(
    texts: Sequence[str],
    blocks: Sequence[np.ndarray],
    unify: bool,
    counter: StageCounter,
    unit: str,
    materialize: bool = True,
) -> Side:
    """Drop empty/invalid rows, optionally unify duplicates, normalise; count everything.

    ``materialize=False`` leaves ``x`` empty: sharded mining loads the rows shard by shard.
    """
    n = len(texts)
    n_vec = sum(len(b) for b in blocks)
    if n_vec != n:
        raise InputError(None, f"{unit}: {n} sentences but {n_vec} embedding rows (row i = line i)")
    dim = blocks[0].shape[1] if blocks else 0
    counter.add_in(unit, n)
    nonempty = np.fromiter((bool(t.strip()) for t in texts), dtype=bool, count=n)
    valid = np.concatenate([valid_mask(b) for b in blocks]) if n else np.zeros(0, bool)
    counter.add_dropped(unit, "empty_text", int((~nonempty).sum()))
    counter.add_dropped(unit, "nan_or_zero_vector", int((nonempty & ~valid).sum()))
    rows = np.flatnonzero(nonempty & valid)
    counter.add_out(unit, len(rows))

    if unify and len(rows):
        first: dict[str, int] = {}
        group = np.fromiter(
            (first.setdefault(texts[r], len(first)) for r in rows), dtype=np.int64, count=len(rows)
        )
        order = np.argsort(group, kind="stable")  # members of a group stay in row order
        members = rows[order]
        offsets = np.zeros(len(first) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum(np.bincount(group, minlength=len(first)))
        counter.add_event(unit, "duplicate_unified", len(rows) - len(first))
    else:
        members = rows
        offsets = np.arange(len(rows) + 1, dtype=np.int64)
    side = Side(x=np.zeros((0, dim), np.float32), offsets=offsets, members=members, n_rows=n)
    if materialize:
        side.x = normalized(gather_rows(blocks, side.representative(), dim))
    return side


def expand_pairs(
    src: Side, trg: Side, src_u: np.ndarray, trg_u: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Map pairs of unique sentences back to every (src row, trg row) combination.

    Returns ``(src_rows, trg_rows, pair_index)``, pair_index pointing into the input pairs.
    """
    cs, ct = src.sizes[src_u], trg.sizes[trg_u]
    tot = cs * ct
    pi = np.repeat(np.arange(len(src_u)), tot)
    within = np.arange(int(tot.sum())) - np.repeat(np.cumsum(tot) - tot, tot)
    a, b = within // ct[pi], within % ct[pi]
    src_rows = src.members[src.offsets[src_u][pi] + a]
    trg_rows = trg.members[trg.offsets[trg_u][pi] + b]
    return src_rows, trg_rows, pi
