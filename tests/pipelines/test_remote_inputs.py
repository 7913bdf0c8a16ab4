"""Inputs on object storage: ``model.init`` / ``--model`` as an ``s3://`` encoder
folder (copied once per machine into $XDG_CACHE_HOME/labse/models, whole or not at all),
``sources.pairs``/``eval``/``text`` as S3 globs and ``combine.labels`` as an S3 object, on a
loopback moto server; every missing one is one line and exit status 2."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.paths import REPO as ROOT
from tests.support.scaleout_util import s3_args, s3_test_server

DIRECT = ["--direct_running_mode", "in_memory", "--direct_num_workers", "1"]
MODEL = "s3://src/models/tiny"
# Nothing may leave the machine: boto must never ask a cloud metadata address for credentials.
os.environ["AWS_EC2_METADATA_DISABLED"] = "true"

PAIRS = [("Guten Morgen.", "Good morning."), ("Danke schön.", "Thank you."), ("Ja.", "Yes.")]
MOSES = [("Guten Abend.", "Bonsoir."), ("Nein.", "Non.")]
TEXT = "Ein Satz.\n\nNoch ein Satz.\n"


def _sources(root: Path) -> Path:
    """Pairs (TSV and Moses), an alignment (Parquet) and text in the layout the globs name."""
    (root / "parallel").mkdir(parents=True)
    (root / "parallel" / "train.de-en.tsv").write_text(
        "".join(f"{s}\t{t}\n" for s, t in PAIRS), encoding="utf-8"
    )
    for i, lang in enumerate(("de", "fr")):
        (root / "parallel" / f"corpus.de-fr.{lang}").write_text(
            "".join(p[i] + "\n" for p in MOSES), encoding="utf-8"
        )
    (root / "gold").mkdir()
    src, trg = zip(*PAIRS)
    pq.write_table(pa.table({"src": src, "trg": trg}), root / "gold" / "dev.deu-eng.parquet")
    (root / "text").mkdir()
    (root / "text" / "mono.de.txt").write_text(TEXT, encoding="utf-8")
    (root / "earlier.tsv").write_text(
        "src\ttrg\tlabel\n"
        + "".join(f"{s}\t{t}\t{('GOOD', 'BAD')[i % 2]}\n" for i, (s, t) in enumerate(PAIRS)),
        encoding="utf-8",
    )
    return root


@pytest.fixture(scope="module")
def s3(tmp_path_factory, tiny_model):
    """The server with the tiny encoder under ``MODEL`` and the sources under s3://src/data/."""
    data = _sources(tmp_path_factory.mktemp("sources"))
    with s3_test_server(tmp_path_factory.mktemp("moto-logs"), "src") as (endpoint, client):
        for root, prefix in ((Path(tiny_model), "models/tiny/"), (data, "data/")):
            for f in sorted(root.rglob("*")):
                if f.is_file():
                    client.upload_file(str(f), "src", prefix + f.relative_to(root).as_posix())
        yield {"endpoint": endpoint, "client": client, "data": data, "model": Path(tiny_model)}


@pytest.fixture
def remote(s3, tmp_path, monkeypatch):
    """This process reads the server through $LABSE_BEAM_OPTIONS, with its own model cache."""
    from labse_common import filesystems, remote_cache

    monkeypatch.setenv(filesystems.ENV, shlex.join(s3_args(s3["endpoint"])))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(remote_cache, "_FETCHED", {})
    filesystems.forget_configuration()
    yield s3
    filesystems.forget_configuration()


def _files(root: Path) -> dict[str, bytes]:
    return {
        f.relative_to(root).as_posix(): f.read_bytes()
        for f in sorted(root.rglob("*"))
        if f.is_file()
    }


def _models(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "cache" / "labse" / "models").iterdir())


@pytest.mark.slow
def test_embed_with_the_model_on_s3_writes_the_local_folders_store(remote, tmp_path):
    import json

    from pipelines.embed import run

    texts = [f"sentence number {i} about topic {i % 7}" for i in range(30)]
    pq.write_table(pa.table({"text": texts}), tmp_path / "in.parquet")
    stores = {}
    for name, model in (("local", str(remote["model"])), ("s3", MODEL)):
        out = tmp_path / name
        argv = ["--input", str(tmp_path / "in.parquet"), "--model", model, "--output", str(out)]
        assert run([*argv, "--num-shards", "2", *DIRECT, *s3_args(remote["endpoint"])]) == 0
        stores[name] = _files(out)
    stats = {k: json.loads(v.pop("stats.json")) for k, v in stores.items()}
    assert stores["s3"] == stores["local"] and len(stores["s3"]) == 5  # 2 x (npy, parquet) + store
    assert stats["s3"]["counts"] == stats["local"]["counts"]
    (copy,) = _models(tmp_path)  # one whole copy, no .part- folder left
    assert copy.startswith("tiny-")
    assert _files(tmp_path / "cache" / "labse" / "models" / copy) == _files(remote["model"])


@pytest.mark.slow
def test_a_killed_or_damaged_copy_of_the_model_is_never_used(remote, tmp_path):
    from labse_common.remote_cache import local_folder

    code = f"from labse_common.remote_cache import local_folder; local_folder({MODEL!r})"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LABSE_KILL_AFTER": "model_cache:2"}
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert p.returncode == -9, p.stderr[-2000:]
    (part,) = _models(tmp_path)  # the killed download left its .part- folder only
    assert part.startswith(".tiny-") and ".part-" in part
    copy = local_folder(MODEL, "model.init")
    assert _files(copy) == _files(remote["model"]) and _models(tmp_path) == [copy.name]
    # A file of the copy cut short (or deleted): copied again, not loaded as it is.
    victim = copy / "model.safetensors"
    victim.write_bytes(victim.read_bytes()[:100])
    from labse_common import remote_cache

    remote_cache._FETCHED.clear()
    assert local_folder(MODEL, "model.init") == copy
    assert _files(copy) == _files(remote["model"]) and _models(tmp_path) == [copy.name]


@pytest.mark.slow
def test_inputs_reads_pairs_eval_and_text_from_s3_as_from_disk(remote, tmp_path):
    import json

    from pipelines.e2e_tasks import inputs

    def globs(root: str) -> tuple[list[str], list[str], list[str]]:
        pairs = [f"{root}/parallel/train.{{src}}-{{trg}}.tsv"]
        pairs.append(f"{root}/parallel/corpus.{{src}}-{{trg}}.{{lang}}")
        return (
            pairs,
            [f"{root}/gold/dev.{{src}}-{{trg}}.parquet"],
            [f"{root}/text/mono.{{lang}}.txt"],
        )

    inputs(*globs(str(remote["data"])), tmp_path / "local", trusted=10)
    report = inputs(*globs("s3://src/data"), tmp_path / "s3", trusted=10)
    local, got = _files(tmp_path / "local"), _files(tmp_path / "s3")
    stats = {k: json.loads(v.pop("stats.json")) for k, v in (("local", local), ("s3", got))}
    assert got == local
    assert stats["s3"]["counts"] == stats["local"]["counts"]
    assert report["training_pairs"] == len(PAIRS) + len(MOSES) and report["eval_pairs"] == 3
    assert b"Noch ein Satz." in got["train_sentences/de/text.parquet"]


@pytest.mark.slow
def test_earlier_labels_are_read_from_s3(remote, tmp_path):
    from pipelines.e2e_tasks import labels

    src, trg = zip(*PAIRS)
    pq.write_table(pa.table({"src": src, "trg": trg}), tmp_path / "pairs.parquet")
    got = {}
    for name, earlier in (
        ("local", remote["data"] / "earlier.tsv"),
        ("s3", "s3://src/data/earlier.tsv"),
    ):
        args = (tmp_path / "pairs.parquet", tmp_path / "pairs.parquet", tmp_path / f"{name}.tsv")
        assert labels(*args, earlier, tmp_path / name, 2, 1) == 0
        got[name] = (tmp_path / name / "labels.tsv").read_text(encoding="utf-8")
    assert got["s3"] == got["local"] and got["s3"].count("GOOD") == 2


def _error_lines(p: subprocess.CompletedProcess) -> list[str]:
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    return [ln for ln in p.stderr.splitlines() if "ERROR" in ln]


@pytest.mark.slow
def test_a_missing_model_url_stops_the_embed_job_in_one_line(remote, forked_commands, tmp_path):
    pq.write_table(pa.table({"text": ["a", "b"]}), tmp_path / "in.parquet")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for model, why in (
        ("s3://src/models/none", "no such folder"),
        ("s3://src/data", "no config.json or modules.json"),
        ("s3://nobucket/m", "bucket 'nobucket' does not exist"),
    ):
        argv = ["--input", str(tmp_path / "in.parquet"), "--model", model, "--output"]
        p = forked_commands.run(
            "pipelines.embed", *argv, str(tmp_path / "out"), *s3_args(remote["endpoint"]), env=env
        )
        assert p.returncode == 2, p.stderr[-3000:]
        (line,) = _error_lines(p)
        assert model in line and why in line, line
        assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_the_runner_plans_with_remote_inputs_and_stops_on_a_missing_one(
    remote, forked_commands, tmp_path
):
    data = tmp_path / "data"
    (data / "crawl").mkdir(parents=True)
    (data / "crawl" / "CC-MAIN-1.warc.wet.gz").write_bytes(b"")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    good = {
        "sources.pairs": '["s3://src/data/parallel/train.{src}-{trg}.tsv"]',
        "sources.eval": '["s3://src/data/gold/dev.{src}-{trg}.parquet"]',
        "sources.text": '["s3://src/data/text/mono.{lang}.txt"]',
        "model.init": MODEL,
        "combine.labels": "s3://src/data/earlier.tsv",
        "train.steps": "0",
        "mining.pairs": "[de-en]",
    }

    def dry_run(**change: str) -> subprocess.CompletedProcess:
        sets = [a for k, v in {**good, **change}.items() for a in ("--set", f"{k}={v}")]
        own = ["--config", str(ROOT / "configs" / "own-data.yaml"), "--data", str(data)]
        argv = [*own, "--output", str(tmp_path / "run"), "--dry-run", *sets]
        return forked_commands.run("pipelines.run", *argv, env=env)

    p = dry_run()
    assert p.returncode == 0 and _error_lines(p) == [], p.stderr[-3000:]
    plan = {row.split()[0]: row for row in p.stdout.splitlines() if row.strip()}
    assert plan["vocab"].split()[1] == "off" and "labse/models/tiny-" in plan["vocab"], plan
    assert plan["train"].split()[1] == "off" and plan["embed"].split()[1] == "run", plan
    for key, value, why in (
        ("model.init", "s3://src/models/none", "no such folder"),
        ("combine.labels", "s3://src/data/none.tsv", "no such object"),
        ("sources.pairs", '["s3://nobucket/{src}-{trg}.tsv"]', "bucket 'nobucket' does not exist"),
    ):
        p = dry_run(**{key: value})
        assert p.returncode == 2, p.stderr[-3000:]
        (line,) = _error_lines(p)
        assert why in line and value.strip('[]"').split("{")[0] in line, line
