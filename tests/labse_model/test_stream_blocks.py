"""The training stream's block table (labse_model/stream_blocks.py): the same blocks as a list
of Block objects, in a fraction of the memory, and the lanes deal them as before."""

from __future__ import annotations

import pickle
import tracemalloc

import numpy as np
import pytest

from labse_model import stream
from labse_model.lanes import _GroupLane
from labse_model.stream_blocks import Block, BlockList


def _blocks(n_files: int, per_file: int, prefix: str = "f") -> list[Block]:
    out = []
    for f in range(n_files):
        fmt = "text" if f % 3 == 0 else "parquet"
        for k in range(per_file):
            out.append(
                Block(
                    f"/data/{prefix}{f:04d}.{fmt}",
                    fmt,
                    k // 4,
                    500 + (k * 37) % 500,
                    (k % 4) * 1000,
                    10**10 + k if fmt == "text" else 0,
                )
            )
    return out


def test_a_block_list_holds_the_same_blocks_and_pickles_them():
    blocks = _blocks(7, 30)
    bl = BlockList(blocks)
    assert len(bl) == len(blocks) and list(bl) == blocks and bl[17] == blocks[17]
    assert bl.rows.tolist() == [b.rows for b in blocks]
    assert bl.total_rows() == sum(b.rows for b in blocks)
    back = pickle.loads(pickle.dumps(bl))
    assert list(back) == blocks
    back.append(Block("/data/new.parquet", "parquet", 0, 3))  # the path index is rebuilt
    assert (
        back[len(back) - 1] == Block("/data/new.parquet", "parquet", 0, 3) and len(back.paths) == 8
    )
    with pytest.raises(ValueError, match="two formats"):
        bl.append(Block(blocks[0].path, "parquet" if blocks[0].fmt == "text" else "text", 0, 1))


def test_extend_remaps_files_and_sort_orders_by_path_part_line():
    a, b = _blocks(5, 12, "x"), _blocks(4, 9, "a")
    shared = Block(a[0].path, a[0].fmt, 99, 7, 5)  # a file both parts name
    left, right = BlockList(a), BlockList([*b, shared])
    left.extend(right)
    left.extend(BlockList())
    assert list(left) == a + b + [shared]
    assert len(left.paths) == 9  # the shared file is stored once
    rng = np.random.default_rng(0)
    shuffled = [x for i in rng.permutation(len(a + b)) for x in [(a + b)[i]]]
    bl = BlockList(shuffled)
    bl.sort()
    assert list(bl) == sorted(a + b, key=lambda x: (x.path, x.part, x.line))


@pytest.mark.slow
def test_a_block_costs_its_columns_not_a_python_object():
    """The paper preset's 17B sentences are 17M blocks on every rank: 28 B each in columns,
    where a frozen dataclass per block held ~180 B (bench/block_table_bench.py)."""
    blocks = _blocks(200, 500)  # 100k blocks
    tracemalloc.start()
    try:
        bl = BlockList()
        for x in blocks:
            bl.append(x)
        bl.columns()
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert bl.nbytes() == 28 * len(blocks)
    assert held / len(blocks) < 40, held / len(blocks)
    assert len(pickle.dumps(bl)) / len(blocks) < 32


def test_the_deal_is_the_documented_rotation():
    """A lane reads, in epoch e, the blocks at positions k of the epoch's permutation with
    (k + e) % lanes == lane, in that order: the rule the list-of-Blocks code implemented."""
    bl = BlockList(_blocks(3, 41))
    for lanes, lane, epoch in ((1, 0, 0), (4, 1, 0), (4, 3, 5), (200, 7, 2)):
        gl = _GroupLane(bl, 2, lane, lanes, 11, 4, stream.SENTENCES, 0.0)
        perm = np.random.default_rng([11, 2, 2, epoch]).permutation(len(bl))
        want = [bl[int(b)] for k, b in enumerate(perm) if (k + epoch) % lanes == lane]
        assert [bl[int(i)] for i in gl._epoch_blocks(epoch)] == want


def test_a_restart_loads_the_scan_and_a_changed_input_is_scanned_again(tmp_path, monkeypatch):
    """The scan is kept under the output (scan_distributed's cache_dir): the same inputs load it
    without reading a record; a file rewritten (new size) or added is scanned again."""
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq

    from labse_model.distributed import DistInfo

    data = tmp_path / "in"
    for lang, n in (("de", 1200), ("fr", 300)):
        (data / lang).mkdir(parents=True)
        pq.write_table(
            pa.table({"text": [f"{lang} Satz {i}." for i in range(n)]}),
            data / lang / "a.parquet",
            row_group_size=500,
        )
    cache = str(tmp_path / "out" / "scan")

    def run():
        groups = stream.expand_inputs([str(data)])
        return stream.scan_distributed(groups, stream.SENTENCES, 256, 0.05, 10, DistInfo(), cache)

    first = run()
    assert os.path.exists(os.path.join(cache, "sentences.pkl"))
    real_scan_file = stream._scan_file
    calls = []
    monkeypatch.setattr(
        stream, "_scan_file", lambda *a, **k: calls.append(a[0]) or real_scan_file(*a, **k)
    )
    again = run()
    assert calls == []  # nothing read
    assert {g: list(b) for g, b in again.groups.items()} == {
        g: list(b) for g, b in first.groups.items()
    }
    assert again.counts == first.counts and again.heldout == first.heldout

    pq.write_table(
        pa.table({"text": [f"fr phrase {i}." for i in range(700)]}), data / "fr" / "a.parquet"
    )
    changed = run()
    assert sorted(calls) == sorted(str(p) for p in data.rglob("*.parquet"))
    assert changed.groups["fr"].total_rows() > first.groups["fr"].total_rows()
    calls.clear()
    assert run().total_rows() == changed.total_rows() and calls == []  # the new scan was kept
    (data / "el").mkdir()
    pq.write_table(
        pa.table({"text": [f"καλημέρα κόσμε {i}." for i in range(50)]}), data / "el" / "a.parquet"
    )
    assert "el" in run().groups and calls  # a file added: scanned again


def test_a_parquet_without_the_needed_columns_is_one_error_line_and_exit_2(tmp_path):
    """A pairs Parquet with no src/trg is the user's mistake: the command names the file and
    exits 2 (it was a SchemaError traceback, exit 1)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.support.two_node_util import run_labse_model

    bad = tmp_path / "nocol.parquet"
    pq.write_table(pa.table({"foo": ["a", "b"]}), bad)
    # Forked from this process as `python -m` runs it (an interpreter start was ~10 s).
    rc, stderr = run_labse_model(
        ["train", "--pairs", str(bad), "--output", str(tmp_path / "out")]
        + ["--max-steps", "1", "threads=1"],
        tmp_path / "cli",
    )
    assert rc == 2, stderr[-2000:]
    assert "Traceback" not in stderr and f"{bad}: Parquet pairs file lacks column(s)" in stderr
