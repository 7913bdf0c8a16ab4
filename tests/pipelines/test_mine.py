"""The Beam mining job (the bounded miner's shard tasks as Beam elements) gives the files of the
library's local run with the same config: exact and with an index."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from labse_common.embedding_store import StoreWriter
from labse_common.stats import check_balanced
from mining.__main__ import main as mining_main
from pipelines.mine import run as beam_mine

BEAM = ["--direct_running_mode", "in_memory"]


def _stores(tmp: Path) -> tuple[Path, Path]:
    """Clustered source/target stores: 60 translation pairs plus noise, duplicates, an empty
    sentence and a NaN vector, split over several store shards."""
    rng = np.random.default_rng(7)
    dim, n = 24, 60
    centres = rng.normal(size=(n, dim))
    src = centres + 0.15 * rng.normal(size=(n, dim))
    trg = centres[rng.permutation(n)] + 0.15 * rng.normal(size=(n, dim))
    src = np.vstack([src, rng.normal(size=(15, dim)), src[:3]]).astype(np.float32)
    trg = np.vstack([trg, rng.normal(size=(10, dim))]).astype(np.float32)
    src_texts = [f"s{i}" for i in range(75)] + ["s0", "s1", "s2"]  # duplicates for --unify
    trg_texts = [f"t{i}" for i in range(70)]
    src_texts[10] = " "
    trg[5] = np.nan
    paths = []
    for name, vecs, texts, rows in (("src", src, src_texts, 30), ("trg", trg, trg_texts, 25)):
        w = StoreWriter(tmp / name, dim=dim, dtype="float16", rows_per_shard=rows)
        w.add(vecs, [f"{name}-{i}" for i in range(len(texts))], text=texts)
        w.close()
        paths.append(tmp / name)
    return paths[0], paths[1]


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> tuple[Path, Path]:
    return _stores(tmp_path_factory.mktemp("stores"))


def _library(src: Path, trg: Path, out: Path, *opts: str) -> None:
    argv = ["mine", "--src-text", str(src), "--trg-text", str(trg)]
    argv += ["--src-emb", str(src), "--trg-emb", str(trg), "--output", str(out), *opts]
    assert mining_main(argv) == 0


def _beam(src: Path, trg: Path, out: Path, *opts: str) -> int:
    return beam_mine(["--src-emb", str(src), "--trg-emb", str(trg), "--output", str(out), *opts])


def _assert_same(a: Path, b: Path, exact: bool) -> None:
    ta, tb = pq.read_table(a / "mined.parquet"), pq.read_table(b / "mined.parquet")
    assert ta.num_rows > 40  # the clusters are mined
    assert ta.column_names == tb.column_names
    for col in ("src_id", "trg_id", "src", "trg"):
        assert ta.column(col).to_pylist() == tb.column(col).to_pylist(), col
    for col in ("margin", "cosine"):
        x, y = ta.column(col).to_numpy(), tb.column(col).to_numpy()
        if exact:
            np.testing.assert_array_equal(x, y)
        else:
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_beam_job_equals_library(tmp_path: Path, stores) -> None:
    src, trg = stores
    opts = ["--shard-rows", "20", "--k", "3", "--mode", "max", "--unify", "--threshold", "1.0"]
    _library(src, trg, tmp_path / "lib", *opts)
    assert _beam(src, trg, tmp_path / "beam", *opts, *BEAM) == 0
    _assert_same(tmp_path / "lib", tmp_path / "beam", exact=True)
    # Different shards (one here) change only float rounding, not the pairs.
    _library(src, trg, tmp_path / "mem", "--k", "3", "--unify", "--threshold", "1.0")
    _assert_same(tmp_path / "mem", tmp_path / "beam", exact=False)

    report = json.loads((tmp_path / "beam" / "stats.json").read_text())
    assert check_balanced(report) == []
    lib = json.loads((tmp_path / "lib" / "stats.json").read_text())
    assert report["counts"] == lib["counts"]
    assert report["counts"]["src_sentences"]["dropped"]["empty_text"] == 1
    assert report["counts"]["trg_sentences"]["dropped"]["nonfinite_value"] == 1
    # 20-row shards of the larger side (78 rows): 4 Beam tasks; the lists are merged and gone.
    assert report["config"]["shards"] == 4 and report["config"]["runner"] == "beam"
    assert sorted(p.name for p in (tmp_path / "beam").iterdir()) == [
        "mined.parquet",
        "mined.tsv.gz",
        "score_hist.png",
        "stats.json",
    ]


@pytest.mark.slow
def test_beam_job_with_an_index_equals_library(tmp_path: Path, stores) -> None:
    """IVF: the index trained once per direction on the driver, the shards added and searched
    as Beam elements, merged and re-scored: the library's pairs, bit for bit."""
    src, trg = stores
    opts = [
        "--shard-rows",
        "30",
        "--k",
        "3",
        "--unify",
        "--set",
        "index=ivf_flat",
        "--set",
        "nprobe=2",
        "--set",
        "train_size=70",
    ]
    _library(src, trg, tmp_path / "lib", *opts)
    work = tmp_path / "work"
    assert _beam(src, trg, tmp_path / "beam", *opts, "--workdir", str(work), *BEAM) == 0
    _assert_same(tmp_path / "lib", tmp_path / "beam", exact=True)
    stats = json.loads((tmp_path / "beam" / "stats.json").read_text())
    assert stats["config"]["index"]["trg"].startswith("IVF")


def test_beam_job_store_shards_and_fwd_mode(tmp_path: Path, stores) -> None:
    src, trg = stores
    opts = ["--mode", "fwd", "--margin", "distance", "--k", "5", "--no-unify"]
    # --shard-rows above both sides' sizes = one shard, the default of both (one worker).
    _library(src, trg, tmp_path / "lib", "--shard-rows", "1000", *opts)
    assert _beam(src, trg, tmp_path / "beam", *opts, *BEAM) == 0
    _assert_same(tmp_path / "lib", tmp_path / "beam", exact=True)
    assert (tmp_path / "beam" / "mined.tsv.gz").stat().st_size > 0


def test_wrong_paths_and_arguments_exit_2(tmp_path: Path, stores) -> None:
    src, trg = stores
    assert _beam(tmp_path / "missing", trg, tmp_path / "o1", *BEAM) == 2
    assert _beam(src, tmp_path / "missing.npy", tmp_path / "o2", *BEAM) == 2
    assert _beam(src, trg, tmp_path / "o3", "--shard-rows", "0", *BEAM) == 2
    assert _beam(src, trg, tmp_path / "o4", "--workdir", "s3://b/w", *BEAM) == 2
    with pytest.raises(SystemExit) as exc:
        beam_mine(["--src-emb", str(src), "--trg-emb", str(trg)])  # no --out
    assert exc.value.code == 2
