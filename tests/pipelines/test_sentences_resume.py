"""The ``sentences`` stage resumes by language.

``pipelines.e2e_tasks sentences`` writes one shard per language. Killed with
``LABSE_KILL_AFTER=sentences:1`` right after its first language, its rerun keeps that language
(``resumed_shards`` 1 in stats.json) and ends with the files of an uninterrupted run, byte for
byte. A half-written shard is never taken over, nor one damaged after it was recorded; the
inputs are recognised by content, so a copy of the folders (new modification times, as after a
run folder is fetched back onto another machine) still resumes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from labse_common import resume_shards
from labse_common.stats import check_balanced
from tests.support.paths import REPO as ROOT

LANGS = ["de", "en", "fr"]
CORPORA = ("wikipedia", "commoncrawl")


def _inputs(root: Path) -> Path:
    """Two corpus jobs' outputs (two files for some languages) and training sentences, one
    language (``it``) only there."""
    for k, name in enumerate(CORPORA):
        (root / name).mkdir(parents=True)
        (root / name / "stats.json").write_text("{}")
        for j, lang in enumerate(LANGS):
            (root / name / lang).mkdir()
            for part in range(1 + (j + k) % 2):
                n = 30 + 7 * j + part
                texts = [f"{lang} {name} sentence {(i * 7) % n} part {part}" for i in range(n)]
                table = pa.table(
                    {
                        "text": texts,
                        "lang": [lang] * n,
                        "doc_id": [f"d{i % 5}" for i in range(n)],
                        "url_or_title": [f"https://{lang}.example/{i}" for i in range(n)],
                    }
                )
                pq.write_table(table, root / name / lang / f"part-{part:05d}.parquet")
    for lang in ("de", "it"):
        (root / "extra" / lang).mkdir(parents=True)
        table = pa.table({"text": [f"{lang} training {i}" for i in range(9)], "lang": [lang] * 9})
        pq.write_table(table, root / "extra" / lang / "text.parquet")
    return root


def _run(root: Path, out: Path, kill: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.pop(resume_shards.KILL_ENV, None)
    if kill:
        env[resume_shards.KILL_ENV] = kill
    cmd = [sys.executable, "-m", "pipelines.e2e_tasks", "sentences"]
    for name in CORPORA:
        cmd += ["--corpus", str(root / name)]
    cmd += ["--extra", str(root / "extra"), "--output", str(out)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)


def _files(out: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(out)): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.name != "stats.json"
    }


def _stats(out: Path) -> dict:
    doc = json.loads((out / "stats.json").read_text())
    assert not check_balanced(doc), doc
    return doc


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[Path, Path]:
    root = _inputs(tmp_path_factory.mktemp("sentences") / "in")
    out = root.parent / "reference"
    r = _run(root, out)
    assert r.returncode == 0, r.stderr
    return root, out


@pytest.mark.slow
def test_killed_after_first_language_resumes_elsewhere(reference, tmp_path):
    root, ref = reference
    stats = _stats(ref)
    assert stats["shards"] == 4 and stats["resumed_shards"] == 0
    assert sorted(stats["vocab_sentences_per_language"]) == ["de", "en", "fr", "it"]
    assert sorted(stats["sentences_per_language"]) == LANGS
    assert sorted(p.name for p in (ref / "mine").iterdir()) == LANGS

    out = tmp_path / "out"
    r = _run(root, out, kill="sentences:1")
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert not (out / "mine").exists()  # nothing committed
    # A half-written next language: never taken over.
    (out / "_partial" / "lang-en").mkdir()
    (out / "_partial" / "lang-en" / "mine.parquet").write_bytes(b"PAR1 half")
    # Everything copied elsewhere (new modification times, as a run folder fetched back).
    moved = tmp_path / "moved"
    shutil.copytree(root, moved / "in", copy_function=shutil.copyfile)
    shutil.copytree(out, moved / "out", copy_function=shutil.copyfile)

    r = _run(moved / "in", moved / "out")
    assert r.returncode == 0, r.stderr
    stats = _stats(moved / "out")
    assert stats["resumed_shards"] == 1 and stats["shards"] == 4
    assert _files(moved / "out") == _files(ref)
    drop = ("resumed_shards",)
    assert {k: v for k, v in stats.items() if k not in drop} == {
        k: v for k, v in _stats(ref).items() if k not in drop
    }
    assert not (moved / "out" / "_partial").exists()


@pytest.mark.slow
def test_damaged_shard_is_done_again(reference, tmp_path):
    root, ref = reference
    out = tmp_path / "out"
    r = _run(root, out, kill="sentences:2")
    assert r.returncode == -signal.SIGKILL, r.stderr
    shard = out / "_partial" / "lang-de" / "vocab.parquet"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, other contents
    shard.write_bytes(bytes(data))

    r = _run(root, out)
    assert r.returncode == 0, r.stderr
    assert "damaged" in r.stderr
    assert _stats(out)["resumed_shards"] == 1  # en kept, de done again
    assert _files(out) == _files(ref)


def test_sentences_stage_is_resumable():
    from pipelines.run.corpus_stages import SENTENCES

    assert SENTENCES.resumable
