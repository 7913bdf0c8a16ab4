"""The training stream's block table: every block of a language, held as columns.

Every rank holds every block of the corpus (a lane's blocks are dealt from a per-epoch
permutation of all of them), and at the paper's scale that is many: 17B sentences at
``block_rows`` 1,000 are 17M blocks, plus the pairs'. As one frozen dataclass per block that
was ~180 B resident per block (~3 GB per rank, on every rank of a node) and several times that
while the scan's results were exchanged as dicts. Here a block is one row of five integer
columns (28 B) and the file paths are stored once; a :class:`Block` is built only for a block
about to be read. Pickled (``all_gather_object``) a table is its arrays' bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

FORMATS = ("parquet", "text")
_COLS = (
    ("file", np.int32),
    ("part", np.int32),
    ("rows", np.int32),
    ("line", np.int64),
    ("offset", np.int64),
)
_PENDING_MAX = 65536  # appended blocks buffered as tuples before they join the columns


@dataclass(frozen=True, slots=True)
class Block:
    """One block: ``rows`` usable records of a text file or a Parquet row group."""

    path: str
    fmt: str  # "parquet" | "text"
    part: int  # Parquet row group, or block number within a text file
    rows: int  # usable records in the block
    line: int = 0  # text: first raw line of the block; Parquet: first row within the row group
    offset: int = 0  # text: byte offset of that line (0 for .gz, read from the start)


class BlockList:
    """A sequence of :class:`Block` stored as columns (file index, part, rows, line, offset).

    Indexing and iterating give :class:`Block` objects; :attr:`rows` gives the rows column for
    the lanes' arithmetic without building any."""

    __slots__ = ("paths", "fmts", "_cols", "_chunks", "_pending", "_index")

    def __init__(self, blocks: Iterable[Block] = ()) -> None:
        self.paths: list[str] = []
        self.fmts: list[str] = []  # one per path: a file is Parquet or text
        self._cols: dict[str, np.ndarray] = {n: np.empty(0, t) for n, t in _COLS}
        self._chunks: list[dict[str, np.ndarray]] = []  # joined into _cols on first read
        self._pending: list[tuple[int, int, int, int, int]] = []
        self._index: dict[str, int] = {}
        for b in blocks:
            self.append(b)

    # -- building ---------------------------------------------------------------------------

    def _file(self, path: str, fmt: str) -> int:
        i = self._index.get(path)
        if i is None:
            if fmt not in FORMATS:
                raise ValueError(f"block format {fmt!r} is not one of {FORMATS}")
            i = self._index[path] = len(self.paths)
            self.paths.append(path)
            self.fmts.append(fmt)
        elif self.fmts[i] != fmt:
            raise ValueError(f"{path}: blocks of two formats ({self.fmts[i]}, {fmt})")
        return i

    def append(self, b: Block) -> None:
        self._pending.append((self._file(b.path, b.fmt), b.part, b.rows, b.line, b.offset))
        if len(self._pending) >= _PENDING_MAX:
            self._flush_pending()

    def _flush_pending(self) -> None:
        if self._pending:
            a = np.array(self._pending, dtype=np.int64)
            self._chunks.append({n: a[:, j].astype(t) for j, (n, t) in enumerate(_COLS)})
            self._pending = []

    def extend(self, other: BlockList | Iterable[Block]) -> None:
        if not isinstance(other, BlockList):
            for b in other:
                self.append(b)
            return
        cols = other.columns()
        if not len(cols["file"]):
            return
        self._flush_pending()
        remap = np.array(
            [self._file(p, f) for p, f in zip(other.paths, other.fmts)], dtype=np.int32
        )
        self._chunks.append({**cols, "file": remap[cols["file"]]})

    # -- reading ----------------------------------------------------------------------------

    def columns(self) -> dict[str, np.ndarray]:
        """The five columns, each one array (joined once after appends)."""
        self._flush_pending()
        if self._chunks:
            parts = [self._cols, *self._chunks]
            self._cols = {n: np.concatenate([p[n] for p in parts]) for n, _ in _COLS}
            self._chunks = []
        return self._cols

    @property
    def rows(self) -> np.ndarray:
        return self.columns()["rows"]

    def total_rows(self) -> int:
        return int(self.rows.sum(dtype=np.int64))

    def __len__(self) -> int:
        return len(self.columns()["file"])

    def __getitem__(self, i: int) -> Block:
        c = self.columns()
        f = int(c["file"][i])
        return Block(
            self.paths[f],
            self.fmts[f],
            int(c["part"][i]),
            int(c["rows"][i]),
            int(c["line"][i]),
            int(c["offset"][i]),
        )

    def __iter__(self) -> Iterator[Block]:
        for i in range(len(self)):
            yield self[i]

    def nbytes(self) -> int:
        """Bytes of the columns (the paths are extra, once per file)."""
        return sum(a.nbytes for a in self.columns().values())

    def sort(self) -> None:
        """In place, by (path, part, line): the same order on every rank whatever the scan's."""
        c = self.columns()
        if not len(c["file"]):
            return
        path_rank = np.empty(len(self.paths), dtype=np.int64)
        path_rank[np.argsort(np.array(self.paths, dtype=object), kind="stable")] = np.arange(
            len(self.paths)
        )
        order = np.lexsort((c["line"], c["part"], path_rank[c["file"]]))
        self._cols = {n: a[order] for n, a in c.items()}

    # -- pickling (torch.distributed all_gather_object) --------------------------------------

    def __getstate__(self) -> tuple:
        return self.paths, self.fmts, self.columns()

    def __setstate__(self, state: tuple) -> None:
        self.paths, self.fmts, self._cols = state
        self._chunks, self._pending = [], []
        self._index = {p: i for i, p in enumerate(self.paths)}

    def __repr__(self) -> str:
        return f"BlockList({len(self)} blocks, {len(self.paths)} files)"
