"""The vocabulary's file shuffle (pipelines/vocab_spill.py) writes what Beam's shuffle writes."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from labse_common.stats import check_balanced, read_report
from pipelines import spill as spill_mod
from pipelines.vocab import run
from pipelines.vocab_count import word_shard
from pipelines.vocab_spill import SpillCounts, merged_words
from tests.pipelines.test_vocab_dask import SCRIPTS, _lexicon, _sentences, _write

SHARDS = 4
DASK = "apache_beam.runners.dask.dask_runner.DaskRunner"


def _partials(rng: random.Random, n: int) -> list[tuple[tuple[str, str], tuple[int, int]]]:
    out = []
    for _ in range(n):  # ~5 partials per (lang, word), spread over the spill buffers
        word = f"w{rng.randrange(1500)}"
        out.append(
            ((rng.choice(["en", "el", "hi"]), word), (rng.randint(1, 9), rng.randrange(10**6)))
        )
    return out


def test_spilled_counts_merge_to_the_sums_in_language_order(tmp_path, monkeypatch):
    rng = random.Random(11)
    partials = _partials(rng, 20_000)
    want: dict[str, dict[str, list[int]]] = {}
    for (lang, word), (n, first) in partials:
        cur = want.setdefault(word, {}).setdefault(lang, [0, 1 << 62])
        cur[0] += n
        cur[1] = min(cur[1], first)

    spill = SpillCounts(str(tmp_path / "spill"), 1000, SHARDS, word_shard)
    spill.start_bundle()
    paths: dict[int, list[str]] = {}
    for kv in partials:
        for shard, path in spill.process(kv):
            paths.setdefault(shard, []).append(path)
    for wv in spill.finish_bundle():
        shard, path = wv.value
        paths.setdefault(shard, []).append(path)
    assert min(len(p) for p in paths.values()) >= 3  # fan-in 2 below: merge rounds happen

    widest: list[int] = []
    real_merge = spill_mod.reduce_spilled

    def counting(p, fan_in, fmt):
        widest.append(fan_in)
        return real_merge(p, fan_in, fmt)

    monkeypatch.setattr("pipelines.vocab_spill.reduce_spilled", counting)
    got: dict[str, dict[str, list[int]]] = {}
    for shard, ps in sorted(paths.items()):
        words = list(merged_words(ps, fan_in=2))
        assert [w for w, _ in words] == sorted(w for w, _ in words)  # by word, each once
        assert len({w for w, _ in words}) == len(words)
        for word, per_lang in words:
            assert word_shard(word, SHARDS) == shard
            assert [lang for lang, _, _ in per_lang] == sorted({lang for lang, _, _ in per_lang})
            got[word] = {lang: [n, first] for lang, n, first in per_lang}
    assert widest == [2] * len(paths)
    assert got == want
    assert not list((tmp_path / "spill").rglob("*.parquet"))  # read files are deleted


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sentences")
    rng = random.Random(3)
    for lang, letters in SCRIPTS.items():
        lexicon = _lexicon(rng, letters, 2500)
        for i in range(3):
            _write(root / lang / f"part-{i}.parquet", _sentences(rng, lexicon, 200))
    (root / "el" / "broken.parquet").write_bytes(b"PAR1 not really parquet")
    return root


def _rows(path: Path) -> list[tuple]:
    return [tuple(r.values()) for r in pq.read_table(path).to_pylist()]


@pytest.mark.slow
def test_file_shuffle_writes_what_beams_shuffle_writes(corpus, tmp_path):
    outs = {}
    # Beam's shuffle is the reference, in one process (its output does not depend on the
    # runner: test_vocab_dask); the file shuffle runs on 2 worker processes, as users run it.
    runners = {
        "memory": ["--direct_running_mode", "in_memory", "--direct_num_workers", "1"],
        "files": ["--direct_num_workers", "2"],
    }
    for mode, runner in runners.items():
        out = tmp_path / mode
        args = [
            "--input",
            str(corpus),
            "--output",
            str(out),
            "--vocab-size",
            "1000",
            "--set",
            f"shuffle={mode}",
            "--set",
            "spill_rows=1000",
            "--set",
            "spill_fan_in=2",
            *runner,
            "--log-level",
            "WARNING",
        ]
        assert run(args) == 0
        report = read_report(str(out / "stats.json"))
        assert check_balanced(report) == []
        outs[mode] = out
        assert not (out / "_spill").exists()
        assert not [p for p in out.iterdir() if p.name.startswith("_tmp-")]
    mem, files = outs["memory"], outs["files"]
    a, b = _rows(mem / "word_counts.parquet"), _rows(files / "word_counts.parquet")
    assert len(a) > 3000  # more distinct words than several spill buffers
    assert a == b  # the same rows in the same order: the learner's ties follow it
    for name in (
        "vocab.txt",
        "heldout.parquet",
        "languages.json",
        "_beam/counts.json",
        "_beam/languages.jsonl",
    ):
        assert (mem / name).read_bytes() == (files / name).read_bytes(), name
    ca = read_report(str(mem / "stats.json"))["counts"]
    assert ca == read_report(str(files / "stats.json"))["counts"]
    assert ca["files"]["dropped"] == {"unreadable": 1}
    assert sum(Counter(r[0] for r in a).values()) == len(a)  # each word once


@pytest.mark.parametrize(
    ("shuffle", "runner", "spills"),
    [("auto", None, True), ("auto", DASK, False), ("memory", None, False), ("files", DASK, True)],
)
def test_the_file_shuffle_is_chosen_by_runner_and_setting(tmp_path, shuffle, runner, spills):
    from apache_beam.options.pipeline_options import PipelineOptions

    from labse_common.sections.vocab import VocabConfig
    from pipelines.options import new_pipeline
    from pipelines.vocab import build_pipeline

    opts = PipelineOptions([f"--runner={runner}"] if runner else [])
    with new_pipeline(opts) as p:  # built, never run: its temp folder goes with the block
        build_pipeline(
            p,
            [("en", str(tmp_path / "a.parquet"))],
            str(tmp_path / "out"),
            VocabConfig(shuffle=shuffle),
        )
    assert ("SpillCounts" in p.applied_labels) == spills
    assert ("SumPerLangWord" in p.applied_labels) == (not spills)
