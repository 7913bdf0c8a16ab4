"""Every CLI turns a bad value, a malformed --config or a useless input into one error line and
exit status 2, before any Beam pipeline, embedding or counting starts (never a traceback)."""

from __future__ import annotations

import os
import re
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from labse_common.sections.vocab import LearnerConfig
from labse_common.stats import StageCounter
from labse_model.vocab.build import min_vocab_size_from_sample
from labse_model.vocab.counting import sentence_words
from labse_model.vocab.learner import LearnerParams, VocabTooSmall, learn_vocab
from tests.support.cli_process import CliResult, cli_context, run_cli
from tests.support.paths import REPO as ROOT

ENV = {**os.environ, "PYTHONPATH": str(ROOT), "LABSE_LOG_LEVEL": "INFO"}

SENTENCES = [
    f"The quick brown fox number {i} jumps over the lazy dog, while Zoë watches quietly."
    for i in range(200)
] + ["Kafka's vexing jukebox quiz amazed 12 young pilots; why?"] * 5


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("cli_errors")
    (d / "sent" / "en").mkdir(parents=True)
    pq.write_table(pa.table({"text": SENTENCES}), d / "sent" / "en" / "a.parquet")
    (d / "notext" / "en").mkdir(parents=True)
    pq.write_table(pa.table({"sentence": SENTENCES}), d / "notext" / "en" / "a.parquet")
    (d / "bad.yaml").write_text("corpus:\n  min_chars: [10\nvocab: {\n", encoding="utf-8")
    (d / "model").mkdir()  # a directory, so the checks after it are reached
    (d / "mm").mkdir()
    (d / "mm" / "de.txt").write_text("Ein Satz.\nNoch einer.\n", encoding="utf-8")
    (d / "real_pairs.tsv").write_text("Ein Satz.\tA sentence.\n", encoding="utf-8")
    return {"root": d}


def _cases(d: Path) -> dict[str, tuple[list[str], list[str]]]:
    """name -> (python -m arguments, strings the error must contain)."""
    cc = [
        "pipelines.commoncrawl",
        "--input",
        str(d / "sent" / "en" / "a.parquet"),
        "--output",
        str(d / "out_cc"),
    ]
    wiki = [
        "pipelines.wikipedia",
        "--input",
        str(d / "sent" / "en" / "a.parquet"),
        "--output",
        str(d / "out_wiki"),
    ]
    vocab = ["pipelines.vocab", "--input", str(d / "sent"), "--output", str(d / "out_vocab")]
    notext = str(d / "notext" / "en" / "a.parquet")
    train = ["labse_model", "train", "--pairs", str(d / "pairs.tsv"), "--output", str(d / "tr")]
    mine = [
        "mining",
        "mine",
        "--src-text",
        "a.txt",
        "--trg-text",
        "b.txt",
        "--src-emb",
        "a.npy",
        "--trg-emb",
        "b.npy",
        "--output",
        str(d / "mined"),
    ]
    return {
        "cc_lid_threshold_abc": ([*cc, "--set", "lid_threshold=abc"], ["corpus.lid_threshold"]),
        "cc_unknown_key": ([*cc, "--set", "lid_treshold=0.3"], ["corpus.lid_treshold"]),
        "cc_malformed_yaml": ([*cc, "--config", str(d / "bad.yaml")], ["bad.yaml", "YAML"]),
        "wiki_quality_nan": (
            [*wiki, "--set", "quality_threshold=nan"],
            ["corpus.quality_threshold"],
        ),
        "vocab_malformed_yaml": ([*vocab, "--config", str(d / "bad.yaml")], ["bad.yaml", "YAML"]),
        "vocab_smoothing_nan": ([*vocab, "--set", "smoothing=nan"], ["vocab.smoothing"]),
        "vocab_no_text_column": (
            ["pipelines.vocab", "--input", str(d / "notext"), "--output", str(d / "out_vocab2")],
            [notext, "'text'"],
        ),
        "vocab_below_alphabet": (
            [*vocab, "--vocab-size", "20"],
            ["vocab.vocab_size=20", "alphabet"],
        ),
        "vocab_learner_unknown": (
            [
                "labse_model.vocab",
                "--counts",
                notext,
                "--output",
                str(d / "lv"),
                "--set",
                "learner.bogus=1",
            ],
            ["vocab.learner.bogus"],
        ),
        "embed_no_text_column": (
            [
                "pipelines.embed",
                "--input",
                notext,
                "--model",
                str(d / "model"),
                "--output",
                str(d / "emb"),
            ],
            [notext, "'text'"],
        ),
        "mine_k_0": ([*mine, "--set", "k=0"], ["mining.k=0"]),
        "mine_malformed_yaml": ([*mine, "--config", str(d / "bad.yaml")], ["bad.yaml"]),
        "beam_mine_mem_nan": (
            [
                "pipelines.mine",
                "--src-emb",
                "a",
                "--trg-emb",
                "b",
                "--output",
                str(d / "bm"),
                "--set",
                "mem_gb=nan",
            ],
            ["mining.mem_gb"],
        ),
        "mine_many_checks_all_first": (
            [
                "mining",
                "mine-many",
                "--pairs",
                "de-en",
                "--corpus",
                str(d / "mm" / "{lang}.txt"),
                "--model",
                str(d / "model"),
                "--output",
                str(d / "many"),
            ],
            [str(d / "mm" / "en.txt"), "nothing was embedded"],
        ),
        "train_lr_nan": ([*train, "--set", "lr=nan"], ["train.lr"]),
        "train_unknown_model_key": ([*train, "model.hiden_size=64"], ["model.hiden_size"]),
        # No --vocab, --init or train.vocab, and nothing to learn one: refused before a worker
        # starts (it was a worker's ValueError traceback, exit 1).
        "train_no_vocabulary": (
            [*train[:3], str(d / "real_pairs.tsv"), *train[4:], "--set", "learn_vocab=false"],
            ["no vocabulary", "--vocab", "--init"],
        ),
    }


@pytest.fixture(scope="module")
def results(files) -> dict[str, CliResult]:
    """All invocations at once. Each fails in its first second: the cost was the interpreter's
    imports (Beam, torch: ~3.5 s a case), so each is forked from the preloaded fork server
    (tests/support/cli_process.py) as ``python -m`` runs it."""
    cases = _cases(files["root"])
    ctx = cli_context()
    runs = files["root"] / "runs"

    def call(item: tuple[str, list[str]]) -> CliResult:
        name, args = item
        return run_cli(args[0], args[1:], ENV, runs / name, ctx, timeout=120)

    with ThreadPoolExecutor(max_workers=4) as pool:
        done = dict(zip(cases, pool.map(call, ((n, a) for n, (a, _) in cases.items()))))
    return done


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(_cases(Path("/x"))))
def test_cli_usage_error(name, files, results):
    r = results[name]
    _, needles = _cases(files["root"])[name]
    assert r.rc == 2, r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    errors = [ln for ln in r.stderr.splitlines() if "ERROR" in ln]
    assert len(errors) == 1, r.stderr[-3000:]
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])


@pytest.mark.slow
def test_nothing_started_before_the_errors(files, results):
    d = files["root"]
    assert results["mine_many_checks_all_first"].rc == 2
    assert not (d / "many" / "embeddings").exists()  # no language was embedded
    assert not (d / "out_vocab" / "word_counts.parquet").exists()  # nothing was counted
    assert not (d / "emb" / "store.json").exists()


IN_PROCESS = [
    ("commoncrawl", ["--set", "min_chars=-5"], "corpus.min_chars=-5"),
    ("commoncrawl", ["--set", "max_chars=5"], "max_chars=5 is below min_chars=10"),
    ("commoncrawl", ["--set", "rows_per_file=0"], "corpus.rows_per_file=0"),
    ("commoncrawl", ["--min-chars", "-5"], "corpus.min_chars=-5"),
    ("commoncrawl", ["--set", "quality_threshold=nan"], "corpus.quality_threshold"),
    ("wikipedia", ["--set", "dedup=maybe"], "corpus.dedup='maybe'"),
    ("wikipedia", ["--set", "shards_per_language=0"], "corpus.shards_per_language=0"),
    ("wikipedia", ["--set", "lid_threshold=abc"], "corpus.lid_threshold='abc'"),
    ("wikipedia", ["--page-timeout", "0"], "corpus.page_timeout_s=0"),
]


@pytest.mark.parametrize(("job", "extra", "needle"), IN_PROCESS)
def test_corpus_job_rejects_before_beam(job, extra, needle, files, caplog):
    from pipelines import commoncrawl, wikipedia

    main = {"commoncrawl": commoncrawl.main, "wikipedia": wikipedia.main}[job]
    out = files["root"] / f"out_{job}_inproc"
    argv = ["--input", str(files["root"] / "sent" / "en" / "a.parquet"), "--output", str(out)]
    assert main([*argv, *extra]) == 2
    assert needle in caplog.text
    assert not out.exists()


def _words(sentences):
    words: Counter[str] = Counter()
    for s in sentences:
        kind, value = sentence_words(s, StageCounter(), 100)
        if kind == "count":
            words.update(value)
    return list(words), [float(n) for n in words.values()]


def _learner_min_size(words, counts) -> int:
    with pytest.raises(VocabTooSmall) as e:
        learn_vocab(words, counts, LearnerParams(vocab_size=7))
    return int(re.search(r"\((\d+)\)", str(e.value)).group(1))


@pytest.mark.slow
def test_alphabet_bound_is_exact_on_the_whole_corpus_and_sound_on_a_sample():
    params = LearnerParams(vocab_size=7)
    words, counts = _words(SENTENCES)
    need = _learner_min_size(words, counts)
    assert min_vocab_size_from_sample(SENTENCES, 1, params, 0.3, 1, 100)[0] == need
    # A sample sees fewer characters; many languages lower the smallest weight: never above.
    assert min_vocab_size_from_sample(SENTENCES[:3], 1, params, 0.3, 1, 100)[0] <= need
    assert min_vocab_size_from_sample(SENTENCES, 50, params, 0.3, 2, 100)[0] <= need
    capped = LearnerParams(7, LearnerConfig(max_unique_chars=4))
    assert min_vocab_size_from_sample(SENTENCES, 1, capped, 0.3, 1, 100) == (5 + 4, 4)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["eval", "tatoeba", "--data", ".", "--set", "k=0"], "eval.k=0"),
        (["eval", "tatoeba", "--data", ".", "--set", "scoring=best"], "eval.scoring='best'"),
        (
            [
                "mine-many",
                "--corpus",
                "{lang}.txt",
                "--emb",
                "{lang}.npy",
                "--output",
                "o",
                "--set",
                "pairs=[deen]",
            ],
            "mining.pairs: 'deen'",
        ),
        (
            [
                "mine-many",
                "--corpus",
                "{lang}.txt",
                "--emb",
                "{lang}.npy",
                "--output",
                "o",
                "--set",
                "unify=sometimes",
            ],
            "mining.unify='sometimes'",
        ),
    ],
)
def test_mining_sections_reject_bad_values(argv, needle, caplog):
    from mining.__main__ import main

    assert main(argv) == 2
    assert needle in caplog.text
