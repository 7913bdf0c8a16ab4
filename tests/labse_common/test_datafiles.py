"""labse_common.datafiles.iter_parquet_surviving: a damaged row group costs its rows only."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from labse_common.datafiles import LostRows, iter_parquet_batches, iter_parquet_surviving
from labse_common.errors import InputError


def _write(path: Path, n: int = 300, group: int = 100, damaged: tuple[int, ...] = ()) -> Path:
    pq.write_table(
        pa.table({"text": [f"row {i}" for i in range(n)], "n": list(range(n))}),
        path,
        compression="snappy",
        use_dictionary=False,
        row_group_size=group,
    )
    meta = pq.ParquetFile(path).metadata
    data = bytearray(path.read_bytes())
    for g in damaged:
        for c in range(meta.num_columns):
            col = meta.row_group(g).column(c)
            for i in range(
                col.data_page_offset + 4, col.data_page_offset + col.total_compressed_size
            ):
                data[i] ^= 0x5A
    path.write_bytes(bytes(data))
    return path


def _split(items) -> tuple[list[int], list[LostRows]]:
    items = list(items)
    rows = [v for b in items if not isinstance(b, LostRows) for v in b.column("n").to_pylist()]
    return rows, [b for b in items if isinstance(b, LostRows)]


@pytest.mark.parametrize("damaged", [(0,), (1,), (2,), (0, 2)])
def test_the_other_row_groups_are_read_in_order(tmp_path, damaged):
    path = _write(tmp_path / "t.parquet", damaged=damaged)
    with pytest.raises(InputError):  # the stopping reader gives up at the damage
        list(iter_parquet_batches(path))
    rows, lost = _split(iter_parquet_surviving(path, batch_size=30))
    assert rows == [i for i in range(300) if i // 100 not in damaged]
    assert [(x.row_group, x.rows) for x in lost] == [(g, 100) for g in damaged]
    assert all(x.problem for x in lost)


def test_columns_and_an_undamaged_file(tmp_path):
    path = _write(tmp_path / "t.parquet", n=250)
    items = list(iter_parquet_surviving(path, ["n"], batch_size=64))
    assert all(b.schema.names == ["n"] for b in items)
    assert _split(items) == (list(range(250)), [])


def test_every_group_damaged_yields_only_losses(tmp_path):
    path = _write(tmp_path / "t.parquet", damaged=(0, 1, 2))
    rows, lost = _split(iter_parquet_surviving(path))
    assert rows == [] and sum(x.rows for x in lost) == 300


def test_no_footer_is_one_input_error(tmp_path):
    path = _write(tmp_path / "t.parquet")
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(InputError, match="not a readable Parquet file"):
        list(iter_parquet_surviving(path, flag="--input"))
