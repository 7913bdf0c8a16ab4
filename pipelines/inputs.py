"""Input expansion for Beam jobs: globs on any Beam filesystem and CommonCrawl ``*.paths`` lists."""

from __future__ import annotations

import gzip
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from labse_common.filesystems import is_remote
from labse_common.textio import strip_bom
from pipelines.options import UsageError


def _read_paths_file(path: str) -> list[str]:
    with FileSystems.open(path) as f:
        data = f.read()
    if path.endswith(".gz"):
        data = gzip.decompress(data)
    return [ln.strip() for ln in strip_bom(data.decode("utf-8")).splitlines() if ln.strip()]


def expand_inputs(patterns: Iterable[str], paths_prefix: str = "") -> list[str]:
    """Glob every pattern; a ``*.paths``/``*.paths.gz`` file lists inputs (CommonCrawl style).

    A pattern that matches nothing is a usage error: a typo must not produce an empty corpus.
    """
    out: list[str] = []
    for pat in patterns:
        if pat.endswith((".paths", ".paths.gz")):
            listed = [
                p if is_remote(p) or p.startswith("/") else paths_prefix + p
                for p in _read_paths_file(pat)
            ]
            out.extend(expand_inputs(listed) if listed else [])
            continue
        try:
            res = FileSystems.match([pat])[0]
        except Exception as e:  # BeamIOError for unknown schemes / permissions
            raise UsageError(f"cannot list input {pat!r}: {e}") from e
        found = sorted(m.path for m in res.metadata_list)
        if not found:
            raise UsageError(f"input not found: {pat!r} matches no file")
        out.extend(found)
    return sorted(set(out))


def _schema_names(path: str) -> list[str] | None:
    try:
        with FileSystems.open(path) as f:
            return pq.read_schema(f).names
    except Exception:  # damaged or not Parquet: the job reads, counts and skips it
        return None


def require_columns(paths: Sequence[str], columns: Sequence[str]) -> None:
    """Every readable Parquet input has ``columns``, else a UsageError naming file and column.

    Only the footers are read (a few KB each, in parallel), so a folder of the wrong files
    fails before the job instead of producing an empty result (a 5-token vocabulary, an
    embedding store of dimension 0).
    """
    parquet = [p for p in paths if p.endswith(".parquet")]
    with ThreadPoolExecutor(max_workers=16) as pool:
        for path, names in zip(parquet, pool.map(_schema_names, parquet)):
            missing = [c for c in columns if names is not None and c not in names]
            if missing:
                raise UsageError(
                    f"{path}: no {', '.join(repr(c) for c in missing)} column (columns: "
                    f"{', '.join(names) or 'none'})"
                )
