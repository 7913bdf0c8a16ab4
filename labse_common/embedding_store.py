"""The one embedding store: layout, writer and (memory-mapped) reader.

Every stage that writes or reads sentence embeddings uses this module: ``labse_model encode``
(a folder output or ``--shard-size``), ``mining embed``, ``pipelines.embed`` (Beam workers write
shards, the driver the manifest), ``mining mine``/``pipelines.mine`` and evaluation.

Layout of a store folder::

    store.json              {"format": "labse-embedding-store", "version": 1, "dim": D,
                             "dtype": "float16"|"float32", "shards": [{"name": ..., "rows": n}]}
    shard_00000.npy         (n, D) vectors, row i = row i of the Parquet beside it
    shard_00000.parquet     columns: id, text, and any metadata (url_or_title, row, ...)

Stores go through Beam's ``FileSystems`` when the path has a scheme (``s3://``, ``gs://``), so
the same code reads and writes object stores; ``FileSystems`` is imported only then, so local
stores work without Beam. Local shards are memory-mapped (a corpus larger than RAM is searched
block by block); remote shards are streamed: each is read into memory when asked for, one at a
time by :meth:`EmbeddingStore.iter_vectors` (``all_vectors`` on a remote store holds them all).

Also read wherever a store is accepted: a plain ``.npy`` (row i = line i of the text), and the
older numbered shards ``<stem>.00000.npy, <stem>.00001.npy, ...`` that ``labse_model encode
--shard-size`` wrote before it wrote stores (pass ``<stem>.npy``); ``python -m
labse_common.embedding_store convert OLD NEW`` turns either into a store.
"""

from __future__ import annotations

import argparse
import glob
import io
import json
import logging
import os
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from labse_common.output_dir import is_remote, join

log = logging.getLogger(__name__)

MANIFEST = "store.json"
FORMAT = "labse-embedding-store"
VERSION = 1
DTYPES = ("float16", "float32")


def _fs():
    from labse_common import filesystems  # lazy: local stores work without Beam

    return filesystems


def read_bytes(path: str) -> bytes:
    if is_remote(path):
        with _fs().open_read(path) as f:
            return f.read()
    with open(path, "rb") as f:
        return f.read()


def write_bytes(path: str, data: bytes) -> None:
    """Write a whole file: FileSystems for remote paths; locally via a temporary name + rename."""
    if is_remote(path):
        with _fs().create(path) as f:
            f.write(data)
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def exists(path: str) -> bool:
    return _fs().exists(path) if is_remote(path) else os.path.exists(path)


def load_npy(path: str, mmap: bool = True) -> np.ndarray:
    """A ``.npy`` array: memory-mapped when local (and ``mmap``), read into memory when remote."""
    if is_remote(path):
        return np.load(io.BytesIO(read_bytes(path)), allow_pickle=False)
    return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)


def npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


@dataclass
class ShardInfo:
    name: str
    rows: int


def shard_name(i: int) -> str:
    return f"shard_{i:05d}"


def write_shard(store: str, name: str, vectors: np.ndarray, table: pa.Table) -> ShardInfo:
    """``name.npy`` + ``name.parquet`` in ``store``; usable from a Beam worker."""
    if len(table) != len(vectors):
        raise ValueError(f"{name}: {len(table)} metadata rows for {len(vectors)} vectors")
    write_bytes(join(store, f"{name}.npy"), npy_bytes(vectors))
    buf = io.BytesIO()
    pq.write_table(table, buf)
    write_bytes(join(store, f"{name}.parquet"), buf.getvalue())
    return ShardInfo(name, len(vectors))


def write_manifest(store: str, dim: int, dtype: str, shards: Sequence[ShardInfo]) -> None:
    """``store.json``, written last: a store without it is incomplete and is not read."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, not {dtype!r}")
    manifest = {"format": FORMAT, "version": VERSION, "dim": int(dim), "dtype": dtype,
                "shards": [{"name": s.name, "rows": int(s.rows)} for s in shards]}  # fmt: skip
    write_bytes(join(store, MANIFEST), json.dumps(manifest, indent=2).encode("utf-8"))


class EmbeddingStore:
    """Read access to a store folder (local or any Beam filesystem)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        manifest = join(self.path, MANIFEST)
        if not exists(manifest):
            raise FileNotFoundError(f"not an embedding store (no {MANIFEST}): {self.path}")
        meta = json.loads(read_bytes(manifest).decode("utf-8"))
        if meta.get("format", FORMAT) != FORMAT or int(meta.get("version", 1)) > VERSION:
            raise ValueError(f"{manifest}: unsupported store format {meta.get('format')!r} "
                             f"version {meta.get('version')!r}")  # fmt: skip
        self.dim = int(meta["dim"])
        self.dtype = str(meta["dtype"])
        self.shards = [ShardInfo(s["name"], int(s["rows"])) for s in meta["shards"]]

    @property
    def remote(self) -> bool:
        return is_remote(self.path)

    def __len__(self) -> int:
        return sum(s.rows for s in self.shards)

    def shard_path(self, i: int, ext: str = "npy") -> str:
        return join(self.path, f"{self.shards[i].name}.{ext}")

    def vectors(self, i: int, mmap: bool = True) -> np.ndarray:
        """Vectors of shard ``i``: memory-mapped when local (no copy until used)."""
        arr = load_npy(self.shard_path(i), mmap=mmap)
        if arr.ndim != 2 or arr.shape[1] != self.dim or len(arr) != self.shards[i].rows:
            raise ValueError(
                f"{self.path}: shard {i} has shape {arr.shape}, manifest says "
                f"({self.shards[i].rows}, {self.dim})")
        return arr

    def metadata(self, i: int) -> pa.Table:
        path = self.shard_path(i, "parquet")
        return pq.read_table(io.BytesIO(read_bytes(path)) if self.remote else path)

    def iter_vectors(self) -> Iterator[np.ndarray]:
        for i in range(len(self.shards)):
            yield self.vectors(i)

    def all_vectors(self) -> list[np.ndarray]:
        """Every shard (a list, so nothing is concatenated); memory-mapped when local."""
        return list(self.iter_vectors())

    def all_metadata(self) -> pa.Table:
        if not self.shards:
            return pa.table({"row": pa.array([], pa.int64()), "id": pa.array([], pa.string())})
        tables = [self.metadata(i) for i in range(len(self.shards))]
        return pa.concat_tables(tables, promote_options="default")


class StoreWriter:
    """Append vectors (and their ids/metadata) to a store, one shard per ``rows_per_shard``.

    Holds at most one shard in memory; ``store.json`` is written by :meth:`close`.
    """

    def __init__(self, path: str | os.PathLike, dim: int, dtype: str = "float16",
                 rows_per_shard: int = 100_000) -> None:  # fmt: skip
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be float16 or float32, not {dtype!r}")
        if rows_per_shard < 1:
            raise ValueError("rows_per_shard must be >= 1")
        self.path = os.fspath(path)
        if not is_remote(self.path):
            os.makedirs(self.path, exist_ok=True)
        self.dim, self.dtype, self.rows_per_shard = dim, dtype, rows_per_shard
        self.shards: list[ShardInfo] = []
        self._vecs: list[np.ndarray] = []
        self._meta: list[dict[str, list]] = []
        self._pending = 0
        self._row = 0

    def add(self, vectors: np.ndarray, ids: Sequence[str], **columns: Sequence) -> None:
        vectors = np.asarray(vectors)
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise ValueError(f"vectors of shape {vectors.shape} do not match store dim {self.dim}")
        if len(ids) != len(vectors):
            raise ValueError(f"{len(ids)} ids for {len(vectors)} vectors")
        start = 0
        while start < len(vectors):
            take = min(self.rows_per_shard - self._pending, len(vectors) - start)
            sl = slice(start, start + take)
            meta = {"row": list(range(self._row, self._row + take)), "id": list(ids[sl])}
            for name, col in columns.items():
                meta[name] = list(col[sl])
            self._vecs.append(vectors[sl])
            self._meta.append(meta)
            self._pending += take
            self._row += take
            start += take
            if self._pending >= self.rows_per_shard:
                self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        vecs = np.concatenate(self._vecs).astype(self.dtype, copy=False)
        merged: dict[str, list] = {}
        for m in self._meta:
            for k, v in m.items():
                merged.setdefault(k, []).extend(v)
        self.shards.append(write_shard(self.path, shard_name(len(self.shards)), vecs,
                                       pa.table(merged)))  # fmt: skip
        self._vecs, self._meta, self._pending = [], [], 0

    def close(self) -> EmbeddingStore:
        self._flush()
        write_manifest(self.path, self.dim, self.dtype, self.shards)
        return EmbeddingStore(self.path)


_NUMBERED = re.compile(r"\.(\d{5})\.npy$")


def legacy_shards(path: str) -> list[str]:
    """``<stem>.00000.npy, ...`` for ``<stem>.npy`` (the old ``encode --shard-size`` output)."""
    if is_remote(path) or not path.endswith(".npy"):
        return []
    found = sorted(glob.glob(glob.escape(path[:-4]) + ".[0-9][0-9][0-9][0-9][0-9].npy"))
    return [p for p in found if _NUMBERED.search(p)]


def load_vectors(path: str | os.PathLike, mmap: bool = True) -> list[np.ndarray]:
    """A store folder, a ``.npy`` file or old numbered ``.npy`` shards, as a list of blocks."""
    p = os.fspath(path)
    if exists(join(p, MANIFEST)):
        return EmbeddingStore(p).all_vectors()
    if not is_remote(p) and os.path.isdir(p):
        raise FileNotFoundError(f"not an embedding store (no {MANIFEST}): {p}")
    if not exists(p):
        old = legacy_shards(p)
        if old:
            return [_check_2d(load_npy(s, mmap), s) for s in old]
        raise FileNotFoundError(f"embeddings not found: {p}")
    if not p.endswith(".npy"):
        raise ValueError(f"embeddings must be a .npy file or a store folder ({MANIFEST}): {p}")
    return [_check_2d(load_npy(p, mmap), p)]


def _check_2d(arr: np.ndarray, path: str) -> np.ndarray:
    if arr.ndim == 1 and arr.size == 0:
        arr = arr.reshape(0, 0)
    if arr.ndim != 2:
        raise ValueError(f"{path}: embeddings must be 2-D (rows, dim), got shape {arr.shape}")
    return arr


def convert(src: str, dst: str, rows_per_shard: int = 100_000) -> EmbeddingStore:
    """Any layout :func:`load_vectors` reads -> a store (ids = row numbers)."""
    blocks = load_vectors(src)
    dims = {b.shape[1] for b in blocks if len(b)}
    if len(dims) > 1:
        raise ValueError(f"{src}: blocks disagree on dimension {sorted(dims)}")
    dim = dims.pop() if dims else (blocks[0].shape[1] if blocks else 0)
    dtype = "float16" if blocks and blocks[0].dtype == np.float16 else "float32"
    w = StoreWriter(dst, dim, dtype, rows_per_shard)
    row = 0
    for b in blocks:
        w.add(np.asarray(b), [str(i) for i in range(row, row + len(b))])
        row += len(b)
    return w.close()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m labse_common.embedding_store",
        description="Convert a .npy or the old numbered <stem>.NNNNN.npy shards into an "
        "embedding store folder (store.json + shard_NNNNN.npy/.parquet).")
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("convert", help="old layout -> store")
    c.add_argument("src", help="a .npy, or <stem>.npy for <stem>.00000.npy ... shards")
    c.add_argument("dst", help="store folder to write (must not exist or be empty)")
    c.add_argument("--rows-per-shard", type=int, default=100_000)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    from labse_common.output_dir import exclusive_output

    try:
        with exclusive_output(args.dst) as out:
            store = convert(args.src, out.tmp, args.rows_per_shard)
            n, dim = len(store), store.dim
    except (FileNotFoundError, ValueError) as e:
        log.error("%s", e)
        return 2
    print(f"wrote {n} vectors (dim {dim}) to {args.dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
