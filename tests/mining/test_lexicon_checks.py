"""Lexicon files checked before use: a table that is not a lexicon this
project wrote (bad probabilities, an unknown direction, null words, nothing in it) and a lexicon
fitted on other languages are one line naming the file, exit status 2, before the miner claims
its output; a lexicon that records no languages is used with a warning."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from mining import lexicon, lexicon_file
from mining.__main__ import main
from tests.support.lexicon_toy import toy_corpus

N = 12  # sentences per side of the mining task


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict:
    """A toy lexicon fitted once (with and without recorded languages) and a small mining task:
    the texts of both sides, embeddings that pair row i with row i."""
    d = tmp_path_factory.mktemp("lexcheck")
    fitted = lexicon.fit(toy_corpus(300))
    # No languages: as fitted before they were recorded.
    lexicon_file.save(fitted, d / "old.parquet")
    fitted.langs = {"de-en": 300}
    lexicon_file.save(fitted, d / "de-en.parquet")
    fitted.langs = {"de-en": 200, "fr-en": 100}
    lexicon_file.save(fitted, d / "two.parquet")
    pairs = toy_corpus(N, seed=3)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, 16)).astype(np.float32)
    for lang, texts, vecs in (
        ("de", [a for a, _ in pairs], x),
        ("fr", [a for a, _ in pairs], x),
        ("en", [b for _, b in pairs], x + 0.01),
    ):
        (d / f"{lang}.txt").write_text("".join(f"{t}\n" for t in texts), encoding="utf-8")
        np.save(d / f"{lang}.npy", vecs)
    return {"dir": d}


def mine(made: dict, out: Path, lex: Path, *extra: str) -> int:
    d = made["dir"]
    return main(
        [
            "mine",
            *("--src-text", str(d / "de.txt"), "--trg-text", str(d / "en.txt")),
            *("--src-emb", str(d / "de.npy"), "--trg-emb", str(d / "en.npy")),
            *("--output", str(out), "--k", "2", "--lexicon", str(lex)),
            *("--set", "progress=false"),
            *extra,
        ]
    )


def mine_many(made: dict, out: Path, lex: Path, *pairs: str) -> int:
    d = made["dir"]
    return main(
        [
            "mine-many",
            *("--pairs", *pairs),
            *("--corpus", str(d / "{lang}.txt"), "--emb", str(d / "{lang}.npy")),
            *("--output", str(out), "--k", "2", "--lexicon", str(lex)),
            *("--set", "progress=false"),
        ]
    )


def error_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def _set(t: pa.Table, name: str, values) -> pa.Table:
    return t.set_column(t.column_names.index(name), name, values)


def _first(t: pa.Table, name: str, value, typ: pa.DataType) -> pa.Table:
    """``t`` with the first entry of column ``name`` replaced by ``value``."""
    col = t.column(name).to_pylist()
    return _set(t, name, pa.array([value, *col[1:]], typ))


# Each hostile table, made from a good one, and what the one error line must say.
BAD = {
    "nan": (lambda t: _first(t, "prob", float("nan"), pa.float32()), "not finite"),
    "inf": (lambda t: _first(t, "prob", float("inf"), pa.float32()), "not finite"),
    "negative": (lambda t: _first(t, "prob", -0.25, pa.float32()), "outside (0, 1]"),
    "above_one": (lambda t: _first(t, "prob", 1.5, pa.float32()), "outside (0, 1]"),
    "zero": (lambda t: _first(t, "prob", 0.0, pa.float32()), "outside (0, 1]"),
    "null_prob": (lambda t: _first(t, "prob", None, pa.float32()), "without a probability"),
    "text_prob": (
        lambda t: _set(t, "prob", pc.cast(t.column("prob"), pa.string())),
        "prob is string, not a number",
    ),
    "empty": (lambda t: t.slice(0, 0), "empty"),
    "unknown_direction": (
        lambda t: _first(t, "direction", "sideways", pa.string()),
        "unknown direction 'sideways'",
    ),
    "null_direction": (lambda t: _first(t, "direction", None, pa.string()), "unknown direction"),
    "one_direction": (
        lambda t: t.filter(pc.equal(t.column("direction"), "fwd")),
        "no bwd entry",
    ),
    "null_given": (
        lambda t: _first(t, "given", None, pa.string()),
        "with a null word in column given",
    ),
    "null_explained": (
        lambda t: _first(t, "explained", None, pa.string()),
        "with a null word in column explained",
    ),
    "langs_not_pairs": (
        lambda t: t.replace_schema_metadata({"pairs": "300", "langs": '["de", "xx"]'}),
        "langs is not a list of language pairs",
    ),
}


def bad_lexicon(made: dict, case: str, tmp_path: Path) -> Path:
    good = pq.read_table(made["dir"] / "de-en.parquet")
    path = tmp_path / f"{case}.parquet"
    pq.write_table(BAD[case][0](good), path)
    return path


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_damaged_lexicon_is_refused_on_load(made, tmp_path, case):
    with pytest.raises(ValueError, match=BAD[case][1].replace("(", r"\(").replace("]", r"\]")):
        lexicon_file.load(bad_lexicon(made, case, tmp_path))


@pytest.mark.parametrize("case", sorted(BAD))
def test_mining_with_a_damaged_lexicon_is_one_line_exit_2_before_the_output(
    made, tmp_path, caplog, case
):
    path = bad_lexicon(made, case, tmp_path)
    out = tmp_path / "out"
    assert mine(made, out, path, "--src-lang", "de", "--trg-lang", "en") == 2
    lines = error_lines(caplog)
    assert len(lines) == 1 and "\n" not in lines[0], lines
    assert str(path) in lines[0] and BAD[case][1] in lines[0], lines
    assert "Traceback" not in caplog.text
    assert not out.exists()  # refused before the output was claimed


def test_the_saved_languages_are_read_back(made):
    assert lexicon_file.load(made["dir"] / "two.parquet").langs == {"de-en": 200, "fr-en": 100}
    assert lexicon_file.load(made["dir"] / "old.parquet").langs == {}


def test_mining_other_languages_than_the_lexicons_is_refused_its_own_mine(made, tmp_path, caplog):
    lex = made["dir"] / "de-en.parquet"
    for src, trg, mined in (("fr", "en", "fr-en"), ("en", "fr", "en-fr")):
        caplog.clear()
        out = tmp_path / f"{src}-{trg}"
        assert mine(made, out, lex, "--src-lang", src, "--trg-lang", trg) == 2
        (line,) = error_lines(caplog)
        assert str(lex) in line and f"fitted on de-en, not on {mined}" in line, line
        assert not out.exists()
    # Its own languages, in any spelling and either order, mine with it.
    for src, trg in (("deu", "ENG"), ("en", "de")):
        out = tmp_path / f"ok-{src}"
        assert mine(made, out, lex, "--src-lang", src, "--trg-lang", trg) == 0
        assert {"lex_fwd", "lex_bwd"} <= set(pq.read_schema(out / "mined.parquet").names)


def test_a_lexicon_with_languages_needs_the_mined_languages_named(made, tmp_path, caplog):
    out = tmp_path / "o"
    assert mine(made, out, made["dir"] / "de-en.parquet") == 2
    (line,) = error_lines(caplog)
    assert "--src-lang and --trg-lang" in line and not out.exists()


def test_a_lexicon_that_records_no_languages_is_used_with_a_warning(made, tmp_path, caplog):
    out = tmp_path / "o"
    with caplog.at_level(logging.WARNING):
        assert mine(made, out, made["dir"] / "old.parquet", "--src-lang", "fr") == 0
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("records no languages" in w and "old.parquet" in w for w in warned), warned
    assert (out / "mined.parquet").is_file()


def test_mine_many_mines_a_pair_the_lexicon_lacks_without_it(made, tmp_path, caplog):
    # The runner must still run when a pair has no dictionary: that pair is mined by
    # the encoder alone, its lex_* empty (the combined filter imputes them), with a warning.
    out = tmp_path / "many"
    with caplog.at_level(logging.WARNING):
        assert mine_many(made, out, made["dir"] / "de-en.parquet", "de-en", "fr-en") == 0
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("no dictionary for fr-en" in w for w in warned), warned
    fr = pq.read_table(out / "fr-en" / "mined.parquet")
    assert fr.num_rows and np.isnan(fr.column("lex_fwd").to_numpy()).all()
    de = pq.read_table(out / "de-en" / "mined.parquet")
    assert np.isfinite(de.column("lex_fwd").to_numpy()).all()
    stats = json.loads((out / "fr-en" / "stats.json").read_text())
    assert stats["config"]["lexicon"] == "absent", stats["config"]
    out = tmp_path / "many2"
    # One lexicon may cover several pairs (the runner fits one on all its training pairs).
    assert mine_many(made, out, made["dir"] / "two.parquet", "de-en", "fr-en") == 0
    for pair in ("de-en", "fr-en"):
        assert "lex_fwd" in pq.read_schema(out / pair / "mined.parquet").names


def test_the_languages_are_json_in_the_schema_metadata(made):
    meta = pq.read_schema(made["dir"] / "two.parquet").metadata
    assert json.loads(meta[b"langs"]) == {"de-en": 200, "fr-en": 100}
    assert b"langs" not in pq.read_schema(made["dir"] / "old.parquet").metadata


def test_saving_refuses_a_min_prob_that_leaves_a_direction_empty(tmp_path):
    fitted = lexicon.fit(toy_corpus(50))
    with pytest.raises(ValueError, match="lower lexicon.min_prob"):
        lexicon_file.save(fitted, tmp_path / "x.parquet", min_prob=1.5)
    assert not (tmp_path / "x.parquet").exists()
