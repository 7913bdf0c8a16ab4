"""One definition of each on-disk format: the embedding store (layout, writer, memory-mapped
reader, old layouts and their converter) and the pair / mined-pair / scored-pair schemas."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from labse_common import embedding_store as es
from labse_common.formats import (
    MINED_PAIR_REQUIRED,
    MINED_PAIR_SCHEMA,
    SCORED_PAIR_REQUIRED,
    SCORED_PAIR_SCHEMA,
    conform,
)


def _vecs(n: int, dim: int = 8, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)


def test_store_round_trip_is_memory_mapped(tmp_path):
    v = _vecs(25)
    w = es.StoreWriter(tmp_path / "s", dim=8, dtype="float32", rows_per_shard=10)
    w.add(v[:7], [f"a{i}" for i in range(7)], text=[f"t{i}" for i in range(7)])
    w.add(v[7:], [f"a{i}" for i in range(7, 25)], text=[f"t{i}" for i in range(7, 25)])
    store = w.close()
    manifest = json.loads((tmp_path / "s" / es.MANIFEST).read_text())
    assert manifest["format"] == es.FORMAT and manifest["version"] == es.VERSION
    assert [s.rows for s in store.shards] == [10, 10, 5] and len(store) == 25
    blocks = es.load_vectors(tmp_path / "s")
    assert all(isinstance(b, np.memmap) for b in blocks)  # local shards are memory-mapped
    np.testing.assert_array_equal(np.concatenate(blocks), v)
    meta = store.all_metadata()
    assert meta.column("id").to_pylist()[:3] == ["a0", "a1", "a2"]
    assert meta.column("row").to_pylist() == list(range(25))
    assert not list((tmp_path / "s").glob("*.tmp*"))  # every file was renamed into place


def test_the_three_writers_give_one_layout(tmp_path):
    """mining embed / encode (StoreWriter) and the Beam job (write_shard + write_manifest)."""
    v = _vecs(6)
    info = es.write_shard(
        str(tmp_path / "b"),
        es.shard_name(0),
        v.astype(np.float16),
        pa.table({"id": [str(i) for i in range(6)]}),
    )
    es.write_manifest(str(tmp_path / "b"), 8, "float16", [info])
    w = es.StoreWriter(tmp_path / "l", dim=8, dtype="float16", rows_per_shard=100)
    w.add(v, [str(i) for i in range(6)])
    w.close()
    a, b = (
        json.loads((tmp_path / "b" / es.MANIFEST).read_text()),
        json.loads((tmp_path / "l" / es.MANIFEST).read_text()),
    )
    assert a == b
    np.testing.assert_array_equal(
        es.load_vectors(tmp_path / "b")[0], es.load_vectors(tmp_path / "l")[0]
    )


def test_old_layouts_are_read_and_converted(tmp_path):
    v = _vecs(17)
    # `labse_model encode --shard-size 7` before stores: emb.00000.npy, emb.00001.npy, ...
    for i, lo in enumerate(range(0, 17, 7)):
        np.save(tmp_path / f"emb.{i:05d}.npy", v[lo : lo + 7])
    blocks = es.load_vectors(tmp_path / "emb.npy")
    assert [len(b) for b in blocks] == [7, 7, 3]
    assert es.main(["convert", str(tmp_path / "emb.npy"), str(tmp_path / "store")]) == 0
    np.testing.assert_array_equal(np.concatenate(es.load_vectors(tmp_path / "store")), v)
    # A store.json from before the format/version keys (pipelines.embed, mining embed).
    old = tmp_path / "old"
    old.mkdir()
    np.save(old / "shard_00000.npy", v)
    pq.write_table(pa.table({"id": [str(i) for i in range(17)]}), old / "shard_00000.parquet")
    (old / es.MANIFEST).write_text(
        json.dumps({"dim": 8, "dtype": "float32", "shards": [{"name": "shard_00000", "rows": 17}]})
    )
    assert len(es.EmbeddingStore(old)) == 17
    # A newer version than this code knows, a folder that is no store: clear errors.
    (old / es.MANIFEST).write_text(
        json.dumps({"format": es.FORMAT, "version": 99, "dim": 8, "dtype": "float32", "shards": []})
    )
    with pytest.raises(ValueError, match="version 99"):
        es.EmbeddingStore(old)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="not an embedding store"):
        es.load_vectors(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match="embeddings not found"):
        es.load_vectors(tmp_path / "nothing.npy")


def test_store_rejects_a_shard_that_disagrees_with_its_manifest(tmp_path):
    w = es.StoreWriter(tmp_path / "s", dim=8, dtype="float32", rows_per_shard=10)
    w.add(_vecs(10), [str(i) for i in range(10)])
    w.close()
    np.save(tmp_path / "s" / "shard_00000.npy", _vecs(9))
    with pytest.raises(ValueError, match="manifest says"):
        es.load_vectors(tmp_path / "s")


def test_pair_schemas(tmp_path):
    from mining.__main__ import main as mining_main

    rng = np.random.default_rng(1)
    base = rng.normal(size=(12, 8)).astype(np.float32)
    for side, vecs in (("s", base), ("t", base + 0.01)):
        w = es.StoreWriter(tmp_path / side, dim=8, dtype="float32")
        w.add(
            vecs,
            [f"{side}{i}" for i in range(12)],
            text=[f"{side} {i}" for i in range(12)],
            url_or_title=[f"u{i}" for i in range(12)],
        )
        w.close()
    assert (
        mining_main(
            [
                "mine",
                "--src-text",
                str(tmp_path / "s"),
                "--trg-text",
                str(tmp_path / "t"),
                "--src-emb",
                str(tmp_path / "s"),
                "--trg-emb",
                str(tmp_path / "t"),
                "--output",
                str(tmp_path / "m"),
            ]
        )
        == 0
    )
    mined = pq.read_table(tmp_path / "m" / "mined.parquet")
    assert mined.num_rows == 12
    for f in mined.schema:
        assert f.type == MINED_PAIR_SCHEMA.field(f.name).type, f.name  # one definition
    scored = mined.append_column("cds_score", pa.array(np.ones(12), pa.float64()))
    scored = conform(scored, SCORED_PAIR_SCHEMA, SCORED_PAIR_REQUIRED)
    assert scored.schema.field("cds_score").type == pa.float32()
    with pytest.raises(ValueError, match="margin"):
        conform(mined.drop(["margin"]), MINED_PAIR_SCHEMA, MINED_PAIR_REQUIRED)
