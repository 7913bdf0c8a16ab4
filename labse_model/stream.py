"""Streaming, sharded training input for both stages (pretraining sentences and pairs): the
inputs, their blocks and the scan that counts them, and reading one block.

Nothing here holds a corpus in memory. The moving parts:

* **Blocks.** Every input shard (Parquet, TSV/text, ``.gz`` ok, any path Beam's ``FileSystems``
  opens, so ``s3://`` and ``gs://`` work) is cut into blocks: runs of ``block_rows`` usable
  records of a text file or of a Parquet row group. A scan at start-up (each rank scans its
  share of the shards, the results are exchanged) counts the usable records of every block and the drops per
  reason, so ``stats.json`` counts each input record once, however many epochs the run makes.
  Every rank holds the table of all blocks as columns (``stream_blocks.BlockList``); the
  commands keep the scan in their output for a restart (``scan_cache``).
* **Bytes.** Files are read by the one pair reader, :mod:`labse_common.pair_files`; the memory
  the shuffle windows take is bounded in :mod:`labse_model.stream_windows`.
* **Lanes** (the order records are trained in, and its memory) are in :mod:`labse_model.lanes`.

Records are ``str`` (sentences) or ``(src, trg)`` tuples (pairs).
"""

from __future__ import annotations

import logging
import os
import sys
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from labse_common.datafiles import LostRows, count_lost
from labse_common.errors import InputError
from labse_common.filesystems import is_remote
from labse_common.pair_files import (
    gzip_by_name,
    parquet_groups,
    parquet_rows,
    path_exists,
    rows_of,
    text_lines,
)
from labse_common.stats import StageCounter
from labse_model.stream_blocks import Block, BlockList
from labse_model.vocab.pretokenize import has_words

log = logging.getLogger(__name__)

SENTENCES = "sentences"
PAIRS = "pairs"
FILE_UNIT = "files"
GROUP_UNIT = "languages"
DEFAULT_GROUP = "all"
DATA_SUFFIXES = (".parquet", ".tsv", ".tsv.gz", ".txt", ".txt.gz", ".gz")
_CONVERT_ROWS = 4096  # Parquet rows decoded and converted to Python at a time


# --- which files (reading them is labse_common.pair_files') ---------------------------------


def _match(pattern: str) -> list[str]:
    if not is_remote(pattern):
        import glob

        return sorted(glob.glob(pattern))
    from labse_common import filesystems

    return sorted(filesystems.match(pattern))


def _is_data_file(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return not name.startswith(("_", ".")) and name.endswith(DATA_SUFFIXES)


class NoUsableInput(InputError, ValueError):
    """The user's files hold nothing to train on: one line and exit 2 on the command line (a
    ValueError too, for library callers)."""


def expand_inputs(specs: Sequence[str], what: str = "input file") -> dict[str, list[str]]:
    """FILE, GLOB or DIR arguments -> ``{group: [files]}``.

    A directory holding ``<lang>/`` folders (the corpus jobs' layout) gives one group per
    language; files and globs go to the group ``all``. A spec that matches nothing is an error.
    """
    groups: dict[str, list[str]] = {}
    for spec in specs:
        spec = spec.rstrip("/") if len(spec) > 1 else spec
        if not is_remote(spec) and os.path.isdir(spec):
            found = False
            for name in sorted(os.listdir(spec)):
                sub = os.path.join(spec, name)
                if os.path.isdir(sub) and not name.startswith(("_", ".")):
                    files = [f for f in _match(os.path.join(sub, "*")) if _is_data_file(f)]
                    groups.setdefault(name, []).extend(files)
                    found = True  # an empty language folder is counted later, not an error
                elif _is_data_file(sub):
                    groups.setdefault(DEFAULT_GROUP, []).append(sub)
                    found = True
            if not found:
                raise FileNotFoundError(f"no data files or <lang>/ folders in {spec}")
            continue
        if is_remote(spec) and not any(c in spec for c in "*?[") and not path_exists(spec):
            # A remote folder (object stores have no directories): <lang>/ objects under it.
            found = [f for f in _match(spec + "/*/*") if _is_data_file(f)]
            for f in found:
                lang = f.rsplit("/", 2)[-2]
                if not lang.startswith(("_", ".")):
                    groups.setdefault(lang, []).append(f)
            if found:
                continue
        if any(c in spec for c in "*?["):
            files = [f for f in _match(spec) if _is_data_file(f)]
            if not files:
                raise FileNotFoundError(f"no data files match {spec}")
        else:
            if not path_exists(spec):
                raise FileNotFoundError(f"{what} not found: {spec}")
            files = [spec]
        groups.setdefault(DEFAULT_GROUP, []).extend(files)
    return {g: sorted(dict.fromkeys(fs)) for g, fs in groups.items()}


# --- record parsing --------------------------------------------------------------------------


def parse_pair_line(line: str) -> tuple[str, str] | str:
    """A TSV pair line -> ``(src, trg)`` or the name of the reason it is dropped."""
    line = line.rstrip("\r\n")
    if not line.strip():
        return "blank_line"
    cols = line.split("\t")
    if len(cols) not in (2, 4):
        return "malformed"
    s, t = cols[0].strip(), cols[1].strip()
    if not s or not t:
        return "empty_side"
    return s, t


def parse_sentence_line(line: str) -> str:
    """A text line (first TSV column) -> the sentence, or ``""`` when there is none."""
    return line.rstrip("\r\n").split("\t", 1)[0].strip()


# --- blocks and the scan --------------------------------------------------------------------


@dataclass
class ScanResult:
    groups: dict[str, BlockList] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    heldout: list = field(default_factory=list)
    # Python bytes of every SIZE_SAMPLE-th usable record and how many were sampled: what one
    # record costs in a shuffle window (window_bound).
    sample_bytes: int = 0
    sample_n: int = 0

    def merge(self, other: ScanResult) -> None:
        for g, bl in other.groups.items():
            self.groups.setdefault(g, BlockList()).extend(bl)
        c = StageCounter()
        c.merge(self.counts)
        c.merge(other.counts)
        self.counts = dict(c.counts)
        self.heldout.extend(other.heldout)
        self.sample_bytes += other.sample_bytes
        self.sample_n += other.sample_n

    def add_size_sample(self, rec) -> None:
        self.sample_bytes += record_bytes(rec)
        self.sample_n += 1

    def mean_record_bytes(self) -> float:
        """Mean Python bytes of a usable record (0 when none was sampled)."""
        return self.sample_bytes / self.sample_n if self.sample_n else 0.0

    def sort(self) -> None:
        for bl in self.groups.values():
            bl.sort()

    def total_rows(self) -> int:
        return sum(bl.total_rows() for bl in self.groups.values())


SIZE_SAMPLE = 64  # one usable record in 64 is measured by the scan (sys.getsizeof)


def record_bytes(rec) -> int:
    """Python memory of one record as a shuffle window holds it: the str, or the tuple and its
    two strs."""
    if isinstance(rec, tuple):
        return sys.getsizeof(rec) + sum(sys.getsizeof(x) for x in rec)
    return sys.getsizeof(rec)


def is_heldout(record, fraction: float) -> bool:
    """A stable hashed share of the records, kept out of training for held-out metrics."""
    if fraction <= 0:
        return False
    text = record if isinstance(record, str) else "\t".join(record)
    return (zlib.crc32(text.encode("utf-8")) % 100000) < fraction * 100000


@dataclass(frozen=True)
class _HeldOut:
    record: object


#: The drop reason of a record (or one side of a pair) that the tokenizer would clean to nothing.
EMPTY_AFTER_NORMALISATION = "empty_after_normalisation"


class _Validator:
    """Applies the per-record rules of a kind, counting drops; used by the scan and readers."""

    def __init__(self, kind: str, unit: str, counter: StageCounter | None, heldout: float):
        self.kind, self.unit, self.counter, self.heldout = kind, unit, counter, heldout

    def _drop(self, reason: str) -> None:
        if self.counter is not None:
            self.counter.add_dropped(self.unit, reason)

    def line(self, line: str):
        if self.counter is not None:
            self.counter.add_in(self.unit)
        if self.kind == PAIRS:
            rec = parse_pair_line(line)
            if isinstance(rec, str):
                self._drop(rec)
                return None
        else:
            rec = parse_sentence_line(line)
            if not rec:
                self._drop("blank_line")
                return None
        return self._final(rec)

    def value(self, rec):
        """A Parquet value (str, or (src, trg)); None/blank counts as empty."""
        if self.counter is not None:
            self.counter.add_in(self.unit)
        if self.kind == PAIRS:
            s, t = ((rec[0] or "").strip(), (rec[1] or "").strip())
            if not s or not t:
                self._drop("empty_side")
                return None
            rec = (s, t)
        else:
            rec = (rec or "").strip()
            if not rec:
                self._drop("empty")
                return None
        return self._final(rec)

    def _final(self, rec):
        # strip() keeps U+200B and friends: a side of only those tokenizes to nothing, so it is
        # dropped here (counted), and all-such input ends in "no usable pairs", not exit 0.
        if not all(map(has_words, rec if isinstance(rec, tuple) else (rec,))):
            self._drop(EMPTY_AFTER_NORMALISATION)
            return None
        if is_heldout(rec, self.heldout):
            self._drop("heldout_for_eval")
            return _HeldOut(rec)
        if self.counter is not None:
            self.counter.add_out(self.unit)
        return rec


class SchemaError(InputError, ValueError):
    """A Parquet shard without the columns a stage needs: the user's mistake, not damage (one
    line naming the file, exit 2 on the command line; a ValueError for library callers)."""


def _parquet_columns(kind: str, names: Sequence[str], path: str) -> list[str]:
    need = ["src", "trg"] if kind == PAIRS else ["text"]
    missing = [c for c in need if c not in names]
    if missing:
        raise SchemaError(path, f"Parquet {kind} file lacks column(s) {missing}")
    return need


def _keep_heldout(rec: _HeldOut, res: ScanResult, max_heldout: int) -> None:
    if len(res.heldout) < max_heldout:
        res.heldout.append(rec.record)


def _scan_parquet(
    path: str, v: _Validator, block_rows: int, max_heldout: int, res: ScanResult
) -> list[Block]:
    """A Parquet file's blocks: each row group cut into runs of ``block_rows`` usable records
    (a shuffle window holds blocks, and writers' row groups can be 100k+ rows)."""
    blocks: list[Block] = []
    damaged = groups = 0
    for rg, table in parquet_groups(path, lambda names: _parquet_columns(v.kind, names, path)):
        groups += 1
        n, raw, start = 0, 0, 0
        # The group is decoded whole here, and again whole when it is trained on.
        if isinstance(table, LostRows):
            # A damaged group gets no block, so training never reads it; the file's other
            # groups are still used (each is located by the footer).
            count_lost(v.counter, v.unit, path, table)
            damaged += 1
            continue
        for value in rows_of(table):
            rec = v.value(value)
            raw += 1
            if isinstance(rec, _HeldOut):
                _keep_heldout(rec, res, max_heldout)
            elif rec is not None:
                n += 1
                if raw % SIZE_SAMPLE == 0:
                    res.add_size_sample(rec)
                if n == block_rows:
                    blocks.append(Block(path, "parquet", rg, n, start))
                    n, start = 0, raw
        if n:
            blocks.append(Block(path, "parquet", rg, n, start))
    if damaged and damaged == groups:
        raise OSError(f"every row group of {path} is damaged")
    return blocks


def _scan_text(
    path: str, v: _Validator, block_rows: int, max_heldout: int, res: ScanResult
) -> list[Block]:
    """A text/TSV file's blocks: runs of ``block_rows`` usable lines, each located by its
    first line and byte offset; a cut .gz keeps its complete lines before the cut."""
    blocks: list[Block] = []
    n, line_no, start_line, start_off = 0, 0, 0, 0
    try:
        for line, off in text_lines(path):
            rec = v.line(line)
            line_no += 1
            if isinstance(rec, _HeldOut):
                _keep_heldout(rec, res, max_heldout)
            elif rec is not None:
                n += 1
                if line_no % SIZE_SAMPLE == 0:
                    res.add_size_sample(rec)
                if n == block_rows:
                    blocks.append(Block(path, "text", len(blocks), n, start_line, start_off))
                    n, start_line, start_off = 0, line_no, max(off, 0)
    except (EOFError, zlib.error, OSError) as e:
        log.warning(
            "%s is truncated or corrupt after line %d (%s): its readable lines are used",
            path,
            line_no,
            e,
        )
        v.counter.add_event(FILE_UNIT, "truncated")
    if n:
        blocks.append(Block(path, "text", len(blocks), n, start_line, start_off))
    return blocks


def _scan_file(
    path: str,
    kind: str,
    group: str,
    block_rows: int,
    heldout: float,
    max_heldout: int,
    res: ScanResult,
    counter: StageCounter,
) -> None:
    """One file's blocks into ``res`` (under ``group``), its records counted in ``counter``."""
    v = _Validator(kind, kind, counter, heldout)
    read = _scan_parquet if path.endswith(".parquet") else _scan_text
    blocks = read(path, v, block_rows, max_heldout, res)
    if blocks:
        res.groups.setdefault(group, BlockList()).extend(blocks)
        counter.add_out(FILE_UNIT)
    else:
        counter.add_dropped(FILE_UNIT, "empty")
        log.warning("%s holds no usable %s", path, kind)


def scan(
    groups: dict[str, list[str]],
    kind: str,
    block_rows: int = 10000,
    heldout_fraction: float = 0.0,
    max_heldout: int = 0,
    rank: int = 0,
    world_size: int = 1,
) -> ScanResult:
    """Count the usable records of every block of this rank's share of the files.

    Unreadable files are counted (``files`` dropped ``unreadable``) and skipped. Merge the
    results of all ranks with :meth:`ScanResult.merge` (see :func:`scan_distributed`).
    """
    res = ScanResult()
    counter = StageCounter()
    k = 0
    for group in sorted(groups):
        for path in groups[group]:
            mine = k % world_size == rank
            k += 1
            if not mine:
                continue
            counter.add_in(FILE_UNIT)
            sub = StageCounter()
            part = ScanResult()
            try:
                _scan_file(path, kind, group, block_rows, heldout_fraction, max_heldout, part, sub)
            except SchemaError:
                raise  # a wrong schema is the user's error, not a damaged shard
            except Exception as e:  # pyarrow/IO raise many types on a damaged shard
                # Survived and counted: a warning; the command's one error line is its own.
                log.warning("unreadable %s file skipped: %s (%s)", kind, path, e)
                counter.add_dropped(FILE_UNIT, "unreadable")
                continue
            counter.merge(sub)
            res.merge(part)
    res.counts = dict(counter.counts)
    res.heldout = res.heldout[:max_heldout]
    return res


def scan_distributed(
    groups, kind, block_rows, heldout_fraction, max_heldout, info, cache_dir: str | None = None
) -> ScanResult:
    """:func:`scan` on every rank's share, exchanged so every rank knows every block.

    With ``cache_dir`` (a run's output folder) the result is kept there, keyed on the inputs'
    paths, sizes and modification times and the scan settings (``labse_model.scan_cache``): a
    restart on the same inputs loads it instead of reading the corpus again. Rank 0 decides and
    sends its answer to the others, so every rank takes the same path."""
    key = None
    if cache_dir is not None:
        from labse_model import scan_cache

        cached = None
        if info.is_main:
            key = scan_cache.cache_key(groups, kind, block_rows, heldout_fraction, max_heldout)
            cached = scan_cache.load(cache_dir, kind, key)
        if info.world_size > 1:
            import torch.distributed as dist

            box = [cached]
            dist.broadcast_object_list(box, src=0)
            cached = box[0]
        if cached is not None:
            log.info(
                "%s scan loaded from %s (%d blocks): the inputs are as they were",
                kind,
                cache_dir,
                sum(len(b) for b in cached.groups.values()),
            )
            return cached
    total = _scan_all_ranks(groups, kind, block_rows, heldout_fraction, max_heldout, info)
    if key is not None:
        scan_cache.save(cache_dir, kind, key, total)
    return total


def _scan_all_ranks(groups, kind, block_rows, heldout_fraction, max_heldout, info) -> ScanResult:
    mine = scan(groups, kind, block_rows, heldout_fraction, max_heldout, info.rank, info.world_size)
    if info.world_size == 1:
        mine.sort()
        return mine
    import torch.distributed as dist

    # A ScanResult pickles its block tables as arrays (stream_blocks): one bytes copy per rank.
    parts: list = [None] * info.world_size
    dist.all_gather_object(parts, mine)
    total = ScanResult()
    for i, p in enumerate(parts):
        total.merge(p)
        parts[i] = None  # its arrays go once the merged columns are joined (in sort), not at return
    total.heldout = total.heldout[:max_heldout]
    total.sort()
    return total


def finish_groups(res: ScanResult, all_groups: Sequence[str], kind: str) -> None:
    """Count the groups (languages): those with no usable record are dropped as ``empty``."""
    c = StageCounter()
    c.merge(res.counts)
    for g in all_groups:
        c.add_in(GROUP_UNIT)
        if res.groups.get(g):
            c.add_out(GROUP_UNIT)
        else:
            c.add_dropped(GROUP_UNIT, "empty")
            log.warning("language %s has no usable %s: skipped", g, kind)
    res.counts = dict(c.counts)


# --- reading one block -----------------------------------------------------------------------


def read_block(block: Block, kind: str, heldout_fraction: float) -> list:
    """The usable records of ``block``, in file order, exactly as the scan counted them."""
    v = _Validator(kind, kind, None, heldout_fraction)
    out: list = []

    def keep(rec) -> None:
        if rec is not None and not isinstance(rec, _HeldOut):
            out.append(rec)

    if block.fmt == "parquet":
        cols = lambda names: _parquet_columns(kind, names, block.path)  # noqa: E731
        for value in parquet_rows(block.path, block.part, cols, block.line, _CONVERT_ROWS):
            keep(v.value(value))
            if len(out) == block.rows:
                break
        return out
    gz = gzip_by_name(block.path)
    try:
        for i, (line, _off) in enumerate(text_lines(block.path, 0 if gz else block.offset)):
            if gz and i < block.line:
                continue  # no random access into gzip: skip to the block's first line
            keep(v.line(line))
            if len(out) == block.rows:
                break
    except (EOFError, zlib.error, OSError):
        pass  # the cut was seen by the scan; the block ends where the readable lines end
    if len(out) != block.rows:
        raise RuntimeError(
            f"{block.path} changed since the scan (block {block.part}: {len(out)} records, "
            f"expected {block.rows})"
        )
    return out


def count_dict(counter_counts: dict[str, int]) -> StageCounter:
    c = StageCounter()
    c.merge(counter_counts)
    return c


def iter_all_records(scan_res: ScanResult, kind: str, heldout: float = 0.0) -> Iterator:
    """Every usable record once, block by block (used to learn a demo vocabulary)."""
    for g in sorted(scan_res.groups):
        for b in scan_res.groups[g]:
            yield from read_block(b, kind, heldout)


__all__ = [
    "Block",
    "BlockList",
    "ScanResult",
    "expand_inputs",
    "finish_groups",
    "iter_all_records",
    "parse_pair_line",
    "read_block",
    "scan",
    "scan_distributed",
]
