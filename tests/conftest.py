"""Fixtures shared by test modules in several folders. Plain helper functions and constants live
in tests/support/ (its __init__ says which module holds what)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest


def pytest_collection_modifyitems(session, config, items) -> None:
    """Costliest modules first (tests/module_seconds.py says why); a stable sort, so a module's
    tests keep their order and stay together."""
    from tests.module_seconds import load

    seconds = load()
    items.sort(key=lambda item: -seconds.get(item.nodeid.split("::", 1)[0], 0.0))


def _write_damaged_parquet(path: Path, table: pa.Table, groups: int = 3) -> Path:
    """A snappy Parquet of several row groups with bytes flipped inside every column chunk of
    the middle group: the footer is intact (the file opens), reading fails half-way."""
    pq.write_table(
        table,
        path,
        compression="snappy",
        use_dictionary=False,
        row_group_size=max(1, table.num_rows // groups),
    )
    meta = pq.ParquetFile(path).metadata
    group = meta.row_group(meta.num_row_groups // 2)
    data = bytearray(path.read_bytes())
    for c in range(group.num_columns):
        col = group.column(c)
        start, size = col.data_page_offset, col.total_compressed_size
        for i in range(start + size // 3, start + 2 * size // 3):
            data[i] ^= 0x5A
    path.write_bytes(bytes(data))
    pq.ParquetFile(path)  # still opens: the damage is in the middle
    with pytest.raises(OSError):
        pq.read_table(path)
    return path


def _write_truncated_parquet(path: Path, table: pa.Table) -> Path:
    """A Parquet file cut in half: no footer."""
    pq.write_table(table, path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


@pytest.fixture(scope="session")
def damaged_parquet() -> Callable[..., Path]:
    """``damaged_parquet(path, table, groups=3)``: a multi-row-group snappy file, footer intact,
    bytes flipped in the middle row group's column chunks."""
    return _write_damaged_parquet


@pytest.fixture(scope="session")
def truncated_parquet() -> Callable[[Path, pa.Table], Path]:
    """``truncated_parquet(path, table)``: the file's second half (and footer) cut off."""
    return _write_truncated_parquet


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """A loopback Dask scheduler with 2 stock workers (tests/support/scaleout_util.py); its address.
    Skips with the reason where dask[distributed] is not installed. One per session (xdist
    worker): the jobs on it leave nothing behind, and a start and stop cost ~6 s."""
    from tests.support.scaleout_util import dask_available, dask_cluster

    why = dask_available()
    if why:
        pytest.skip(why)
    with dask_cluster(2, tmp_path_factory.mktemp("dask-logs")) as addr:
        yield addr


@pytest.fixture
def one_torch_thread():
    """torch on one thread for the test (xdist workers share 2 cores); restored after."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
