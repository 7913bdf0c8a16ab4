"""The dedup's file shuffle (pipelines/spill.py) writes what the in-memory combine writes."""

from __future__ import annotations

import heapq
import random
from operator import itemgetter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines import commoncrawl
from pipelines import spill as spill_mod
from pipelines.dedup import DedupShard, order_key
from pipelines.spill import (
    MergeSpilled,
    SpillRows,
    _sorted_rows,
    merge_sorted,
    reduce_spilled,
    use_file_shuffle,
)
from tests.support.corpus_fixtures import write_wet
from tests.support.corpus_util import assert_balanced, read_stats

SUBJECTS = [
    "The city council",
    "A local farmer",
    "The school board",
    "Our neighbour",
    "The mayor",
    "A young doctor",
    "The old librarian",
    "The football club",
]
VERBS = ["approved", "discussed", "rejected", "welcomed", "criticised", "postponed"]
OBJECTS = [
    "the new budget for public schools",
    "a plan to repair the bridge",
    "the proposal to open a market",
    "the report about the river",
]
WHEN = ["on Monday evening", "after a long debate", "before the summer holidays", "last week"]


def _sentences(n: int, seed: int) -> list[str]:
    rnd = random.Random(seed)
    pool = [
        f"{s} {v} {o} {w}, said report {i}."
        for i, (s, v, o, w) in enumerate(
            (rnd.choice(SUBJECTS), rnd.choice(VERBS), rnd.choice(OBJECTS), rnd.choice(WHEN))
            for _ in range(n // 2)
        )
    ]
    out = []
    for _ in range(n):  # about half are normalised duplicates, across files and spill buffers
        s = rnd.choice(pool)
        out.append(s.replace(",", "") if rnd.random() < 0.3 else s)
    return out


# Sentences per input file (3 files) and the spill buffer: the rows are several buffers per group
# (so the merge reads several spill files), the size of each does not matter.
FILE_SENTENCES, SPILL_ROWS = 1500, 1000  # corpus.spill_rows is at least 1000
IN_MEMORY = ["--direct_running_mode", "in_memory", "--direct_num_workers", "1"]


def _inputs(d: Path) -> Path:
    d.mkdir()
    for f in range(3):
        sents = _sentences(FILE_SENTENCES, seed=f % 2)  # files 0 and 2 share their pool
        docs = [
            (f"http://f{f}.example/{j}", "\n".join(sents[j : j + 30]).encode())
            for j in range(0, len(sents), 30)
        ]
        write_wet(d / f"part{f}.warc.wet.gz", docs)
    return d


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*.parquet"))}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("extra", "files_runner"),
    [
        # 2 worker processes: a spill file written by one process is merged by another
        (["--write-dropped", "--shards-per-language", "2"], ["--direct_num_workers", "2"]),
        # the merge without dedup; the runner is not what this case is about: one process
        (["--no-dedup"], IN_MEMORY),
    ],
)
def test_file_shuffle_writes_the_same_files_as_the_in_memory_combine(tmp_path, extra, files_runner):
    inp = _inputs(tmp_path / "in")
    outs = {}
    # The in-memory combine is the reference, in one process (the files do not depend on the
    # runner: tests/pipelines/test_dask_runner.py); the file shuffle on the case's runner.
    for mode, runner in (("memory", IN_MEMORY), ("files", files_runner)):
        out = tmp_path / mode
        # spill_fan_in=2: a group's 3-5 spill files are merged in rounds before the last merge
        rc = commoncrawl.main(
            [
                "--input",
                str(inp / "*"),
                "--output",
                str(out),
                "--set",
                f"shuffle={mode}",
                "--set",
                f"spill_rows={SPILL_ROWS}",
                "--set",
                "spill_fan_in=2",
                "--set",
                f"row_group_rows={SPILL_ROWS // 2}",
                *extra,
                *runner,
            ]
        )
        assert rc == 0
        # corpus.row_group_rows: files of many groups (a training stream's block decodes from
        # its group's start, not the file's)
        metas = [
            pq.read_metadata(p)
            for p in out.glob("*/part-*.parquet")
            if not p.parent.name.startswith("_")
        ]  # the kept sentences, not _dropped/
        groups = [m.row_group(g).num_rows for m in metas for g in range(m.num_row_groups)]
        assert max(groups) <= SPILL_ROWS // 2 and max(m.num_row_groups for m in metas) > 1, groups
        stats = read_stats(out)
        assert_balanced(stats)
        outs[mode] = (stats["counts"], _files(out))
        assert not (out / "_spill").exists()
    (c_mem, f_mem), (c_files, f_files) = outs["memory"], outs["files"]
    assert c_mem == c_files
    kept = c_mem["sentences"]["out"] + c_mem["sentences"]["dropped"].get("duplicate", 0)
    # more rows than 3 spill buffers: the merge read several files per group
    assert kept >= 3 * SPILL_ROWS
    if "--no-dedup" not in extra:
        assert c_mem["sentences"]["dropped"]["duplicate"] > SPILL_ROWS // 2
    assert f_mem.keys() == f_files.keys() and f_mem
    assert f_mem == f_files  # byte for byte, _dropped/ included


def test_merge_of_spilled_files_equals_the_combine(tmp_path):
    """Rows spilled in several files per group merge into the combine's entries, in order."""
    rnd = random.Random(3)
    rows = []
    for i in range(5000):
        k = rnd.randrange(1200)  # ~4 copies of each key, in different spill files
        rows.append(
            (
                f"{k:024x}",
                (f"text {k} v{i % 3}", "en", 0.5, 0.75, f"src{i % 4}", f"d{i}", "u", f"loc{i}"),
            )
        )
    spill = SpillRows(str(tmp_path / "spill"), max_rows=1000)
    spill.start_bundle()
    paths = []
    for lo in range(0, len(rows), 250):
        paths += [p for _, p in spill.process(("en\t0", rows[lo : lo + 250]))]
    paths += [wv.value[1] for wv in spill.finish_bundle()]
    assert len(paths) == 5
    for keep in (False, True):
        combine = DedupShard(True, keep)
        acc = combine.add_input(combine.create_accumulator(), rows)
        want = [e for _, e in sorted(acc.items(), key=lambda kv: order_key(kv[0], kv[1][0]))]
        merge = MergeSpilled(writer=None, dedup=True, keep_collapsed=keep)
        got = list(
            merge._entries(
                heapq.merge(*(_sorted_rows(p) for p in sorted(paths)), key=itemgetter(0))
            )
        )
        assert [(e[0], e[1]) for e in got] == [(e[0], e[1]) for e in want]
        if keep:
            assert [sorted(e[2] or ()) for e in got] == [sorted(e[2] or ()) for e in want]
        assert sum(e[1] for e in got) == len(rows)


def test_merge_rounds_bound_the_open_files_and_keep_the_order(tmp_path, monkeypatch):
    """Nine spill files with fan-in 2 (9 -> 5 -> 3 -> 2 files): every row survives the rounds in
    the order of one merge of all nine, ties included, and no merge reads more than 2 files."""
    rnd = random.Random(5)
    spill = SpillRows(str(tmp_path / "spill"), max_rows=1000)
    spill.start_bundle()
    paths = []
    for i in range(9):
        rows = []
        for j in range(1000):
            k = rnd.randrange(700)  # equal keys across files: the ties must keep the file order
            rows.append(
                (
                    f"{k:024x}",
                    (f"text {k}", "en", 0.5, 0.75, f"file{i}", f"d{i}-{j}", "u", f"loc{j}"),
                )
            )
        paths += [p for _, p in spill.process(("en\t0", rows))]
    paths = sorted(paths)
    assert len(paths) == 9
    one_pass = list(merge_sorted(paths))
    widest = []
    real_merge = spill_mod.merge_sorted

    def counting(run, *fmt):
        run = list(run)
        widest.append(len(run))
        return real_merge(run, *fmt)

    monkeypatch.setattr(spill_mod, "merge_sorted", counting)
    left = reduce_spilled(paths, 2)
    assert len(left) == 2 and max(widest) == 2 and len(widest) == 4 + 2 + 1
    # merged inputs are deleted at once; the odd ninth file is carried through every round
    assert left[-1] == paths[8] and not any(Path(p).exists() for p in paths[:8])
    assert list(real_merge(left)) == one_pass
    assert sorted(p.name for p in (tmp_path / "spill").rglob("*.parquet")) == sorted(
        Path(p).name for p in left
    )
    with pytest.raises(ValueError, match="fan_in"):
        MergeSpilled(writer=None, dedup=True, keep_collapsed=False, fan_in=1)


def test_auto_shuffle_uses_files_only_on_local_engines():
    from pipelines import local_runner

    assert use_file_shuffle("auto", None) and use_file_shuffle("auto", local_runner.NAME)
    assert use_file_shuffle("auto", "DirectRunner")
    assert not use_file_shuffle("auto", "apache_beam.runners.dask.dask_runner.DaskRunner")
    assert not use_file_shuffle("auto", "FlinkRunner")
    assert use_file_shuffle("files", "FlinkRunner") and not use_file_shuffle("memory", None)


def test_a_damaged_spill_file_is_named_after_the_rows_before_the_damage(tmp_path):
    """The merge reads a spill file a row group at a time: the groups before damage are read,
    then the damage is an InputError naming the file (not a crash, not rows made up)."""
    from labse_common.errors import InputError

    rows = [
        (f"{k:024x}", (f"text {k} " + "x" * 200, "en", 0.5, 0.75, "s", f"d{k}", "u", f"l{k}"))
        for k in range(5000)
    ]
    spill = SpillRows(str(tmp_path / "spill"), max_rows=5000)
    spill.start_bundle()
    ((_, path),) = spill.process(("en\t0", rows))
    data = bytearray(Path(path).read_bytes())
    mid = len(data) * 3 // 5  # inside a later row group's pages
    data[mid : mid + 2000] = bytes(2000)
    Path(path).write_bytes(bytes(data))
    got = []
    with pytest.raises(InputError, match="damaged Parquet") as e:
        for r in _sorted_rows(path):
            got.append(r)
    assert path in str(e.value) and 1024 <= len(got) < 5000
    assert [r[1][0] for r in got] == [k for k, _ in sorted(rows)][: len(got)]
