"""``filters lexicon --for-pairs``: the pairs to mine that no training pair
covers get a pivot dictionary, and stats.json and the file's metadata say which pairs are
direct, pivoted or absent; the miner's check accepts pivoted pairs in either order."""

from __future__ import annotations

import json
import logging

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from filters.__main__ import main as filters_main
from labse_common.errors import InputError
from mining import lexicon_file
from tests.mining.test_lexicon_pivot import corpus, held_out


def _run(*argv: str) -> int:
    return filters_main(["lexicon", *argv, "--set", "progress=false", "--log-level", "WARNING"])


@pytest.fixture(scope="module")
def fit_file(tmp_path_factory):
    d = tmp_path_factory.mktemp("pivotcli")
    rows = [(*p, "de", "en") for p in corpus("de", "en", 300, 1)]
    rows += [(*p, "fr", "en") for p in corpus("fr", "en", 200, 2)]
    names = ["src", "trg", "src_lang", "trg_lang"]
    pq.write_table(pa.table({n: [r[i] for r in rows] for i, n in enumerate(names)}), d / "fit.pq")
    de, fr = held_out(40, 5)
    pq.write_table(pa.table({"src": de, "trg": fr}), d / "de-fr.parquet")
    return d


def test_pivoted_and_absent_pairs_are_recorded_and_checked(fit_file, tmp_path):
    out = tmp_path / "lex"
    fit = str(fit_file / "fit.pq")
    assert _run("--fit", fit, "--for-pairs", "de-fr", "en-de", "ja-de", "--output", str(out)) == 0
    stats = json.loads((out / "stats.json").read_text())
    assert stats["dictionaries"] == {
        "direct": {"de-en": 300, "fr-en": 200},
        "pivot": {"de-fr": "en"},
        "absent": ["ja-de"],
    }
    meta = pq.read_schema(out / "lexicon.parquet").metadata
    assert json.loads(meta[b"pivots"]) == {"de-fr": "en"}
    assert json.loads(meta[b"absent"]) == ["ja-de"]
    path = out / "lexicon.parquet"
    # the miner's check: pivoted and fitted pairs in either order, not an absent one
    lexicon_file.check_for_pairs(path, [("fr", "de"), ("de", "fr"), ("en", "fr"), ("en", "de")])
    with pytest.raises(InputError, match="not on de-ja"):
        lexicon_file.check_for_pairs(path, [("de", "ja")])
    assert lexicon_file.check_for_pairs(path, [("de", "ja")], absent_ok=True) == ["de-ja"]


def test_scoring_a_pivoted_pair_names_its_languages(fit_file, tmp_path, caplog):
    fit, pairs = str(fit_file / "fit.pq"), str(fit_file / "de-fr.parquet")
    lex = tmp_path / "lex"
    assert _run("--fit", fit, "--for-pairs", "de-fr", "--output", str(lex)) == 0
    lex_file = str(lex / "lexicon.parquet")
    out = tmp_path / "scored"
    assert _run("--lexicon", lex_file, "--pairs", pairs, "--output", str(out)) == 2
    (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert "give --pairs-langs" in line and not out.exists()
    assert (
        _run(
            "--lexicon",
            lex_file,
            "--pairs",
            pairs,
            "--pairs-langs",
            "deu-fra",
            "--output",
            str(out),
        )
        == 0
    )
    scored = pq.read_table(out / "scored.parquet")
    assert np.isfinite(scored.column("lex_fwd").to_numpy()).all()
    assert json.loads((out / "stats.json").read_text())["dictionaries"]["pivot"] == {"de-fr": "en"}
