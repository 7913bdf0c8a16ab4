"""End-to-end `python -m mining mine` / `mine-many`: outputs, stats balance, bad input."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from labse_common.stats import check_balanced
from mining.__main__ import main
from mining.output import write_pairs
from tests.support.paths import REPO


def unit(a: np.ndarray) -> np.ndarray:
    return (a / np.linalg.norm(a, axis=1, keepdims=True)).astype(np.float32)


def write_side(d: Path, name: str, texts: list[str], vecs: np.ndarray) -> tuple[Path, Path]:
    t, e = d / f"{name}.txt", d / f"{name}.npy"
    t.write_text("".join(s + "\n" for s in texts), encoding="utf-8")
    np.save(e, vecs.astype(np.float32))
    return t, e


@pytest.fixture()
def corpus(tmp_path: Path):
    """60 planted pairs + distractors, one NaN and one zero vector, an empty line, duplicates."""
    rng = np.random.default_rng(5)
    d = 24
    base = rng.standard_normal((60, d))
    xs = np.vstack([base + 0.2 * rng.standard_normal((60, d)), rng.standard_normal((40, d))])
    ys = np.vstack([base + 0.2 * rng.standard_normal((60, d)), rng.standard_normal((70, d))])
    src_texts = [f"quelle {i}" for i in range(100)]
    trg_texts = [f"target {i}" for i in range(130)]
    src_texts[99] = ""  # empty line
    xs[98] = np.nan
    ys[129] = 0.0
    # duplicate sentence (same text, same vector) on the target side
    trg_texts[128], ys[128] = trg_texts[3], ys[3]
    s = write_side(tmp_path, "src", src_texts, xs)
    t = write_side(tmp_path, "trg", trg_texts, ys)
    return s, t


def run_mine(tmp_path: Path, s, t, *extra: str) -> tuple[int, Path]:
    out = tmp_path / "out"
    rc = main(
        [
            "mine",
            "--src-text",
            str(s[0]),
            "--trg-text",
            str(t[0]),
            "--src-emb",
            str(s[1]),
            "--trg-emb",
            str(t[1]),
            "--output",
            str(out),
            "--src-lang",
            "fr",
            "--trg-lang",
            "en",
            *extra,
        ]
    )
    return rc, out


def test_mine_writes_outputs_and_balanced_stats(tmp_path: Path, corpus) -> None:
    rc, out = run_mine(tmp_path, *corpus, "--threshold", "1.4", "--unify")
    assert rc == 0
    stats = json.loads((out / "stats.json").read_text())
    assert check_balanced(stats) == []
    c = stats["counts"]
    assert c["src_sentences"]["dropped"] == {
        "empty_text": 1,
        "nonfinite_value": 1,
        "zero_vector": 0,
        "nonfinite_norm": 0,
    }
    assert c["trg_sentences"]["dropped"]["zero_vector"] == 1
    assert c["trg_sentences"]["events"]["duplicate_unified"] == 1
    table = pq.read_table(out / "mined.parquet")
    for col in ("src", "trg", "src_lang", "trg_lang", "margin", "src_id", "trg_id"):
        assert col in table.column_names
    margins = table.column("margin").to_pylist()
    assert margins == sorted(margins, reverse=True) and min(margins) > 1.4
    pairs = set(zip(table.column("src_id").to_pylist(), table.column("trg_id").to_pylist()))
    # the duplicated target sentence maps back to both its rows
    assert ("3", "3") in pairs and ("3", "128") in pairs
    gold = {(str(i), str(i)) for i in range(60)} | {("3", "128")}
    assert pairs == gold  # true pairs score >= 1.44 here, distractors <= 1.37
    assert stats["rows_written"] == table.num_rows
    with gzip.open(out / "mined.tsv.gz", "rt", encoding="utf-8") as f:
        first = f.readline().rstrip("\n").split("\t")
    assert float(first[0]) == pytest.approx(margins[0], rel=1e-6)
    assert first[1] == table.column("src")[0].as_py() and first[3:5] == ["fr", "en"]
    assert (out / "score_hist.png").read_bytes()[:4] == b"\x89PNG"


def test_sharded_run_gives_the_same_pairs(tmp_path: Path, corpus) -> None:
    # --unify: the duplicated target rows would otherwise tie, and ties may break either way.
    rc, out = run_mine(tmp_path, *corpus, "--threshold", "1.0", "--unify")
    one = pq.read_table(out / "mined.parquet")
    rc2 = main(
        [
            "mine",
            "--src-text",
            str(corpus[0][0]),
            "--trg-text",
            str(corpus[1][0]),
            "--src-emb",
            str(corpus[0][1]),
            "--trg-emb",
            str(corpus[1][1]),
            "--output",
            str(tmp_path / "sh"),
            "--threshold",
            "1.0",
            "--shard-rows",
            "33",
            "--unify",
        ]
    )
    assert rc == rc2 == 0
    sh = pq.read_table(tmp_path / "sh" / "mined.parquet")
    assert one.column("src_id").to_pylist() == sh.column("src_id").to_pylist()
    assert one.column("trg_id").to_pylist() == sh.column("trg_id").to_pylist()


# --unify: the corpus's duplicated target rows would otherwise tie, and ties may break either way.
@pytest.mark.parametrize(
    "extra",
    [
        ("--unify",),
        ("--unify", "--mode", "intersect"),
        ("--unify", "--workers", "2", "--shard-rows", "40"),
    ],
)
def test_mine_equals_the_in_memory_miner(tmp_path: Path, corpus, extra) -> None:
    """`mining mine` (the bounded miner: stores read in chunks, exact blocked search) writes the
    pairs, margins and cosines of the in-memory path (both matrices loaded, mine_vectors)."""
    from labse_common.sections.mining import MiningConfig
    from mining.mine import mine_vectors, pairs_table, prepare_inputs

    (s_txt, s_emb), (t_txt, t_emb) = corpus
    rc, out = run_mine(tmp_path, *corpus, "--threshold", "1.0", *extra)
    assert rc == 0
    got = pq.read_table(out / "mined.parquet")
    mode = "intersect" if "intersect" in extra else "max"
    cfg = MiningConfig(threshold=1.0, unify=True, mode=mode, progress=False)
    inp = prepare_inputs(
        str(s_txt), str(t_txt), str(tmp_path / "ref"), cfg, str(s_emb), str(t_emb), None, "fr", "en"
    )
    pairs, _ = mine_vectors(inp.src.x, inp.trg.x, cfg)
    cosine = np.einsum("nd,nd->n", inp.src.x[pairs.src], inp.trg.x[pairs.trg])
    ref = pairs_table(pairs, cosine, inp.src, inp.trg, inp.src_c, inp.trg_c)
    assert ref.num_rows >= 60

    def key(t):
        return sorted(
            zip(
                t.column("src_id").to_pylist(),
                t.column("trg_id").to_pylist(),
                t.column("margin").to_pylist(),
                t.column("cosine").to_pylist(),
            )
        )

    a, b = key(got), key(ref)
    assert [r[:2] for r in a] == [r[:2] for r in b]
    np.testing.assert_allclose([r[2:] for r in a], [r[2:] for r in b], atol=1e-5)


def test_empty_and_one_sentence_corpora(tmp_path: Path) -> None:
    s = write_side(tmp_path, "s", [], np.zeros((0, 8)))
    t = write_side(tmp_path, "t", ["only one"], np.ones((1, 8)))
    rc, out = run_mine(tmp_path, s, t, "--k", "16")
    assert rc == 0
    stats = json.loads((out / "stats.json").read_text())
    assert stats["rows_written"] == 0 and check_balanced(stats) == []
    s = write_side(tmp_path, "s1", ["un seul"], np.ones((1, 8)))
    rc, out = run_mine(tmp_path, s, t, "--k", "16", "--mode", "intersect", "--overwrite")
    table = pq.read_table(out / "mined.parquet")
    assert rc == 0 and table.num_rows == 1
    assert table.column("margin")[0].as_py() == pytest.approx(1.0)


def test_bad_arguments_are_clear_errors(tmp_path: Path, corpus, caplog) -> None:
    s, t = corpus
    np.save(tmp_path / "bad.npy", np.ones((130, 7), np.float32))
    rc, _ = run_mine(tmp_path, s, (t[0], tmp_path / "bad.npy"))
    assert rc == 2 and "dimension mismatch" in caplog.text
    np.save(tmp_path / "short.npy", np.ones((5, 24), np.float32))
    rc, _ = run_mine(tmp_path, s, (t[0], tmp_path / "short.npy"))
    assert rc == 2 and "embedding rows" in caplog.text
    rc, _ = run_mine(tmp_path, s, (tmp_path / "missing.txt", t[1]))
    assert rc == 2 and "not found" in caplog.text
    rc, _ = run_mine(tmp_path, s, t, "--index", "IVF8,Bogus")
    assert rc == 2 and "mining.index='IVF8,Bogus'" in caplog.text
    with pytest.raises(SystemExit):
        main(["mine", "--src-text", "x", "--trg-text", "y", "--output", "o", "--mode", "nope"])


def test_parquet_input_and_store_embeddings(tmp_path: Path, corpus) -> None:
    from labse_common.embedding_store import StoreWriter

    (s_txt, s_emb), t = corpus
    texts = s_txt.read_text(encoding="utf-8").splitlines()
    pq.write_table(
        pa.table(
            {
                "text": texts,
                "id": [f"doc{i}" for i in range(len(texts))],
                "url_or_title": [f"http://x/{i}" for i in range(len(texts))],
                "lang": ["fr"] * len(texts),
            }
        ),
        tmp_path / "src.parquet",
    )
    w = StoreWriter(tmp_path / "store", dim=24, dtype="float16", rows_per_shard=40)
    w.add(np.load(s_emb), [f"doc{i}" for i in range(len(texts))])
    w.close()
    rc, out = run_mine(
        tmp_path, (tmp_path / "src.parquet", tmp_path / "store"), t, "--threshold", "1.3"
    )
    assert rc == 0
    table = pq.read_table(out / "mined.parquet")
    assert table.column("src_id")[0].as_py().startswith("doc")
    assert table.column("src_url_or_title")[0].as_py().startswith("http://x/")


def test_mine_many_embeds_each_language_once(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    base = rng.standard_normal((30, 16))
    for lang in ("de", "fr", "en"):
        vec = unit(base + 0.1 * rng.standard_normal((30, 16)))
        write_side(tmp_path, lang, [f"{lang} {i}" for i in range(30)], vec)
    rc = main(
        [
            "mine-many",
            "--pairs",
            "de-en",
            "fr-en",
            "--corpus",
            str(tmp_path / "{lang}.txt"),
            "--emb",
            str(tmp_path / "{lang}.npy"),
            "--output",
            str(tmp_path / "many"),
            "--index",
            "ivf",
            "--nprobe",
            "100",
        ]
    )
    assert rc == 0
    for pair in ("de-en", "fr-en"):
        t = pq.read_table(tmp_path / "many" / pair / "mined.parquet")
        assert t.column("src_id").to_pylist() == t.column("trg_id").to_pylist()
        assert t.num_rows == 30
        assert (
            check_balanced(json.loads((tmp_path / "many" / pair / "stats.json").read_text())) == []
        )


def test_help_lists_every_option() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "mining", "mine", "--help"], cwd=REPO, capture_output=True, text=True
    )
    assert out.returncode == 0
    for opt in (
        "--k",
        "--margin",
        "--mode",
        "--threshold",
        "--unify",
        "--index",
        "--mem-gb",
        "--nprobe",
        "--model",
        "--src-emb",
        "--workers",
    ):
        assert opt in out.stdout


def test_write_pairs_in_slices_equals_one_slice(tmp_path: Path) -> None:
    # Bounded row groups / TSV slices must not change what is written.
    n = 10
    table = pa.table(
        {
            "src": [f"s\t{i}" for i in range(n)],
            "trg": [f"t\n{i}" for i in range(n)],
            "margin": pa.array(np.linspace(2, 1, n), pa.float32()),
            "src_id": [str(i) if i % 3 else None for i in range(n)],
        }
    )
    one_pq, one_tsv = write_pairs(table, tmp_path / "one")
    pq_path, tsv_path = write_pairs(table, tmp_path / "sliced", rows_per_slice=4)
    assert pq.ParquetFile(pq_path).metadata.num_row_groups == 3
    assert pq.read_table(pq_path).equals(table) and pq.read_table(one_pq).equals(table)
    assert gzip.decompress(tsv_path.read_bytes()) == gzip.decompress(one_tsv.read_bytes())
    with gzip.open(tsv_path, "rt", encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f]
    margin = str(table.column("margin")[1].as_py())  # float32 widened to a Python float
    assert len(rows) == n and rows[1] == [margin, "s 1", "t 1", "1"]
    assert rows[0][3] == "None"  # as before: a null id is written as str(None)


def test_histogram_of_near_identical_float32_margins(tmp_path):
    # A tiny model's margins can all sit within ~1e-6 of 1.0: float32 bin edges collided there
    # and the mining run failed in its histogram ("Too many bins for data range").
    from mining.output import write_histogram

    scores = np.array([1.0000013, 1.0000006, 1.0000005, 1.0000004, 1.0000002] * 8, np.float32)
    write_histogram(scores, tmp_path / "h.png")
    assert (tmp_path / "h.png").stat().st_size > 0
