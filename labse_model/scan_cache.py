"""The training stream's scan, kept beside the checkpoints so that a restart does not read the
whole corpus again.

The scan reads every record once to count the usable ones per block: ~2 µs a Parquet sentence
and ~3 µs a TSV pair on one core (bench/HISTORY.md, "The scan at restart"), so the paper's 17B
sentences and 6B pairs are ~15 CPU-hours, paid at every start and every resume of a preempted
job. Saved once, a restart reads one file of ~28 B per block instead.

The key is everything the result depends on: the record kind, the scan settings (block_rows,
the held-out share and cap) and every input file's path, size and modification time, as the
file system lists them (one listing per remote folder). A file rewritten, added or removed is a different key, so the corpus
is scanned again and the file replaced.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
from collections.abc import Sequence

from labse_common.filesystems import is_remote

log = logging.getLogger(__name__)

FORMAT_VERSION = 1  # bump when ScanResult or BlockList change shape


def _file_meta(paths: Sequence[str]) -> list[tuple[str, int, float]]:
    """(path, size, modification time) of every file: os.stat locally; remote files from one
    listing per folder through Beam's FileSystems (a request per file would be ~170k requests
    for the paper's corpus). A file gone from its folder gets size -1, so the key changes."""
    out: list[tuple[str, int, float]] = []
    by_dir: dict[str, set[str]] = {}
    for p in paths:
        if is_remote(p):
            by_dir.setdefault(p.rsplit("/", 1)[0], set()).add(p)
        else:
            st = os.stat(p)
            out.append((p, st.st_size, st.st_mtime_ns / 1e9))
    if by_dir:
        from labse_common import filesystems

        for folder, wanted in sorted(by_dir.items()):
            fs = filesystems.filesystem(folder)
            found = {m.path: m for res in fs.match([folder + "/*"]) for m in res.metadata_list}
            for p in sorted(wanted):
                m = found.get(p)
                out.append(
                    (p, -1, 0.0)
                    if m is None
                    else (p, int(m.size_in_bytes), float(m.last_updated_in_seconds or 0.0))
                )
    return sorted(out)


def cache_key(
    groups: dict[str, list[str]],
    kind: str,
    block_rows: int,
    heldout_fraction: float,
    max_heldout: int,
) -> str:
    """A digest of everything the scan's result depends on."""
    meta = {g: _file_meta(files) for g, files in sorted(groups.items())}
    doc = {
        "version": FORMAT_VERSION,
        "kind": kind,
        "block_rows": block_rows,
        "heldout_fraction": heldout_fraction,
        "max_heldout": max_heldout,
        "files": meta,
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def _path(cache_dir: str, kind: str) -> str:
    return os.path.join(cache_dir, f"{kind}.pkl")


def load(cache_dir: str, kind: str, key: str):
    """The cached ScanResult for ``key``, or None (no file, another key, or unreadable)."""
    path = _path(cache_dir, kind)
    try:
        with open(path, "rb") as fh:
            saved_key, res = pickle.load(fh)
    except FileNotFoundError:
        return None
    except Exception as e:  # a cut or foreign file is a miss: the scan runs and replaces it
        log.warning("scan cache %s unreadable (%s): scanning", path, e)
        return None
    if saved_key != key:
        log.info("scan cache %s is of other inputs or settings: scanning", path)
        return None
    return res


def save(cache_dir: str, kind: str, key: str, res) -> None:
    """Write atomically (a temporary file, then a rename): a run killed mid-write leaves the
    old file or none, never a cut one under the final name."""
    os.makedirs(cache_dir, exist_ok=True)
    path = _path(cache_dir, kind)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as fh:
        pickle.dump((key, res), fh, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)
