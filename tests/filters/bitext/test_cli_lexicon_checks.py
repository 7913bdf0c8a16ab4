"""``filters lexicon`` records the languages of the pairs it fits on and refuses what it cannot
use: lexicon.min_prob outside (0, 1), a damaged --lexicon, a language that is
no language; each one line, exit status 2, nothing written."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from filters.__main__ import main as filters_main
from mining import lexicon_file
from tests.support.lexicon_toy import toy_corpus


def _run(*argv: str) -> int:
    return filters_main(["lexicon", *argv, "--set", "progress=false", "--log-level", "WARNING"])


def _tsv(path: Path, rows) -> Path:
    path.write_text("".join("\t".join(r) + "\n" for r in rows), encoding="utf-8")
    return path


def error_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def recorded(out: Path) -> dict | None:
    meta = pq.read_schema(out / "lexicon.parquet").metadata
    return json.loads(meta[b"langs"]) if b"langs" in meta else None


def test_the_runners_training_pairs_record_each_language_pair(tmp_path):
    """train_pairs.tsv as the runner's inputs stage writes it (src, trg, src_lang, trg_lang, no
    header), fitted as its lexicon stage does: both pairs recorded with their counts."""
    rows = [(a, b, "de", "en") for a, b in toy_corpus(60)]
    rows += [(a, b, "fr", "en") for a, b in toy_corpus(40, seed=1)]
    fit = _tsv(tmp_path / "train_pairs.tsv", rows)
    out = tmp_path / "out"
    argv = ["--fit", str(fit), "--layout", "src-trg", "--lang-columns", "col2", "col3"]
    assert _run(*argv, "--output", str(out)) == 0
    assert recorded(out) == {"de-en": 60, "fr-en": 40}
    assert lexicon_file.load(out / "lexicon.parquet").langs == {"de-en": 60, "fr-en": 40}


def test_a_parquet_with_language_columns_records_them_normalised(tmp_path):
    pairs = toy_corpus(30)
    t = pa.table(
        {
            "src": [a for a, _ in pairs],
            "trg": [b for _, b in pairs],
            "src_lang": ["deu"] * 20 + ["FR"] * 10,
            "trg_lang": ["eng"] * 30,
        }
    )
    pq.write_table(t, tmp_path / "fit.parquet")
    out = tmp_path / "out"
    assert _run("--fit", str(tmp_path / "fit.parquet"), "--output", str(out)) == 0
    assert recorded(out) == {"de-en": 20, "fr-en": 10}


def test_langs_names_the_pair_of_a_file_without_language_columns(tmp_path):
    fit = _tsv(tmp_path / "fit.tsv", toy_corpus(50))
    out = tmp_path / "out"
    assert _run("--fit", str(fit), "--langs", "deu-eng", "--output", str(out)) == 0
    assert recorded(out) == {"de-en": 50}


def test_without_languages_the_lexicon_records_none_and_says_so(tmp_path, caplog):
    fit = _tsv(tmp_path / "fit.tsv", toy_corpus(50))
    out = tmp_path / "out"
    assert _run("--fit", str(fit), "--output", str(out)) == 0
    assert recorded(out) is None
    assert "records no languages" in caplog.text


@pytest.mark.parametrize(
    "case, argv, says",
    [
        ("min_prob_above_1", ["--set", "min_prob=1.5"], "min_prob"),
        ("min_prob_1", ["--set", "min_prob=1"], "min_prob"),
        ("min_prob_0", ["--set", "min_prob=0"], "min_prob"),
        ("bad_langs", ["--langs", "de-xx"], "--langs"),
        ("same_langs", ["--langs", "de-de"], "--langs"),
        ("lang_columns_absent", ["--lang-columns", "a", "b"], "no column a and b"),
        ("langs_disagree", ["--langs", "fr-en"], "de-en, not --langs fr-en"),
        ("no_language", [], "unknown language code 'xx'"),
    ],
)
def test_fitting_refuses_what_it_cannot_record_with_exit_2(tmp_path, caplog, case, argv, says):
    rows = [(a, b, "de", "en") for a, b in toy_corpus(20)]
    if case == "no_language":
        rows[5] = (*rows[5][:2], "xx", "en")
    t = pa.table(
        {k: [r[i] for r in rows] for i, k in enumerate(("src", "trg", "src_lang", "trg_lang"))}
    )
    pq.write_table(t, tmp_path / "fit.parquet")
    out = tmp_path / "out"
    assert _run("--fit", str(tmp_path / "fit.parquet"), *argv, "--output", str(out)) == 2
    lines = error_lines(caplog)
    assert len(lines) == 1 and says in lines[0] and "\n" not in lines[0], lines
    assert "Traceback" not in caplog.text
    assert not out.exists()


def test_a_damaged_lexicon_is_refused_before_the_output_is_claimed(tmp_path, caplog):
    fit = _tsv(tmp_path / "fit.tsv", toy_corpus(50))
    assert _run("--fit", str(fit), "--output", str(tmp_path / "lex")) == 0
    t = pq.read_table(tmp_path / "lex" / "lexicon.parquet")
    probs = t.column("prob").to_pylist()
    bad = t.set_column(3, "prob", pa.array([float("nan"), *probs[1:]], pa.float32()))
    pq.write_table(bad, tmp_path / "bad.parquet")
    pairs = _tsv(tmp_path / "pairs.tsv", toy_corpus(5, seed=2))
    out = tmp_path / "out"
    rc = _run(
        "--lexicon", str(tmp_path / "bad.parquet"), "--pairs", str(pairs), "--output", str(out)
    )
    assert rc == 2
    (line,) = error_lines(caplog)
    assert str(tmp_path / "bad.parquet") in line and "not finite" in line
    assert not out.exists()
