"""``python -m labse_model encode``: text and Parquet input, row alignment, stats, errors."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from labse_common.stats import check_balanced, read_report
from labse_model.__main__ import main
from labse_model.encode import Encoder
from labse_model.tiny import make_tiny_checkpoint

LINES = [
    "Tom doesn't know where Mary is.",
    "",
    "Der Hund schläft.",
    "word " * 300,
    "Wo ist der Bahnhof?",
]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _reference(tiny: str, texts: list) -> np.ndarray:
    """Encoder.encode of every non-blank text; blank and null rows are zero vectors (the
    embedding path keeps their row, row i = line i, with nothing to compare)."""
    out = np.zeros((len(texts), 32), np.float32)
    keep = [i for i, t in enumerate(texts) if t and t.strip()]
    out[keep] = Encoder.from_pretrained(tiny, device="cpu").encode([texts[i] for i in keep])
    return out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    return make_tiny_checkpoint(str(tmp_path_factory.mktemp("tiny")), LINES, hidden=32)


def test_encode_text_file(tiny, tmp_path):
    inp = tmp_path / "in.txt"
    inp.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    out = tmp_path / "emb" / "x.npy"
    assert (
        main(
            ["encode", "--model", tiny, "--input", str(inp), "--output", str(out), "--no-progress"]
        )
        == 0
    )
    emb = np.load(out)
    assert emb.shape == (len(LINES), 32) and emb.dtype == np.float32
    np.testing.assert_allclose(emb, _reference(tiny, LINES), atol=1e-6)
    assert not emb[1].any() and emb[0].any()  # the blank line: its row, a zero vector
    # Its own stats beside it (X.npy -> X.stats.json): other .npy files in the folder have theirs.
    assert sorted(os.listdir(tmp_path / "emb")) == ["x.npy", "x.stats.json"]
    report = read_report(str(tmp_path / "emb" / "x.stats.json"))
    assert check_balanced(report) == []
    c = report["counts"]["sentences"]
    assert c["in"] == c["out"] == len(LINES)
    assert c["events"] == {"empty": 1, "truncated": 1}


def test_encode_parquet_fp16_shards(tiny, tmp_path):
    texts = LINES * 3 + [None]
    inp = tmp_path / "in.parquet"
    pq.write_table(pa.table({"text": texts, "lang": ["x"] * len(texts)}), inp)
    out = tmp_path / "y"
    rc = main(
        [
            "encode",
            "--model",
            tiny,
            "--input",
            str(inp),
            "--output",
            str(out),
            "--fp16",
            "--shard-size",
            "7",
            "--no-progress",
        ]
    )
    assert rc == 0
    # An embedding store (labse_common.embedding_store) that mining's load_vectors reads.
    from labse_common.embedding_store import EmbeddingStore, load_vectors

    parts = load_vectors(out)
    assert [len(p) for p in parts] == [7, 7, 2] and parts[0].dtype == np.float16
    assert EmbeddingStore(out).all_metadata().column("text").to_pylist()[:3] == [
        t or "" for t in texts[:3]
    ]
    emb = np.concatenate(parts)
    np.testing.assert_allclose(emb.astype(np.float32), _reference(tiny, texts), atol=2e-3)
    events = read_report(str(out / "stats.json"))["counts"]["sentences"]["events"]
    assert events["null"] == 1 and events["empty"] == 4


def test_encode_errors(tiny, tmp_path):
    assert (
        main(["encode", "--model", str(tmp_path / "nope"), "--input", "x", "--output", "y.npy"])
        != 0
    )
    assert (
        main(
            ["encode", "--model", tiny, "--input", str(tmp_path / "nope.txt"), "--output", "y.npy"]
        )
        != 0
    )
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"sentence": ["a"]}), bad)
    assert (
        main(["encode", "--model", tiny, "--input", str(bad), "--output", str(tmp_path / "z.npy")])
        != 0
    )
    with pytest.raises(SystemExit) as e:
        main(["encode", "--help"])
    assert e.value.code == 0
    assert not os.path.exists(tmp_path / "z.npy")
