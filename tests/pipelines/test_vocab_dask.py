"""The vocabulary job on Beam's DaskRunner (a scheduler and two worker processes on 127.0.0.1)
gives the local runner's files: the same vocab.txt, word counts, held-out sample and stats."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from labse_common.stats import StageCounter, check_balanced, read_report
from labse_model.vocab.counting import sentence_words
from tests.support.scaleout_util import dask_args

pytestmark = pytest.mark.slow

# Letters per language: several scripts, so the alphabet, the smoothing weights and the
# per-language tables all matter.
SCRIPTS = {
    "en": "abcdefghijklmnopqrstuvwxyz",
    "el": "αβγδεζηθικλμνξοπρστυφχψω",
    "ru": "абвгдежзийклмнопрстуфхцчшщыэюя",
    "hi": "कखगचजटडतदनपबमयरलवसह",
}
DIRECT = ["--direct_running_mode", "in_memory", "--direct_num_workers", "1"]
# Beam's DaskRunner runs each transform once per partition (the DoFns' setup included): two
# partitions, one per worker, prove the same as four at about two thirds of the time.
PARTITIONS = 2
SHARED = ["2024", "OK", "covid", "ok"]  # words of every language: summed across languages
FILES_PER_LANG = 3
SENTENCES_PER_FILE = 150
ARGS = [
    "--vocab-size",
    "1000",
    "--heldout-fraction",
    "0.1",
    "--max-heldout-per-lang",
    "20",
    "--log-level",
    "WARNING",
]


def _lexicon(rng: random.Random, letters: str, n: int) -> list[str]:
    words = {"".join(rng.choices(letters, k=rng.randint(1, 7))) for _ in range(n)}
    return sorted(words)


def _sentences(rng: random.Random, lexicon: list[str], n: int) -> list[str]:
    # Zipf-like frequencies: counts spread over the min-count cut and the learner's thresholds.
    weights = [1.0 / (i + 1) for i in range(len(lexicon))]
    out = []
    for _ in range(n):
        words = rng.choices(lexicon, weights, k=rng.randint(3, 12))
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words)), rng.choice(SHARED))
        out.append(" ".join(words) + rng.choice([".", "!", "?", " ,"]))
    return out


def _write(path: Path, texts: list) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"text": pa.array(texts, pa.string())}), path)


@pytest.fixture(scope="module")
def sentences(tmp_path_factory) -> Path:
    """<lang>/part-*.parquet, with the cases the job counts: a file without a footer
    (unreadable), one with a damaged middle row group (that group lost), dirty rows and an
    empty language folder."""
    root = tmp_path_factory.mktemp("sentences")
    rng = random.Random(7)
    for lang, letters in SCRIPTS.items():
        lexicon = _lexicon(rng, letters, 400)
        for i in range(FILES_PER_LANG):
            _write(root / lang / f"part-{i}.parquet", _sentences(rng, lexicon, SENTENCES_PER_FILE))
    _write(
        root / "en" / "part-dirty.parquet",
        [None, "", "ctl\x00chars\x07 here", "x" * 120 + " tail words"],
    )
    (root / "el" / "broken.parquet").write_bytes(b"PAR1 not really parquet")
    damaged = root / "ru" / "part-damaged.parquet"
    pq.write_table(
        pa.table({"text": [f"слово{i} текст" for i in range(300)]}),
        damaged,
        compression="snappy",
        use_dictionary=False,
        row_group_size=100,
    )
    data = bytearray(damaged.read_bytes())
    group = pq.ParquetFile(damaged).metadata.row_group(1).column(0)
    for j in range(group.data_page_offset + 20, group.data_page_offset + 200):
        data[j] ^= 0x5A  # the footer is intact: the file opens, its second row group fails
    damaged.write_bytes(bytes(data))
    (root / "xx").mkdir()
    return root


def _vocab_job(inp: Path, out: Path, *runner: str) -> float:
    """The vocabulary job (``pipelines.vocab.run``, what ``python -m pipelines.vocab`` calls)
    in this process: the property is the runners' equal output, not the command line, which
    tests/end_to_end covers; seconds it took."""
    from pipelines.vocab import run

    t0 = time.monotonic()
    assert run(["--input", str(inp), "--output", str(out), *ARGS, *runner]) == 0
    return time.monotonic() - t0


def _rows(path: Path) -> list[tuple]:
    return [tuple(r.values()) for r in pq.read_table(path).to_pylist()]


def test_vocab_on_dask_equals_local(cluster, sentences, tmp_path):
    local, dask = tmp_path / "local", tmp_path / "dask"
    # The local runner in one process: what is compared is the DaskRunner's output with the
    # DirectRunner's; the file shuffle on the DirectRunner's worker processes is
    # test_vocab_spill's.
    t_local = _vocab_job(sentences, local, *DIRECT)
    t_dask = _vocab_job(sentences, dask, *dask_args(cluster, PARTITIONS))
    print(f"\nvocab job: local runner {t_local:.1f}s, DaskRunner (2 workers) {t_dask:.1f}s")

    assert (dask / "vocab.txt").read_bytes() == (local / "vocab.txt").read_bytes()
    a, b = _rows(local / "word_counts.parquet"), _rows(dask / "word_counts.parquet")
    assert len(a) > 1000 and set(a) == set(b)
    assert a == b  # also the row order, which the learner's ties follow
    assert pq.read_table(dask / "word_counts.parquet").schema.names == [
        "word",
        "count",
        "raw_count",
    ]
    held = _rows(local / "heldout.parquet")
    assert held == _rows(dask / "heldout.parquet")  # a hashed sample, not a random one
    assert {lang for lang, _ in held} == set(SCRIPTS) and len(held) == 20 * len(SCRIPTS)
    for name in ("languages.json", "_beam/languages.jsonl", "_beam/counts.json"):
        assert (dask / name).read_bytes() == (local / name).read_bytes(), name

    ra, rb = read_report(str(local / "stats.json")), read_report(str(dask / "stats.json"))
    assert check_balanced(ra) == [] and check_balanced(rb) == []
    assert ra["counts"] == rb["counts"]
    c = rb["counts"]
    n_files = len(SCRIPTS) * FILES_PER_LANG + 3
    # The file without a footer is unreadable; the one damaged half-way loses its second row
    # group only: the first and third are still counted.
    assert c["files"] == {
        "in": n_files,
        "out": n_files - 1,
        "dropped": {"unreadable": 1},
        "events": {"damaged_row_groups": 1},
    }
    assert c["sentences"]["dropped"]["damaged_row_group"] == 100
    readable = [f"слово{i} текст" for i in [*range(100), *range(200, 300)]]
    counted = sum(sentence_words(t, StageCounter(), 100, 0.1)[0] == "count" for t in readable)
    counts = {w: raw for w, _, raw in _rows(local / "word_counts.parquet")}
    assert counted > 150 and counts.get("текст") == counted, (counts.get("текст"), counted)
    assert c["languages"]["dropped"] == {"empty": 1}
    assert c["words"]["dropped"]["below_min_count"] > 0  # the min-count cut ran on both
    sa, sb = (json.loads((d / "vocab_stats.json").read_text("utf-8")) for d in (local, dask))
    sa.pop("learn_seconds"), sb.pop("learn_seconds")
    assert sa == sb
    # Only the job's files: no temporary folder, claim or merged part file is left behind.
    assert sorted(p.name for p in (dask / "_beam").iterdir()) == ["counts.json", "languages.jsonl"]
    assert sorted(p.name for p in dask.iterdir()) == sorted(p.name for p in local.iterdir())
    assert not [p for p in dask.iterdir() if p.name.startswith("_tmp-") or p.name == "_CLAIM.json"]
