"""The one embedding store: layout, writer and (memory-mapped) reader.

Every stage that writes or reads sentence embeddings uses this module (writers through the one
embedding path, ``labse_model.embed_store``): ``labse_model encode``
(a folder output or ``--shard-size``), ``mining embed``, ``pipelines.embed`` (Beam workers write
shards, a last step the manifest), ``mining mine``/``pipelines.mine`` and evaluation.

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
labse_common.embedding_store convert OLD NEW`` turns either into a store. Numbered shards must
run from ``00000`` without a gap: a missing one would shift every later row off its line, so it is
an error naming the shard.

Damaged or inconsistent stores (a manifest that is not JSON, a shard of the wrong shape, a
truncated ``.npy``) raise :class:`~labse_common.errors.InputError` naming the file; the classes
below are also ``FileNotFoundError``/``ValueError`` so older callers that catch those still do.
"""

from __future__ import annotations

import argparse
import glob
import io
import json
import logging
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from labse_common import datafiles, filesystems
from labse_common.errors import InputError
from labse_common.filesystems import is_remote, join

# Named, not __name__: under `python -m` the module is __main__, whose logs are muted.
log = logging.getLogger("labse_common.embedding_store")

MANIFEST = "store.json"
FORMAT = "labse-embedding-store"
VERSION = 1
DTYPES = ("float16", "float32")


class StoreNotFound(InputError, FileNotFoundError):
    """No store (no ``store.json``), no ``.npy``, or a numbered shard missing."""

    def __reduce__(self):  # InputError's arguments, so the error crosses process boundaries
        return type(self), (self.path, self.problem, self.flag)


class StoreDamaged(InputError, ValueError):
    """A store or array that cannot be used: bad manifest, wrong shape, dimensions disagree."""

    def __reduce__(self):
        return type(self), (self.path, self.problem, self.flag)


def read_bytes(path: str) -> bytes:
    if is_remote(path):
        with filesystems.open_read(path) as f:
            return f.read()
    with open(path, "rb") as f:
        return f.read()


def write_bytes(path: str, data: bytes) -> None:
    """Write a whole file: FileSystems for remote paths; locally via a temporary name + rename."""
    if is_remote(path):
        with filesystems.create(path) as f:
            f.write(data)
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def exists(path: str) -> bool:
    return filesystems.exists(path) if is_remote(path) else os.path.exists(path)


def load_npy(path: str, mmap: bool = True, flag: str | None = None) -> np.ndarray:
    """A ``.npy`` array: memory-mapped when local (and ``mmap``), read into memory when remote;
    a truncated or foreign file is an InputError naming it (:func:`labse_common.datafiles.load_npy`)."""
    return datafiles.load_npy(path, flag, mmap=mmap)


def npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


# --- rows that can be compared ------------------------------------------------------------
# Every reader that turns stored rows into unit vectors (mining's sides, its bounded reads,
# evaluation, margin scoring) goes through these two functions, so a row dropped here is never
# divided there: one rule, one float32 norm computed the same way everywhere.

NONFINITE_VALUE = "nonfinite_value"  # a NaN or inf component
ZERO_VECTOR = "zero_vector"  # norm 0 in float32 (all zeros, or too small to square)
NONFINITE_NORM = "nonfinite_norm"  # finite components whose float32 norm overflows (x 1e30)
#: The stats.json drop reasons of a row that cannot be compared, by code (0 = usable).
VECTOR_DROP_REASONS: tuple[str, ...] = (NONFINITE_VALUE, ZERO_VECTOR, NONFINITE_NORM)


def _norms(x32: np.ndarray) -> np.ndarray:
    # Overflow and NaN are expected here (they are what the caller looks for): no warning.
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        return np.linalg.norm(x32, axis=1)


def vector_problems(x: np.ndarray, chunk: int = 65536) -> np.ndarray:
    """Per row, 0 when it can be compared, else ``1 + i`` for ``VECTOR_DROP_REASONS[i]``;
    read ``chunk`` rows at a time (a memory-mapped shard is never copied whole)."""
    out = np.zeros(len(x), dtype=np.int8)
    for s in range(0, len(x), chunk):
        b = np.asarray(x[s : s + chunk], dtype=np.float32)
        if not b.size:
            continue
        norms = _norms(b)
        code = np.where(~np.isfinite(norms), 3, np.where(norms > 0, 0, 2))
        code[~np.isfinite(b).all(axis=1)] = 1
        out[s : s + chunk] = code
    return out


def count_problems(codes: np.ndarray) -> dict[str, int]:
    """``{reason: rows}`` of :func:`vector_problems` codes, every reason present (0 or more)."""
    n = np.bincount(codes.astype(np.int64), minlength=len(VECTOR_DROP_REASONS) + 1)
    return {r: int(n[i + 1]) for i, r in enumerate(VECTOR_DROP_REASONS)}


def valid_mask(x: np.ndarray, chunk: int = 65536) -> np.ndarray:
    """True for rows that can be compared (:func:`vector_problems` code 0)."""
    return vector_problems(x, chunk) == 0


def unit_rows(x: np.ndarray, where: str | None = None) -> np.ndarray:
    """Float32 copy with unit rows (cosine == inner product).

    Rows :func:`vector_problems` flags must be dropped first: with ``where`` one of them is a
    ``ValueError`` naming ``where`` (a caller's bug, not the user's data); without it they come
    out non-finite or zero, as a division gives them."""
    x = np.array(x, dtype=np.float32, copy=True)
    if not x.size:
        return x
    norms = _norms(x)[:, None]
    if where is not None and not (np.isfinite(norms) & (norms > 0)).all():
        raise ValueError(
            f"{where}: a NaN/inf/zero vector or an overflowing norm; drop rows "
            "with vector_problems first"
        )
    with np.errstate(divide="ignore", invalid="ignore"):
        x /= norms
    return x


def blocks_dim(blocks: Sequence[np.ndarray]) -> int:
    """The dimension of a list of blocks (an empty block says nothing); ValueError if they
    disagree."""
    dims = {b.shape[1] for b in blocks if b.shape[0]}
    if len(dims) > 1:
        raise ValueError(f"embedding blocks disagree on dimension: {sorted(dims)}")
    return dims.pop() if dims else (blocks[0].shape[1] if blocks else 0)


@dataclass
class ShardInfo:
    name: str
    rows: int


def check_shard_name(name: str, manifest: str, flag: str | None = None) -> str:
    """``name`` when it is a plain file name inside the store; else :class:`StoreDamaged`.

    A manifest is data: a name such as ``../../x`` would make a reader open (and a mining run
    mine) a file outside the store, so only a bare name without separators is accepted."""
    bad = (
        not name
        or name in (".", "..")
        or "/" in name
        or "\\" in name
        or "\x00" in name
        or os.path.isabs(name)
    )
    if bad:
        raise StoreDamaged(
            manifest,
            f"shard name {name!r} is not a file name inside the store "
            "(no '/', '\\', '..' or absolute path)",
            flag,
        )
    return name


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
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "dim": int(dim),
        "dtype": dtype,
        "shards": [{"name": s.name, "rows": int(s.rows)} for s in shards],
    }
    write_bytes(join(store, MANIFEST), json.dumps(manifest, indent=2).encode("utf-8"))


class EmbeddingStore:
    """Read access to a store folder (local or any Beam filesystem)."""

    def __init__(self, path: str | os.PathLike, flag: str | None = None) -> None:
        self.path = os.fspath(path)
        self.flag = flag
        manifest = join(self.path, MANIFEST)
        if not exists(manifest):
            raise StoreNotFound(self.path, f"not an embedding store (no {MANIFEST})", flag)
        try:
            meta = json.loads(read_bytes(manifest).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise StoreDamaged(manifest, f"not a store manifest ({e})", flag) from e
        if not isinstance(meta, dict):
            raise StoreDamaged(manifest, "not a store manifest (not a JSON object)", flag)
        if meta.get("format", FORMAT) != FORMAT or int(meta.get("version", 1)) > VERSION:
            raise StoreDamaged(
                manifest,
                f"unsupported store format {meta.get('format')!r} version {meta.get('version')!r}",
                flag,
            )
        try:
            self.dim = int(meta["dim"])
            self.dtype = str(meta["dtype"])
            self.shards = [ShardInfo(str(s["name"]), int(s["rows"])) for s in meta["shards"]]
        except (KeyError, TypeError, ValueError) as e:
            raise StoreDamaged(manifest, f"not a store manifest (bad or missing {e})", flag) from e
        for s in self.shards:
            check_shard_name(s.name, manifest, flag)

    @property
    def remote(self) -> bool:
        return is_remote(self.path)

    def __len__(self) -> int:
        return sum(s.rows for s in self.shards)

    def shard_path(self, i: int, ext: str = "npy") -> str:
        return join(self.path, f"{self.shards[i].name}.{ext}")

    def vectors(self, i: int, mmap: bool = True) -> np.ndarray:
        """Vectors of shard ``i``: memory-mapped when local (no copy until used)."""
        path = self.shard_path(i)
        arr = load_npy(path, mmap=mmap, flag=self.flag)
        if arr.ndim != 2 or arr.shape[1] != self.dim or len(arr) != self.shards[i].rows:
            raise StoreDamaged(
                path,
                f"shard {i} has shape {arr.shape}, manifest says "
                f"({self.shards[i].rows}, {self.dim})",
                self.flag,
            )
        return arr

    def metadata(self, i: int) -> pa.Table:
        return datafiles.read_parquet(self.shard_path(i, "parquet"), flag=self.flag)

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


def write_pieces(
    store: str,
    index: int,
    vecs: Sequence[np.ndarray],
    columns: Sequence[dict[str, list]],
    dtype: str,
) -> ShardInfo:
    """Shard ``index`` from consecutive pieces (vectors + row-table columns, same keys in each):
    how :class:`StoreWriter` and the Beam embed job's workers write a shard, so both give the
    same bytes for the same rows."""
    merged: dict[str, list] = {}
    for m in columns:
        for k, v in m.items():
            merged.setdefault(k, []).extend(v)
    arr = np.concatenate(vecs).astype(dtype, copy=False)
    return write_shard(store, shard_name(index), arr, pa.table(merged))


class StoreWriter:
    """Append vectors (and their ids/metadata) to a store, one shard per ``rows_per_shard``.

    Holds at most one shard in memory; ``store.json`` is written by :meth:`close`.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        dim: int,
        dtype: str = "float16",
        rows_per_shard: int = 100_000,
    ) -> None:
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
        self.shards.append(
            write_pieces(self.path, len(self.shards), self._vecs, self._meta, self.dtype)
        )
        self._vecs, self._meta, self._pending = [], [], 0

    def close(self) -> EmbeddingStore:
        self._flush()
        write_manifest(self.path, self.dim, self.dtype, self.shards)
        return EmbeddingStore(self.path)


_NUMBERED = re.compile(r"\.(\d{5})\.npy$")


def legacy_shards(path: str, flag: str | None = None) -> list[str]:
    """``<stem>.00000.npy, ...`` for ``<stem>.npy`` (the old ``encode --shard-size`` output).

    The numbers must run from 00000 without a gap: row i is line i only when every shard is
    there, so a missing one is a :class:`StoreNotFound` naming it."""
    if is_remote(path) or not path.endswith(".npy"):
        return []
    found = sorted(glob.glob(glob.escape(path[:-4]) + ".[0-9][0-9][0-9][0-9][0-9].npy"))
    found = [p for p in found if _NUMBERED.search(p)]
    for want, p in enumerate(found):
        got = int(_NUMBERED.search(p).group(1))
        if got != want:
            missing = f"{path[:-4]}.{want:05d}.npy"
            raise StoreNotFound(
                missing,
                f"numbered shard missing (found {len(found)} shards, "
                f"the next is {os.path.basename(p)}); rows after it would no "
                "longer match their lines",
                flag,
            )
    return found


def load_vectors(
    path: str | os.PathLike, mmap: bool = True, flag: str | None = None
) -> list[np.ndarray]:
    """A store folder, a ``.npy`` file or old numbered ``.npy`` shards, as a list of blocks."""
    p = os.fspath(path)
    if exists(join(p, MANIFEST)):
        return EmbeddingStore(p, flag).all_vectors()
    if not is_remote(p) and os.path.isdir(p):
        raise StoreNotFound(p, f"not an embedding store (no {MANIFEST})", flag)
    if not exists(p):
        old = legacy_shards(p, flag)
        if old:
            return [_check_2d(load_npy(s, mmap, flag), s, flag) for s in old]
        raise StoreNotFound(p, "embeddings not found", flag)
    if not p.endswith(".npy"):
        raise StoreDamaged(
            p, f"embeddings must be a .npy file or a store folder ({MANIFEST})", flag
        )
    return [_check_2d(load_npy(p, mmap, flag), p, flag)]


def _check_2d(arr: np.ndarray, path: str, flag: str | None = None) -> np.ndarray:
    if arr.ndim == 1 and arr.size == 0:
        arr = arr.reshape(0, 0)
    if arr.ndim != 2:
        raise StoreDamaged(path, f"embeddings must be 2-D (rows, dim), got shape {arr.shape}", flag)
    return arr


def convert(
    src: str, dst: str, rows_per_shard: int = 100_000, flag: str | None = None
) -> EmbeddingStore:
    """Any layout :func:`load_vectors` reads -> a store (ids = row numbers) written in ``dst``
    (a folder this call may fill; the CLI passes its claimed temporary folder)."""
    blocks = load_vectors(src, flag=flag)
    dims = {b.shape[1] for b in blocks if len(b)}
    if len(dims) > 1:
        raise StoreDamaged(src, f"blocks disagree on dimension {sorted(dims)}", flag)
    dim = dims.pop() if dims else (blocks[0].shape[1] if blocks else 0)
    dtype = "float16" if blocks and blocks[0].dtype == np.float16 else "float32"
    w = StoreWriter(dst, dim, dtype, rows_per_shard)
    row = 0
    for b in blocks:
        w.add(np.asarray(b), [str(i) for i in range(row, row + len(b))])
        row += len(b)
    return w.close()


def build_parser() -> argparse.ArgumentParser:
    from labse_common.cli import (
        add_log_level_option,
        add_overwrite_option,
        command_parser,
        sub_command,
    )

    summary = (
        "Convert a .npy, or the old numbered <stem>.NNNNN.npy shards, into an embedding store\n"
        "folder (store.json + shard_NNNNN.npy/.parquet), the layout every command reads."
    )
    examples = ["python -m labse_common.embedding_store convert emb.npy emb/"]
    ap = command_parser("python -m labse_common.embedding_store", summary, examples=examples)
    add_log_level_option(ap)
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub_command(
        sub,
        "convert",
        "Convert a .npy or old numbered .npy shards into an embedding store folder.",
        "A store is store.json plus shard_NNNNN.npy/.parquet files: the layout every command\n"
        "reads.",
        examples,
    )
    c.add_argument("src", help="a .npy, or <stem>.npy for <stem>.00000.npy ... shards")
    c.add_argument("dst", help="store folder to write (must not exist or be empty)")
    c.add_argument("--rows-per-shard", type=int, default=100_000, help="rows per shard file")
    add_overwrite_option(c, "store folder (old files are removed at the end)")
    add_log_level_option(c, subcommand=True)
    return ap


def _cmd_convert(args: argparse.Namespace) -> int:
    from labse_common.errors import UsageError
    from labse_common.output_dir import claim_output

    if args.rows_per_shard < 1:
        raise UsageError(f"--rows-per-shard {args.rows_per_shard}: must be >= 1")
    legacy_shards(args.src, "src")  # a gap in the numbering fails before the claim
    with claim_output(args.dst, args.overwrite) as out:  # claim, write in tmp, commit
        store = convert(args.src, out.tmp, args.rows_per_shard, flag="src")
        n, dim = len(store), store.dim
    log.info("wrote %d vectors (dim %d) to %s", n, dim, args.dst)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from labse_common.command import run_main
    from labse_common.logs import setup_logging

    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)
    return run_main(lambda: _cmd_convert(args), log, args=args)


if __name__ == "__main__":
    from labse_common.command import exit_with

    exit_with(main)
