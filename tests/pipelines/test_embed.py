"""The Beam RunInference embedding job and the `--model` paths of mining, with a tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from labse_common.stats import check_balanced
from tests.support.paths import TATOEBA as DATA

IN_MEMORY = ["--direct_running_mode", "in_memory"]


@pytest.mark.slow
def test_beam_embed_job_writes_a_store(tmp_path: Path, tiny_model: str) -> None:
    from labse_common.embedding_store import EmbeddingStore
    from labse_model.encode import Encoder
    from pipelines.embed import run

    texts = [f"sentence number {i} about topic {i % 7}" for i in range(40)]
    rows = {
        "text": texts + ["", None],
        "id": [f"s{i}" for i in range(42)],
        "url_or_title": [f"u{i}" for i in range(42)],
    }
    pq.write_table(pa.table(rows), tmp_path / "in.parquet")
    out = tmp_path / "store"
    rc = run(
        [
            "--input",
            str(tmp_path / "in.parquet"),
            "--model",
            tiny_model,
            "--output",
            str(out),
            "--num-shards",
            "3",
            "--dtype",
            "float32",
            "--direct_running_mode",
            "in_memory",
        ]
    )
    assert rc == 0
    store = EmbeddingStore(out)
    # Row i = input row i: the blank and the null text keep their rows (zero vectors).
    assert len(store) == 42 and store.dim == 32 and [s.rows for s in store.shards] == [14] * 3
    meta = store.all_metadata()
    assert meta.column("id").to_pylist() == [f"s{i}" for i in range(42)]
    assert meta.column("row").to_pylist() == list(range(42))
    assert meta.column("text").to_pylist() == texts + ["", ""]
    assert meta.column("url_or_title").to_pylist() == rows["url_or_title"]
    vecs = np.concatenate([np.asarray(v) for v in store.iter_vectors()])
    ref = Encoder.from_pretrained(tiny_model).encode(texts)
    np.testing.assert_allclose(vecs[:40], ref, atol=1e-5)
    assert not vecs[40:].any()
    stats = json.loads((out / "stats.json").read_text())
    assert check_balanced(stats) == []
    c = stats["counts"]["sentences"]
    assert c["in"] == c["out"] == 42 and c["events"] == {"empty": 2, "null": 1}

    # the store is directly minable: its Parquet carries the sentences
    from mining.__main__ import main

    rc = main(
        [
            "mine",
            "--src-text",
            str(out),
            "--trg-text",
            str(out),
            "--src-emb",
            str(out),
            "--trg-emb",
            str(out),
            "--output",
            str(tmp_path / "mined"),
        ]
    )
    assert rc == 0
    t = pq.read_table(tmp_path / "mined" / "mined.parquet")
    # The pairs carry the store's ids and sentences. (Not a self-match check: the tiny model's
    # vectors of these sentences are all within 1e-6 cosine of each other, so which one a row
    # pairs with turns on the last bits of the sums, which vary with the job's bundles and BLAS
    # threads. For the same reason the greedy one-to-one pass of `max` can leave a source whose
    # k candidates were all taken: not every one of the 40 rows is sure to be paired.)
    by_id = dict(zip(rows["id"], rows["text"]))
    nonempty = {f"s{i}" for i in range(40)}
    for side in ("src_id", "trg_id"):
        ids = t.column(side).to_pylist()
        assert len(set(ids)) == len(ids) and set(ids) <= nonempty  # one-to-one, no blank row
    assert t.num_rows >= 36, t.num_rows
    for side in ("src", "trg"):
        ids, got = t.column(f"{side}_id").to_pylist(), t.column(side).to_pylist()
        assert [by_id[i] for i in ids] == got


def test_beam_embed_job_bad_paths(tmp_path: Path) -> None:
    from pipelines.embed import run

    assert (
        run(
            [
                "--input",
                str(tmp_path / "x.parquet"),
                "--model",
                str(tmp_path),
                "--output",
                str(tmp_path / "o"),
            ]
        )
        == 2
    )
    assert run(["--input", "x", "--model", str(tmp_path / "missing"), "--output", "o"]) == 2


def test_mine_with_model_on_tatoeba(tmp_path: Path, tiny_model: str) -> None:
    if not (DATA / "dev.deu-eng.deu").is_file():
        pytest.skip(f"Tatoeba sample data not found at {DATA}")
    from labse_common.embedding_store import EmbeddingStore
    from mining.__main__ import main

    rc = main(
        [
            "mine",
            "--src-text",
            str(DATA / "dev.deu-eng.deu"),
            "--trg-text",
            str(DATA / "dev.deu-eng.eng"),
            "--model",
            tiny_model,
            "--output",
            str(tmp_path / "o"),
            "--mode",
            "max",
            "--unify",
        ]
    )
    assert rc == 0
    stats = json.loads((tmp_path / "o" / "stats.json").read_text())
    assert check_balanced(stats) == [] and stats["counts"]["src_sentences"]["in"] == 100
    assert len(EmbeddingStore(tmp_path / "o" / "embeddings" / "src")) == 100
    # max mode is one-to-one
    t = pq.read_table(tmp_path / "o" / "mined.parquet")
    assert len(set(t.column("src").to_pylist())) == t.num_rows > 0


@pytest.mark.slow
def test_beam_embed_job_with_int8_writes_the_local_int8_store(tmp_path: Path, tiny_model: str):
    """``--quantize int8`` reaches the workers: the same vectors as the local writer's int8
    store (the same chunks and batches, so the same per-batch activation scales), and both
    stats.json files say int8."""
    from labse_common.embedding_store import EmbeddingStore
    from labse_model.embed_store import embed_to_store
    from pipelines.embed import run

    texts = [f"sentence number {i} about topic {i % 7} and more" for i in range(30)]
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    beam_out, local_out = tmp_path / "beam", tmp_path / "local"
    argv = ["--input", str(tmp_path / "in.txt"), "--model", tiny_model, "--output", str(beam_out)]
    # in_memory: the option's way to the workers is the handler's, whatever runs it
    assert run([*argv, "--dtype", "float32", "--quantize", "int8", *IN_MEMORY]) == 0
    embed_to_store(tiny_model, str(tmp_path / "in.txt"), str(local_out), quantize="int8")
    vecs = [
        np.concatenate([np.asarray(v) for v in EmbeddingStore(d).iter_vectors()])
        for d in (beam_out, local_out)
    ]
    np.testing.assert_array_equal(vecs[0], vecs[1])
    for d in (beam_out, local_out):
        assert json.loads((d / "stats.json").read_text())["quantize"] == "int8"
    # and the job's driver refuses int8 on a GPU before any worker starts
    gpu = [*argv[:-1], str(tmp_path / "gpu"), "--quantize", "int8", "--device", "cuda"]
    assert run([*gpu, *IN_MEMORY]) == 2
    assert not (tmp_path / "gpu").exists()
