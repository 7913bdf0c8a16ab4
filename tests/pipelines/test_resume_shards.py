"""A killed stage keeps the shards it finished; the rerun does only the rest.

``pipelines.e2e_tasks embed`` writes one shard per language. Killed with
``LABSE_KILL_AFTER=embed:1`` right after its first language, its rerun keeps that store
(``resumed_shards`` 1 in stats.json), embeds the others, and ends with stores byte-identical to
an uninterrupted run's. A shard that was half-written, or damaged since, is never taken over;
other inputs or settings start afresh.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from labse_common import resume_shards
from labse_common.output_dir import claim_output
from tests.support.paths import REPO as ROOT

LANGS = ["de", "en", "fr"]


@pytest.fixture(scope="module")
def sentences(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("sentences")
    for k, lang in enumerate(LANGS):
        (d / lang).mkdir()
        texts = [f"{lang} sentence number {i} about topic {i % 5 + k}" for i in range(40)]
        table = pa.table({"text": texts, "id": [f"{lang}{i}" for i in range(40)]})
        pq.write_table(table, d / lang / "part-00000.parquet")
    return d


def _embed(sentences: Path, model: str, out: Path, kill: str | None = None, batch: int = 8):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.pop(resume_shards.KILL_ENV, None)
    if kill:
        env[resume_shards.KILL_ENV] = kill
    cmd = [sys.executable, "-m", "pipelines.e2e_tasks", "embed", "--sentences", str(sentences)]
    cmd += ["--langs", *LANGS, "--model", model, "--output", str(out), "--batch-size", str(batch)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)


def _files(out: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(out)): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.name != "stats.json"
    }


@pytest.fixture(scope="module")
def reference(sentences, tiny_model, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ref") / "embed"
    r = _embed(sentences, tiny_model, out)
    assert r.returncode == 0, r.stderr
    return out


@pytest.mark.slow
def test_a_killed_embed_resumes_from_its_finished_shards(
    sentences, tiny_model, reference, tmp_path
):
    out = tmp_path / "embed"
    r = _embed(sentences, tiny_model, out, kill="embed:1")
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert not (out / "de").exists()  # nothing committed: the shard waits in _partial
    assert (out / resume_shards.PARTIAL / "_done" / "de.json").exists()

    r = _embed(sentences, tiny_model, out)
    assert r.returncode == 0, r.stderr
    stats = json.loads((out / "stats.json").read_text())
    assert stats["resumed_shards"] == 1 and stats["shards"] == 3
    assert _files(out) == _files(reference)  # the same stores as an uninterrupted run
    assert not (out / resume_shards.PARTIAL).exists()
    ref = json.loads((reference / "stats.json").read_text())
    assert ref["resumed_shards"] == 0 and stats["counts"] == ref["counts"]  # the stores' sums
    per_lang = [json.loads((reference / lang / "stats.json").read_text()) for lang in LANGS]
    for unit, c in ref["counts"].items():
        assert c["in"] == sum(r["counts"][unit]["in"] for r in per_lang), unit


@pytest.mark.slow
def test_a_half_written_or_damaged_shard_is_never_taken_over(
    sentences, tiny_model, reference, tmp_path
):
    out = tmp_path / "embed"
    assert _embed(sentences, tiny_model, out, kill="embed:2").returncode == -signal.SIGKILL
    partial = out / resume_shards.PARTIAL
    # A shard killed mid-write has files but no record; a finished one damaged since fails
    # its hash.
    (partial / "_done" / "en.json").unlink()
    shard = next(p for p in sorted((partial / "de").rglob("*")) if p.is_file())
    shard.write_bytes(shard.read_bytes()[:-1] + b"\x00")
    r = _embed(sentences, tiny_model, out)
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "stats.json").read_text())["resumed_shards"] == 0
    assert _files(out) == _files(reference)


@pytest.mark.slow
def test_other_settings_start_afresh(sentences, tiny_model, tmp_path):
    out = tmp_path / "embed"
    assert _embed(sentences, tiny_model, out, kill="embed:1").returncode == -signal.SIGKILL
    r = _embed(sentences, tiny_model, out, batch=4)  # another batch size: another fingerprint
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "stats.json").read_text())["resumed_shards"] == 0


def test_shards_outside_a_stage(tmp_path):
    """The ledger without a command: a shard recorded is taken over only with the same
    fingerprint and intact files; bookkeeping never reaches the output."""
    out = tmp_path / "o"
    with pytest.raises(RuntimeError):
        with claim_output(out, resume="k1") as o:
            Path(o.shards.begin("a")).mkdir()
            (Path(o.shards.path("a")) / "x.bin").write_bytes(b"abc")
            o.shards.end("a")
            Path(o.shards.begin("b")).mkdir()  # half-written when it failed
            raise RuntimeError("the job failed")
    assert not (out / "a").exists() and (out / resume_shards.PARTIAL).is_dir()
    with claim_output(out, resume="k1") as o:
        assert o.shards.finished("a") and not o.shards.finished("b")
        Path(o.shards.begin("b")).mkdir()
        (Path(o.shards.path("b")) / "y.bin").write_bytes(b"def")
        o.shards.end("b")
        assert o.shards.resumed == 1
    assert sorted(os.listdir(out)) == ["a", "b"]
    assert (out / "a" / "x.bin").read_bytes() == b"abc"
    with pytest.raises(RuntimeError):
        with claim_output(tmp_path / "p", resume="k1") as o:
            Path(o.shards.begin("a")).mkdir()
            o.shards.end("a")
            raise RuntimeError("stop")
    with claim_output(tmp_path / "p", resume="k2") as o:  # another fingerprint
        assert not o.shards.finished("a")
