"""Fixtures shared by several test modules, and :func:`run_as_main`, the body of a process that
runs a command line as ``python -m`` does (tests/test_cli_contract.py forks it from a server
that imported the heavy libraries once)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest


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


def run_as_main(module: str, argv: list[str], env: dict, cwd: str, out: str, err: str) -> None:
    """Body of one case's process: what ``python -m module *argv`` does, with its own session,
    environment, stdout and stderr."""
    import runpy
    import traceback
    import warnings

    os.setsid()  # its own process group: a timeout kills it and whatever it started
    for fd, path in ((1, out), (2, err)):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.argv = [module, *argv]
    import logging

    # An import in the server may have configured the root logger (logging.warning() does);
    # the command sets logging up itself, as in a fresh interpreter.
    for h in list(logging.root.handlers):
        logging.root.removeHandler(h)
    logging.root.setLevel(logging.WARNING)
    # run_module re-executes a preloaded module as __main__; `python -m` would not warn.
    warnings.filterwarnings("ignore", message=".*found in sys.modules.*", category=RuntimeWarning)
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            code = e.code or 0
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 - what the interpreter does: traceback, exit 1
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    # The status also goes to a file: a forkserver child's exit code reaches the parent through
    # the server's pipe, and multiprocessing reports 255 when that read fails (seen once on a
    # loaded machine, after the command had printed its error and exited 2).
    with open(err + ".rc", "w") as f:
        f.write(str(code))
    os._exit(code)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A loopback Dask scheduler with 2 stock workers (tests/scaleout_util.py); its address.
    Skips with the reason where dask[distributed] is not installed."""
    from tests.scaleout_util import dask_available, dask_cluster

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
