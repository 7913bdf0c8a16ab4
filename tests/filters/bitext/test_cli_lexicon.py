"""``python -m filters lexicon``: fit IBM Model 1 dictionaries, score pairs, refuse bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from filters.__main__ import main as filters_main
from labse_common.stats import check_balanced
from tests.support.lexicon_toy import toy_corpus

# --- the command ------------------------------------------------------------------------------


def _tsv(path: Path, pairs) -> Path:
    path.write_text("".join(f"{a}\t{b}\n" for a, b in pairs), encoding="utf-8")
    return path


def _run(*argv: str) -> int:
    return filters_main(["lexicon", *argv, "--set", "progress=false", "--log-level", "WARNING"])


def test_command_fits_scores_and_counts(tmp_path):
    fit = _tsv(tmp_path / "fit.tsv", [*toy_corpus(400), ("...", "zib1"), ("", "zib2")])
    held = toy_corpus(100, seed=5)
    pairs = pa.table(
        {"src": [a for a, _ in held], "trg": [b for _, b in held], "margin": [1.1] * 100}
    )
    pq.write_table(pairs, tmp_path / "pairs.parquet")
    out = tmp_path / "out"
    rc = _run("--fit", str(fit), "--pairs", str(tmp_path / "pairs.parquet"), "--output", str(out))
    assert rc == 0
    stats = json.loads((out / "stats.json").read_text())
    assert not check_balanced(stats)
    c = stats["counts"]
    # the punctuation-only side and the empty side teach nothing: counted, not fitted
    assert c["fit_pairs"]["out"] == 400 and c["fit_pairs"]["dropped"] == {"no_word_token": 2}
    assert c["pairs"] == {"in": 100, "out": 100, "dropped": {}}
    scored = pq.read_table(out / "scored.parquet")
    assert scored.column_names == ["src", "trg", "margin", "lex_fwd", "lex_bwd"]
    assert np.isfinite(scored.column("lex_fwd").to_numpy()).all()
    # A later run reusing the saved dictionaries scores the same
    again = tmp_path / "again"
    lex = str(out / "lexicon.parquet")
    assert (
        _run("--lexicon", lex, "--pairs", str(tmp_path / "pairs.parquet"), "--output", str(again))
        == 0
    )
    a = pq.read_table(again / "scored.parquet")
    assert a.column("lex_bwd").equals(scored.column("lex_bwd"))
    assert not (again / "lexicon.parquet").exists()
    assert json.loads((again / "stats.json").read_text())["lexicon_file"] == lex


@pytest.mark.parametrize(
    "case, says",
    [
        ("missing_fit", "--fit"),
        ("missing_pairs", "--pairs"),
        ("no_words", "no pair with a token"),
        ("not_a_lexicon", "not a lexicon"),
    ],
)
def test_command_refuses_useless_input_with_exit_2(tmp_path, caplog, capsys, case, says):
    fit = _tsv(tmp_path / "fit.tsv", toy_corpus(20))
    pairs = _tsv(tmp_path / "pairs.tsv", toy_corpus(5, seed=9))
    source = ["--fit", str(fit)]
    if case == "missing_fit":
        source = ["--fit", str(tmp_path / "nope.tsv")]
    elif case == "missing_pairs":
        pairs = tmp_path / "nope.tsv"
    elif case == "no_words":
        source = ["--fit", str(_tsv(tmp_path / "punct.tsv", [("...", "!!"), ("?", "-")]))]
    elif case == "not_a_lexicon":
        pq.write_table(pa.table({"src": ["a"]}), tmp_path / "x.parquet")
        source = ["--lexicon", str(tmp_path / "x.parquet")]
    out = tmp_path / "out"
    rc = _run(*source, "--pairs", str(pairs), "--output", str(out))
    assert rc == 2
    err = capsys.readouterr().err + caplog.text
    assert says in err and "Traceback" not in err
    assert not out.exists()


def test_fit_only_writes_the_dictionaries(tmp_path):
    fit = _tsv(tmp_path / "fit.tsv", toy_corpus(100))
    out = tmp_path / "out"
    assert _run("--fit", str(fit), "--output", str(out)) == 0
    assert sorted(p.name for p in out.iterdir()) == ["lexicon.parquet", "stats.json"]
    stats = json.loads((out / "stats.json").read_text())
    assert not check_balanced(stats) and "pairs" not in stats["counts"]
    assert stats["counts"]["fit_pairs"]["out"] == 100


def test_a_lexicon_without_pairs_is_a_usage_error(tmp_path, caplog):
    rc = _run("--lexicon", str(tmp_path / "x.parquet"), "--output", str(tmp_path / "o"))
    assert rc == 2 and "nothing to score" in caplog.text
