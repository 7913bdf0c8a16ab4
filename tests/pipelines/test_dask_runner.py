"""The corpus jobs run unchanged on Beam's DaskRunner against a real dask.distributed cluster
(a scheduler and two worker processes on 127.0.0.1) and give the DirectRunner's output."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.support.corpus_util import assert_balanced, read_stats
from tests.support.paths import REPO as ROOT
from tests.support.scaleout_util import dask_args

SAMPLES = ROOT / "pipelines" / "sample_data"
DIRECT = ["--direct_running_mode", "in_memory", "--direct_num_workers", "1"]
# Beam's DaskRunner runs each transform once per partition (the DoFns' setup included): two
# partitions, one per worker, prove the same as four at about two thirds of the time.
PARTITIONS = 2

pytestmark = pytest.mark.slow


def tree(out: Path) -> dict[str, list[dict]]:
    """Relative path -> rows of every Parquet file (names are deterministic per shard)."""
    got = {}
    for dirpath, _, files in os.walk(out):
        for f in files:
            if f.endswith(".parquet"):
                p = Path(dirpath) / f
                got[str(p.relative_to(out))] = pq.read_table(p).to_pylist()
    return got


def _same(direct: Path, dask: Path) -> None:
    a, b = read_stats(direct), read_stats(dask)
    assert_balanced(b)
    assert a["counts"] == b["counts"]
    ta, tb = tree(direct), tree(dask)
    assert ta and sorted(ta) == sorted(tb)
    for name in ta:
        assert ta[name] == tb[name], name
    assert not [n for n in os.listdir(dask) if n.startswith("_tmp-") or n == "_CLAIM.json"]


def test_commoncrawl_on_dask_equals_direct(cluster, tmp_path):
    from pipelines import commoncrawl

    args = ["--input", str(SAMPLES / "sample.warc.wet.gz"), "--write-dropped"]
    assert commoncrawl.main([*args, "--output", str(tmp_path / "direct"), *DIRECT]) == 0
    assert (
        commoncrawl.main(
            [*args, "--output", str(tmp_path / "dask"), *dask_args(cluster, PARTITIONS)]
        )
        == 0
    )
    _same(tmp_path / "direct", tmp_path / "dask")
    assert (tmp_path / "dask" / "_dropped").is_dir()


def test_wikipedia_on_dask_equals_direct(cluster, tmp_path):
    from pipelines import wikipedia

    args = ["--input", str(SAMPLES / "enwiki-sample-15pages.xml.bz2")]
    assert wikipedia.main([*args, "--output", str(tmp_path / "direct"), *DIRECT]) == 0
    assert (
        wikipedia.main([*args, "--output", str(tmp_path / "dask"), *dask_args(cluster, PARTITIONS)])
        == 0
    )
    _same(tmp_path / "direct", tmp_path / "dask")
    assert read_stats(tmp_path / "dask")["counts"]["documents"]["out"] > 0


def test_beam_mining_on_dask_equals_direct(cluster, tmp_path):
    """The mining job's shard tasks on dask workers: the files of the DirectRunner."""
    from pipelines.mine import run as beam_mine
    from tests.pipelines.test_mine import _stores

    src, trg = _stores(tmp_path)
    common = ["--src-emb", str(src), "--trg-emb", str(trg), "--shard-rows", "20"]
    assert beam_mine([*common, "--output", str(tmp_path / "direct"), *DIRECT]) == 0
    assert (
        beam_mine([*common, "--output", str(tmp_path / "dask"), *dask_args(cluster, PARTITIONS)])
        == 0
    )
    a = pq.read_table(tmp_path / "direct" / "mined.parquet")
    b = pq.read_table(tmp_path / "dask" / "mined.parquet")
    assert a.num_rows > 40 and a.to_pandas().equals(b.to_pandas())  # NaN margin_bwd == NaN
    assert sorted(os.listdir(tmp_path / "dask")) == sorted(os.listdir(tmp_path / "direct"))


def test_beam_embedding_on_dask_equals_direct(cluster, tmp_path, tiny_model):
    """RunInference on dask workers: the same store (ids, texts, vectors) as the DirectRunner."""
    import numpy as np
    import pyarrow as pa

    from labse_common.embedding_store import EmbeddingStore
    from pipelines.embed import run as embed

    texts = [f"sentence number {i} about topic {i % 7}" for i in range(30)] + [""]
    pq.write_table(
        pa.table({"text": texts, "id": [f"s{i}" for i in range(31)]}), tmp_path / "in.parquet"
    )
    common = [
        "--input",
        str(tmp_path / "in.parquet"),
        "--model",
        tiny_model,
        "--num-shards",
        "2",
        "--dtype",
        "float32",
    ]
    assert embed([*common, "--output", str(tmp_path / "direct"), *DIRECT]) == 0
    assert (
        embed([*common, "--output", str(tmp_path / "dask"), *dask_args(cluster, PARTITIONS)]) == 0
    )
    a, b = EmbeddingStore(tmp_path / "direct"), EmbeddingStore(tmp_path / "dask")
    assert len(a) == len(b) == 31  # row i = input row i: the blank line keeps its (zero) row
    assert a.all_metadata().equals(b.all_metadata())
    np.testing.assert_allclose(
        np.concatenate(b.all_vectors()), np.concatenate(a.all_vectors()), atol=1e-6
    )
    assert read_stats(tmp_path / "dask")["counts"] == read_stats(tmp_path / "direct")["counts"]
