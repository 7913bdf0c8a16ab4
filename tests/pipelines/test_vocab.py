"""The Beam counting job (DirectRunner) and both CLIs, on a small real-text corpus layout."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from labse_common.config import load
from labse_common.stats import check_balanced, read_report
from labse_model.vocab import build_vocab
from labse_model.vocab.build import read_counts
from labse_model.vocab.export import read_vocab
from tests.support.paths import REPO as ROOT

TATOEBA = ROOT.parent / "shared" / "data" / "tatoeba"
LANGS = {"eng": "en", "hin": "hi", "ell": "el", "kor": "ko"}
N = 150
BEAM_FAST = ["--direct_running_mode", "in_memory", "--log-level", "WARNING"]


def _write(path: Path, texts: list, lang: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    n = len(texts)
    table = pa.table(
        {
            "text": pa.array(texts, pa.string()),
            "lang": [lang] * n,
            "lang_score": [1.0] * n,
            "quality_score": [1.0] * n,
            "source": ["tatoeba"] * n,
            "doc_id": [path.stem] * n,
            "url_or_title": [""] * n,
        }
    )
    pq.write_table(table, path)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, dict[str, list]]:
    if not TATOEBA.is_dir():
        pytest.skip(f"real Tatoeba sample not found at {TATOEBA} (see ../shared/data/README.md)")
    root = tmp_path_factory.mktemp("sentences")
    by_lang: dict[str, list] = {}
    for code, lang in LANGS.items():
        src = "hin" if code == "eng" else code
        lines = (TATOEBA / f"train.{src}-eng.{code}").read_text("utf-8").splitlines()[:N]
        _write(root / lang / "part-0.parquet", lines, lang)
        by_lang[lang] = lines
    dirty = [None, "", "ctl\x00chars\x07 here", "x" * 120 + " tail words"]
    _write(root / "en" / "part-1.parquet", dirty, "en")
    by_lang["en"] += dirty
    (root / "xx").mkdir()  # an empty language folder
    (root / "el" / "broken.parquet").write_bytes(b"PAR1 not really parquet")
    return root, by_lang


@pytest.mark.slow
def test_beam_job_matches_in_process_counts(corpus, tmp_path):
    from pipelines.vocab import run

    root, by_lang = corpus
    out = tmp_path / "vocab"
    args = ["--input", str(root), "--output", str(out), "--vocab-size", "1500"]
    assert run(args + ["--heldout-fraction", "0.1", *BEAM_FAST]) == 0
    for name in (
        "vocab.txt",
        "tokenizer.json",
        "vocab_stats.json",
        "stats.json",
        "word_counts.parquet",
        "heldout.parquet",
        "languages.json",
    ):
        assert (out / name).is_file(), name
    report = read_report(str(out / "stats.json"))
    assert check_balanced(report) == []
    c = report["counts"]
    assert c["files"] == {"in": 6, "out": 5, "dropped": {"unreadable": 1}}
    assert c["languages"]["dropped"] == {"empty": 1}
    assert c["sentences"]["dropped"]["malformed"] == 1
    assert c["sentences"]["events"]["control_chars_cleaned"] == 1
    assert c["words"]["dropped"]["too_long"] == 1

    # The same sentences counted in-process give the same table and the same counts.
    cfg = load("vocab", None, flags={"vocab_size": 1500, "heldout_fraction": 0.1})
    ref = build_vocab(by_lang, cfg, tmp_path / "ref")
    rc = read_report(str(ref / "stats.json"))["counts"]
    for unit in ("sentences", "words"):
        assert c[unit] == rc[unit], unit
    bw, bc = read_counts(out / "word_counts.parquet")
    rw, rcnt = read_counts(ref / "word_counts.parquet")
    beam_table = dict(zip(bw, bc))
    assert set(beam_table) == set(rw)
    np.testing.assert_allclose([beam_table[w] for w in rw], rcnt, rtol=1e-9)
    assert read_vocab(out / "vocab.txt") == read_vocab(ref / "vocab.txt")

    stats = json.loads((out / "vocab_stats.json").read_text("utf-8"))
    assert set(stats["languages"]) == {"en", "hi", "el", "ko"}
    held = pq.read_table(out / "heldout.parquet").to_pylist()
    assert held and {r["lang"] for r in held} <= set(stats["languages"])
    for lang, s in stats["languages"].items():
        assert s["smoothed_share"] > 0 and s["heldout"]["wordpieces_per_word"] >= 1.0, lang


def test_learner_cli_from_saved_counts(corpus, tmp_path, caplog):
    # The command's main() in this process (`python -m labse_model.vocab` in its own process,
    # usage errors included, is tests/end_to_end/test_cli_contract.py's).
    from labse_model.vocab.__main__ import main as learner_main

    root, by_lang = corpus
    counts_dir = tmp_path / "counts"
    cfg = load("vocab", None, flags={"vocab_size": 1500, "heldout_fraction": 0.1})
    build_vocab(by_lang, cfg, counts_dir)
    out = tmp_path / "relearned"
    argv = ["--counts", str(counts_dir / "word_counts.parquet"), "--output", str(out)]
    assert learner_main([*argv, "--vocab-size", "1200"]) == 0
    vocab = read_vocab(out / "vocab.txt")
    assert 0.95 * 1200 <= len(vocab) <= 1200
    assert check_balanced(read_report(str(out / "stats.json"))) == []
    stats = json.loads((out / "vocab_stats.json").read_text("utf-8"))
    assert stats["languages"]["hi"]["heldout"]["sentences"] > 0
    caplog.clear()
    assert learner_main(["--counts", "/nonexistent.parquet", "--output", str(out)]) == 2
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "not found" in errors[0], errors


def test_cli_usage_errors_and_help(corpus, tmp_path, capsys):
    from pipelines.vocab import run

    root, _ = corpus
    out = str(tmp_path / "o")
    assert run(["--input", str(tmp_path / "missing"), "--output", out, "--vocab-size", "10"]) == 2
    assert (
        run(["--input", str(root), "--output", out, "--vocab-size", "100", "--smoothing", "2"]) == 2
    )
    assert (
        run(
            [
                "--input",
                str(root),
                "--output",
                out,
                "--vocab-size",
                "100",
                "--set",
                "learner.no_such_option=1",
            ]
        )
        == 2
    )
    assert run(["--input", str(root), "--output", out, "--config", "nope.yaml"]) == 2
    # run(["--help"]) prints what `python -m pipelines.vocab --help` prints; that command's own
    # process is tests/end_to_end/test_cli_contract.py's.
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        run(["--help"])
    assert e.value.code == 0
    help_text = capsys.readouterr().out
    for opt in (
        "--input",
        "--output",
        "--vocab-size",
        "--smoothing",
        "--config",
        "--min-count",
        "--max-word-length",
        "--heldout-fraction",
        "--set",
        "--log-level",
        "--runner",
    ):
        assert opt in help_text, opt


def test_a_full_disk_during_the_job_is_one_line_and_nothing_committed(
    corpus, tmp_path, monkeypatch, caplog
):
    import errno

    import pipelines.vocab as job

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    root, _ = corpus
    out = tmp_path / "o"
    monkeypatch.setattr(job, "_run_into", full)  # where the workers' writes happen
    assert job.run(["--input", str(root), "--output", str(out), "--vocab-size", "400"]) == 2
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "no space left on the device" in errors[0] and str(out) in errors[0]
    assert not out.exists() or not [p for p in out.iterdir()]
