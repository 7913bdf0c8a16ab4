"""One embedding path: `labse_model encode`, `mining embed`, the Beam embed job and the runner's
embed task write byte-identical stores for the same sentences (row i = input row i, blank lines
kept as zero vectors); `embedding_store convert` refuses a gap in numbered shards."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

torch = pytest.importorskip("torch")

from labse_common import embedding_store as es  # noqa: E402
from labse_common.stats import check_balanced  # noqa: E402
from labse_model import embed_store  # noqa: E402
from labse_model.tiny import make_tiny_checkpoint  # noqa: E402
from tests.support.cli_process import run_cli  # noqa: E402
from tests.support.paths import REPO as ROOT  # noqa: E402

SENTENCES = [f"sentence number {i} about topic {i % 7}" for i in range(30)]
# Blank, null, a duplicate and an over-long line, spread over two files and several chunks.
FILE_A = [*SENTENCES[:12], "", SENTENCES[3], "word " * 300, None, *SENTENCES[12:20]]
FILE_B = ["   ", *SENTENCES[20:30]]


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # the same kernels for every entry point


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("tiny")
    return make_tiny_checkpoint(str(out / "m"), sentences=SENTENCES, hidden=32, layers=1)


@pytest.fixture()
def sentences(tmp_path: Path, monkeypatch) -> Path:
    """A folder of two Parquet files (text, id, url_or_title); chunks of 8 rows, so chunk and
    shard boundaries (7 rows) fall inside files and pieces of a shard come from two chunks."""
    monkeypatch.setattr(embed_store, "CHUNK_ROWS", 8)
    d = tmp_path / "sentences"
    d.mkdir()
    for name, texts, first in (("a", FILE_A, 0), ("b", FILE_B, len(FILE_A))):
        n = len(texts)
        pq.write_table(
            pa.table(
                {
                    "text": texts,
                    "id": [f"s{first + i}" for i in range(n)],
                    "url_or_title": [f"http://x/{first + i}" for i in range(n)],
                }
            ),
            d / f"{name}.parquet",
            row_group_size=5,
        )
    return d


def _files(store: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(store.iterdir()) if p.name != "stats.json"}


def _same_store(a: Path, b: Path) -> None:
    fa, fb = _files(a), _files(b)
    assert sorted(fa) == sorted(fb)
    assert any(n.endswith(".npy") for n in fa) and any(n.endswith(".parquet") for n in fa)
    for name in fa:
        assert fa[name] == fb[name], f"{name} differs between {a} and {b}"
    sa, sb = (json.loads((s / "stats.json").read_text()) for s in (a, b))
    assert check_balanced(sa) == [] and sa["counts"] == sb["counts"]


def _three_entry_points(tmp_path: Path, tiny: str, sentences: Path) -> Path:
    """``labse_model encode``, ``mining embed`` and ``pipelines.embed`` on the same input: the
    same store files (checked); returns the first store."""
    from labse_model.__main__ import main as labse_main
    from mining.__main__ import main as mining_main
    from pipelines.embed import run as beam_embed

    common = ["--dtype", "float16", "--rows-per-shard", "7"]
    enc, mine, beam = tmp_path / "encode", tmp_path / "mining", tmp_path / "beam"
    assert (
        labse_main(
            [
                "encode",
                "--model",
                tiny,
                "--input",
                str(sentences),
                "--output",
                str(enc),
                "--no-progress",
                *common,
            ]
        )
        == 0
    )
    assert (
        mining_main(
            ["embed", "--text", str(sentences), "--model", tiny, "--output", str(mine), *common]
        )
        == 0
    )
    assert (
        beam_embed(
            [
                "--input",
                str(sentences / "*.parquet"),
                "--model",
                tiny,
                "--output",
                str(beam),
                *common,
                "--direct_running_mode",
                "in_memory",
            ]
        )
        == 0
    )
    _same_store(enc, mine)
    _same_store(enc, beam)
    return enc


def test_three_entry_points_write_byte_identical_stores(tmp_path, tiny, sentences):
    from labse_model.encode import Encoder

    enc = _three_entry_points(tmp_path, tiny, sentences)

    # Row i is input row i: ids, texts (null -> ""), metadata, and the vectors themselves.
    texts = FILE_A + FILE_B
    store = es.EmbeddingStore(enc)
    assert len(store) == len(texts) == 35 and [s.rows for s in store.shards] == [7] * 5
    meta = store.all_metadata()
    assert meta.column_names == ["row", "id", "text", "url_or_title"]
    assert meta.column("row").to_pylist() == list(range(len(texts)))
    assert meta.column("id").to_pylist() == [f"s{i}" for i in range(len(texts))]
    assert meta.column("text").to_pylist() == [t or "" for t in texts]
    vecs = np.concatenate(store.all_vectors()).astype(np.float32)
    blank = [i for i, t in enumerate(texts) if not (t and t.strip())]
    assert blank == [12, 15, 24] and not vecs[blank].any()
    kept = [i for i in range(len(texts)) if i not in blank]
    ref = Encoder.from_pretrained(tiny, device="cpu").encode([texts[i] for i in kept])
    np.testing.assert_allclose(vecs[kept], ref, atol=2e-3)  # float16 storage
    np.testing.assert_array_equal(vecs[13], vecs[3])  # the duplicate: the same vector
    c = json.loads((enc / "stats.json").read_text())["counts"]["sentences"]
    assert c["in"] == c["out"] == len(texts)
    assert c["events"] == {"empty": 3, "null": 1, "truncated": 1}


def test_runner_task_and_mine_model_use_the_same_path(tmp_path, tiny, sentences):
    """The runner's embed task (the library called directly) writes what `mining embed` writes
    with its defaults, and `mine --model` embeds exactly the stored vectors."""
    from mining.__main__ import main as mining_main
    from mining.mine import encode_corpus
    from pipelines.e2e_tasks import embed as embed_task

    lang_dir = tmp_path / "mine_input"
    lang_dir.mkdir()
    os.symlink(sentences, lang_dir / "xx")
    embed_task(lang_dir, ["xx"], tiny, tmp_path / "task", batch_size=64)
    assert (
        mining_main(
            ["embed", "--text", str(sentences), "--model", tiny, "--output", str(tmp_path / "cli")]
        )
        == 0
    )
    _same_store(tmp_path / "task" / "xx", tmp_path / "cli")

    texts = [t or "" for t in FILE_A + FILE_B]
    vecs = encode_corpus(tiny, texts, 64)
    stored = np.concatenate(es.load_vectors(tmp_path / "cli"))
    np.testing.assert_array_equal(vecs.astype(np.float16), stored)


def test_text_input_and_useless_inputs(tmp_path, tiny, sentences):
    """A text file gives the rows of its lines (BOM removed, CRLF stripped); an empty input, a
    missing one or a Parquet without the column is one error line, exit 2, nothing written."""
    from labse_model.__main__ import main as labse_main
    from mining.__main__ import main as mining_main
    from pipelines.embed import run as beam_embed

    txt = tmp_path / "in.txt"
    txt.write_bytes(b"\xef\xbb\xbfErste Zeile\r\n\r\nDritte Zeile\n")
    assert (
        mining_main(
            ["embed", "--text", str(txt), "--model", tiny, "--output", str(tmp_path / "t1")]
        )
        == 0
    )
    assert (
        beam_embed(
            [
                "--input",
                str(txt),
                "--model",
                tiny,
                "--output",
                str(tmp_path / "t2"),
                "--direct_running_mode",
                "in_memory",
            ]
        )
        == 0
    )
    _same_store(tmp_path / "t1", tmp_path / "t2")
    meta = es.EmbeddingStore(tmp_path / "t1").all_metadata()
    assert meta.column("text").to_pylist() == ["Erste Zeile", "", "Dritte Zeile"]

    empty = tmp_path / "empty.txt"
    empty.write_text("")
    notext = tmp_path / "notext.parquet"
    pq.write_table(pa.table({"sentence": ["a"]}), notext)
    for bad, needle in (
        (empty, "no sentences"),
        (notext, "'text'"),
        (tmp_path / "missing.txt", "not found"),
    ):
        out = tmp_path / f"out_{bad.stem}"
        for rc in (
            labse_main(["encode", "--model", tiny, "--input", str(bad), "--output", str(out)]),
            mining_main(["embed", "--text", str(bad), "--model", tiny, "--output", str(out)]),
            beam_embed(["--input", str(bad), "--model", tiny, "--output", str(out)]),
        ):
            assert rc == 2, (bad, needle)
        assert not out.exists()
    error = _one_error_line(
        "mining",
        ["embed", "--text", str(empty), "--model", tiny, "--output", str(tmp_path / "o")],
        tmp_path / "cli",
    )
    assert str(empty) in error and "--text" in error


def _one_error_line(module: str, argv: list[str], workdir: Path) -> str:
    """``python -m module *argv`` must exit 2 with exactly one ERROR line and no traceback; that
    line is returned. A plain interpreter (ctx None), not the fork server: this module's two
    calls would otherwise pay for the server's whole preload (measured 101 s on a loaded
    machine) when no other module of the worker started it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = run_cli(module, argv, env, workdir, None, timeout=120)
    errors = [ln for ln in r.stderr.splitlines() if "ERROR" in ln]
    assert r.rc == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert len(errors) == 1, r.stderr[-2000:]
    return errors[0]


def _numbered(tmp_path: Path, numbers: list[int]) -> tuple[Path, np.ndarray]:
    rng = np.random.default_rng(0)
    v = rng.normal(size=(7 * len(numbers), 8)).astype(np.float32)
    for k, i in enumerate(numbers):
        np.save(tmp_path / f"emb.{i:05d}.npy", v[7 * k : 7 * k + 7])
    return tmp_path / "emb.npy", v


def test_convert_refuses_a_gap_in_numbered_shards(tmp_path):
    src, _ = _numbered(tmp_path, [0, 2, 3])  # emb.00001.npy is missing
    dst = tmp_path / "store"
    error = _one_error_line(
        "labse_common.embedding_store", ["convert", str(src), str(dst)], tmp_path / "cli"
    )
    assert "emb.00001.npy" in error, error
    assert not dst.exists()  # refused before the output was claimed
    # Readers refuse it too: mining would otherwise shift every later row off its line.
    with pytest.raises(es.StoreNotFound, match=r"emb\.00001\.npy"):
        es.load_vectors(src)
    # A shard that does not start at 00000 is a gap as well.
    (tmp_path / "emb.00000.npy").unlink()
    with pytest.raises(es.StoreNotFound, match=r"emb\.00000\.npy"):
        es.load_vectors(src)


def test_convert_writes_through_the_output_claim(tmp_path, caplog):
    src, v = _numbered(tmp_path, [0, 1, 2])
    dst = tmp_path / "store"
    assert es.main(["convert", str(src), str(dst), "--rows-per-shard", "10"]) == 0
    np.testing.assert_array_equal(np.concatenate(es.load_vectors(dst)), v)
    shards = [f"shard_{i:05d}.{ext}" for i in range(3) for ext in ("npy", "parquet")]
    assert sorted(os.listdir(dst)) == [*shards, "store.json"]  # 21 rows, 10 per shard
    assert es.main(["convert", str(src), str(dst)]) == 2  # not empty, no --overwrite
    assert "--overwrite" in caplog.text
    assert es.main(["convert", str(src), str(dst), "--overwrite"]) == 0
    assert sorted(os.listdir(dst)) == ["shard_00000.npy", "shard_00000.parquet", "store.json"]
    # A damaged shard: one line naming the file, nothing written.
    (tmp_path / "emb.00001.npy").write_bytes(b"\x93NUMPY garbage")
    caplog.clear()
    assert es.main(["convert", str(src), str(tmp_path / "other")]) == 2
    assert "emb.00001.npy" in caplog.text and not (tmp_path / "other").exists()


def _damage_groups(path: Path, groups: list[int]) -> None:
    meta = pq.ParquetFile(path).metadata
    data = bytearray(path.read_bytes())
    for g in groups:
        for c in range(meta.num_columns):
            col = meta.row_group(g).column(c)
            start = col.dictionary_page_offset if col.has_dictionary_page else col.data_page_offset
            for i in range(col.data_page_offset + 4, start + col.total_compressed_size):
                data[i] ^= 0x5A  # within this column chunk only
    path.write_bytes(bytes(data))


def test_a_damaged_row_group_keeps_its_rows_as_zero_vectors(tmp_path, tiny, sentences):
    """Row i stays row i: the rows of a row group that does not decode get empty texts and zero
    vectors, counted ``damaged_row_group``, on all three entry points alike; an input with no
    readable row is exit 2 on each."""
    from labse_model.__main__ import main as labse_main
    from mining.__main__ import main as mining_main
    from pipelines.embed import run as beam_embed

    _damage_groups(sentences / "a.parquet", [1])  # rows 5-9
    enc = _three_entry_points(tmp_path, tiny, sentences)
    texts = FILE_A + FILE_B
    store = es.EmbeddingStore(enc)
    meta = store.all_metadata()
    assert meta.column("row").to_pylist() == list(range(len(texts)))
    got = meta.column("text").to_pylist()
    assert got[5:10] == [""] * 5 and got[:5] == [t or "" for t in texts[:5]]
    assert got[10:] == [t or "" for t in texts[10:]]
    assert meta.column("id").to_pylist()[5:10] == ["5", "6", "7", "8", "9"]  # the row number
    vecs = np.concatenate(store.all_vectors()).astype(np.float32)
    assert not vecs[5:10].any() and np.abs(vecs[:5]).sum(axis=1).all()
    c = json.loads((enc / "stats.json").read_text())["counts"]["sentences"]
    assert c["in"] == c["out"] == len(texts) and c["events"]["damaged_row_group"] == 5

    only = tmp_path / "only"
    only.mkdir()
    pq.write_table(
        pa.table({"text": [f"Satz {i}." for i in range(10)]}),
        only / "x.parquet",
        row_group_size=5,
        compression="snappy",
        use_dictionary=False,
    )
    _damage_groups(only / "x.parquet", [0, 1])
    assert (
        labse_main(
            [
                "encode",
                "--model",
                tiny,
                "--input",
                str(only),
                "--output",
                str(tmp_path / "e2"),
                "--no-progress",
            ]
        )
        == 2
    )
    assert (
        mining_main(
            ["embed", "--text", str(only), "--model", tiny, "--output", str(tmp_path / "m2")]
        )
        == 2
    )
    assert (
        beam_embed(
            [
                "--input",
                str(only / "*.parquet"),
                "--model",
                tiny,
                "--output",
                str(tmp_path / "b2"),
                "--direct_running_mode",
                "in_memory",
            ]
        )
        == 2
    )
    assert not any((tmp_path / n).exists() for n in ("e2", "m2", "b2"))
