"""The mining package and the embedding store under hostile input: each case failed
on the code before the fix (a traceback, exit 0 with nothing mined, a file outside the output or
the store, a wrong answer to a documented command) and is one line and exit 2, or a count."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from labse_common.embedding_store import (
    EmbeddingStore,
    StoreDamaged,
    StoreWriter,
    count_problems,
    vector_problems,
)
from labse_common.stats import check_balanced
from mining.__main__ import main

REPO = Path(__file__).resolve().parents[2]
DIM = 8


def side(d: Path, name: str, vecs: np.ndarray) -> tuple[Path, Path]:
    """``name.txt`` (one distinct sentence per row) and ``name.npy`` (float32 rows)."""
    t, e = d / f"{name}.txt", d / f"{name}.npy"
    t.write_text("".join(f"{name} sentence {i}\n" for i in range(len(vecs))), encoding="utf-8")
    np.save(e, np.asarray(vecs, np.float32))
    return t, e


def good(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)


def mine(tmp: Path, src: tuple[Path, Path], trg: tuple[Path, Path], *extra: str) -> int:
    return main(
        [
            "mine",
            "--src-text",
            str(src[0]),
            "--trg-text",
            str(trg[0]),
            "--src-emb",
            str(src[1]),
            "--trg-emb",
            str(trg[1]),
            "--output",
            str(tmp / "out"),
            "--k",
            "2",
            *extra,
        ]
    )


def error_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


# --- 1. nothing usable is exit 2 naming the input and the reason --------------------------------


@pytest.mark.parametrize("bad,reason", [(0.0, "zero_vector"), (np.nan, "nonfinite_value")])
def test_every_source_vector_unusable_is_exit_2(tmp_path: Path, caplog, bad, reason) -> None:
    src = side(tmp_path, "src", np.full((30, DIM), bad, np.float32))
    trg = side(tmp_path, "trg", good(20))
    assert mine(tmp_path, src, trg) == 2
    (line,) = error_lines(caplog)
    assert line.startswith(f"--src-emb {src[1]}: ") and f"(30 dropped: {reason} 30)" in line
    assert not (tmp_path / "out" / "mined.parquet").exists()


def test_every_target_text_empty_names_the_text(tmp_path: Path, caplog) -> None:
    src = side(tmp_path, "src", good(10))
    trg = side(tmp_path, "trg", good(12, 1))
    trg[0].write_text("\n" * 12, encoding="utf-8")
    assert mine(tmp_path, src, trg) == 2
    (line,) = error_lines(caplog)
    assert line.startswith(f"--trg-text {trg[0]}: ") and "(12 dropped: empty_text 12)" in line


def test_mine_many_language_without_a_usable_vector_is_exit_2(tmp_path: Path, caplog) -> None:
    side(tmp_path, "de", np.zeros((15, DIM)))
    side(tmp_path, "en", good(15))
    rc = main(
        [
            "mine-many",
            "--pairs",
            "de-en",
            "--corpus",
            str(tmp_path / "{lang}.txt"),
            "--emb",
            str(tmp_path / "{lang}.npy"),
            "--output",
            str(tmp_path / "many"),
        ]
    )
    assert rc == 2
    (line,) = error_lines(caplog)
    assert f"--emb {tmp_path / 'de.npy'}: " in line and "zero_vector 15" in line


# --- 2. a norm that overflows is a counted drop, in every reader --------------------------------


def test_vector_problems_names_each_reason() -> None:
    x = good(5)
    x[1] = np.nan
    x[2] = 0.0
    x[3] *= np.float32(1e30)  # finite values whose float32 norm is inf
    x[4, 0] = np.inf
    codes = vector_problems(x)
    assert codes.tolist() == [0, 1, 2, 3, 1]
    assert count_problems(codes) == {"nonfinite_value": 2, "zero_vector": 1, "nonfinite_norm": 1}


@pytest.mark.slow
@pytest.mark.parametrize("index", ["flat", "ivf"])
def test_overflowing_rows_are_dropped_and_counted(tmp_path: Path, index: str) -> None:
    x, y = good(40), good(40, 1)
    y[:20] = x[:20] + 0.01 * good(20, 2)
    x[5:8] *= np.float32(1e30)  # a traceback in mining/bounded.py before
    src, trg = side(tmp_path, "src", x), side(tmp_path, "trg", y)
    assert mine(tmp_path, src, trg, "--index", index, "--nprobe", "64") == 0
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert check_balanced(stats) == []
    assert stats["counts"]["src_sentences"]["dropped"]["nonfinite_norm"] == 3
    assert stats["counts"]["src_sentences"]["out"] == 37


def test_evaluation_treats_an_overflowing_row_as_unusable() -> None:
    from mining.evaluate import _clean

    x = good(3)
    x[1] *= np.float32(1e30)
    out = _clean(x)
    assert np.isfinite(out).all() and not out[1].any()  # a zero row: never retrieved
    np.testing.assert_allclose(np.linalg.norm(out[[0, 2]], axis=1), 1.0, rtol=1e-6)


# --- 3. mining plan: NaN refused, the documented 1e9 accepted ------------------------------------


def test_plan_reads_counts_in_scientific_notation(capsys) -> None:
    # The form docs/stages.md shows.
    assert (
        main(
            [
                "plan",
                "--n-src",
                "1e9",
                "--n-trg",
                "1e9",
                "--mem-gb",
                "64",
                "--workers",
                "100",
                "--json",
            ]
        )
        == 0
    )
    plan = json.loads(capsys.readouterr().out)
    assert plan["n_src"] == plan["n_trg"] == 1_000_000_000 and plan["workers"] == 100


@pytest.mark.parametrize(
    "flag,value",
    [
        ("--mem-gb", "nan"),
        ("--mem-gb", "inf"),
        ("--n-src", "1.5"),
        ("--n-src", "nan"),
        ("--n-src", "-1e3"),
        ("--workers", "0"),
    ],
)
def test_plan_refuses_non_numbers(caplog, capsys, flag: str, value: str) -> None:
    argv = {"--n-src": "1000", "--n-trg": "1000", "--mem-gb": "2", flag: value}
    rc = main(["plan", *[f"{k}={v}" for k, v in argv.items()]])
    assert rc == 2 and capsys.readouterr().out == ""
    (line,) = error_lines(caplog)
    assert line.startswith(f"{flag} {value}: ")


# --- 4. a store's shard name cannot climb out of the store ---------------------------------------


def _climbing_store(tmp: Path) -> tuple[Path, Path]:
    store = tmp / "stores" / "src"
    w = StoreWriter(store, DIM, "float32", rows_per_shard=100)
    w.add(good(10), [str(i) for i in range(10)], text=[f"s {i}" for i in range(10)])
    w.close()
    outside = tmp / "secret"  # a file outside the store, which the manifest points at
    os.replace(store / "shard_00000.npy", tmp / "secret.npy")
    os.replace(store / "shard_00000.parquet", tmp / "secret.parquet")
    manifest = json.loads((store / "store.json").read_text())
    manifest["shards"][0]["name"] = "../../secret"
    (store / "store.json").write_text(json.dumps(manifest))
    return store, outside


def test_store_refuses_a_shard_name_outside_it(tmp_path: Path, caplog) -> None:
    store, _ = _climbing_store(tmp_path)
    with pytest.raises(StoreDamaged, match="not a file name inside the store"):
        EmbeddingStore(store)
    trg = side(tmp_path, "trg", good(10, 1))
    rc = mine(tmp_path, (store, store), trg)
    assert rc == 2
    (line,) = error_lines(caplog)
    assert str(store / "store.json") in line and "'../../secret'" in line


@pytest.mark.parametrize("name", ["/abs/shard", "a/b", "..", "", "a\\b"])
def test_store_refuses_any_name_with_a_path(tmp_path: Path, name: str) -> None:
    w = StoreWriter(tmp_path / "s", DIM, "float32")
    w.add(good(2), ["a", "b"])
    w.close()
    m = json.loads((tmp_path / "s" / "store.json").read_text())
    m["shards"][0]["name"] = name
    (tmp_path / "s" / "store.json").write_text(json.dumps(m))
    with pytest.raises(StoreDamaged):
        EmbeddingStore(tmp_path / "s")


def test_one_import_path_for_the_store() -> None:
    assert importlib.util.find_spec("mining.embeddings") is None  # a second path


# --- 5. mine-many pairs are language codes, normalised, and nothing else --------------------------


@pytest.mark.parametrize("pair", ["../de-en", "de-../en", "de-en/../..", "../../de-en"])
def test_mine_many_refuses_a_pair_that_is_a_path(tmp_path: Path, caplog, pair: str) -> None:
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    side(work, "de", good(10))
    side(work, "en", good(10, 1))
    rc = main(
        [
            "mine-many",
            "--pairs",
            pair,
            "--corpus",
            str(work / "{lang}.txt"),
            "--emb",
            str(work / "{lang}.npy"),
            "--output",
            str(work / "out"),
        ]
    )
    assert rc == 2
    (line,) = error_lines(caplog)
    assert "mining.pairs" in line and repr(pair) in line
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_dir()) == ["a", "b"]


def test_mine_many_names_folders_by_normalised_codes(tmp_path: Path) -> None:
    x = good(12)
    side(tmp_path, "de", x)
    side(tmp_path, "en", x + 0.01 * good(12, 3))
    # A script or region after "_" is dropped by the normalisation, whatever it holds.
    rc = main(
        [
            "mine-many",
            "--pairs",
            "deu-ENG",
            "de-en",
            "de_/../../x-en",
            "--corpus",
            str(tmp_path / "{lang}.txt"),
            "--emb",
            str(tmp_path / "{lang}.npy"),
            "--output",
            str(tmp_path / "out"),
        ]
    )
    assert rc == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["de-en", "stats.json"]


# --- 6. FAISS's loader does not print its attempts ----------------------------------------------


@pytest.mark.slow
def test_commands_that_load_faiss_print_no_loader_lines(tmp_path: Path) -> None:
    src, trg = side(tmp_path, "src", good(10)), side(tmp_path, "trg", good(10, 1))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    runs = [
        [
            sys.executable,
            "-m",
            "mining",
            "mine",
            "--src-text",
            str(src[0]),
            "--trg-text",
            str(trg[0]),
            "--src-emb",
            str(src[1]),
            "--trg-emb",
            str(trg[1]),
            "--output",
            str(tmp_path / "o"),
            "--k",
            "2",
            "--log-level",
            "INFO",
        ],
        [
            sys.executable,
            "-c",
            "import logging; logging.basicConfig(level=logging.DEBUG); "
            "import mining.bounded, mining.knn, mining.plan",
        ],
    ]
    for argv in runs:
        res = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        text = res.stdout + res.stderr
        assert "Could not load library" not in text and "faiss.loader" not in text, text


def test_faiss_is_imported_in_one_place() -> None:
    """The loader is quietened in mining/faiss_lib.py: a second import elsewhere could run first."""
    found = []
    for pkg in ("mining", "labse_common", "labse_model", "filters", "pipelines"):
        for path in (REPO / pkg).rglob("*.py"):
            for line in path.read_text(encoding="utf-8").splitlines():
                if line.strip().startswith(("import faiss", "from faiss")):
                    found.append(str(path.relative_to(REPO)))
    assert found == ["mining/faiss_lib.py"], found


def test_tatoeba_evaluation_of_an_encoder_without_a_usable_vector_is_an_error(
    tmp_path: Path,
) -> None:
    """It scored 0 with exit 0: a broken model looked like a bad one."""
    from labse_common.errors import InputError
    from mining.evaluate import evaluate_tatoeba

    for ext, words in (("deu", "Satz"), ("eng", "sentence")):
        (tmp_path / f"tatoeba.deu-eng.{ext}").write_text(
            "".join(f"{words} {i}\n" for i in range(5))
        )
    with pytest.raises(InputError, match="no usable vector: all 5 embeddings"):
        evaluate_tatoeba(tmp_path, lambda texts, path: np.zeros((len(texts), DIM), np.float32))
    good_rows = evaluate_tatoeba(
        tmp_path, lambda texts, path: np.eye(len(texts), DIM, dtype=np.float32)
    )
    assert good_rows["average"]["both"] == 100.0
