"""The runner's run folder on object storage (pipelines/run/run_folder.py) on a loopback S3
server: the claim (one runner per folder; a dead runner's claim of this host taken over), the
stage folders' upload and fetch (exactly the remote files, nothing private), the run's state
(the remote copy wins; a person's labels are never deleted), and every remote failure of
``--output s3://…`` as one line and exit 2 before any stage runs."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from labse_common import filesystems
from labse_common.output_dir import OutputBusy

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """(endpoint, client) of a loopback S3 server with bucket ``runs``; this process's
    FileSystems pointed at it for the module."""
    from tests.support.scaleout_util import s3_args, s3_test_server

    with s3_test_server(tmp_path_factory.mktemp("moto"), "runs") as (endpoint, client):
        old = os.environ.get(filesystems.ENV)
        os.environ[filesystems.ENV] = shlex.join(s3_args(endpoint))
        filesystems.forget_configuration()
        try:
            yield endpoint, client
        finally:
            if old is None:
                os.environ.pop(filesystems.ENV, None)
            else:
                os.environ[filesystems.ENV] = old
            filesystems.forget_configuration()


def _keys(client, prefix: str) -> dict[str, bytes]:
    listed = client.list_objects_v2(Bucket="runs", Prefix=prefix).get("Contents", [])
    return {
        o["Key"][len(prefix) :]: client.get_object(Bucket="runs", Key=o["Key"])["Body"].read()
        for o in listed
    }


def test_a_stage_folder_goes_up_and_comes_back_exactly(s3, tmp_path):
    from pipelines.run.run_folder import RunFolder

    _, client = s3
    up = RunFolder("s3://runs/a", tmp_path / "one")
    d = up.scratch / "mine" / "de-en"
    d.mkdir(parents=True)
    (d / "mined.parquet").write_bytes(b"pairs")
    (up.scratch / "mine" / "stats.json").write_text("{}")
    (up.scratch / "mine" / "_CLAIM.json").write_text("{}")  # a job's claim stays private
    client.put_object(Bucket="runs", Key="a/mine/stale.txt", Body=b"an earlier attempt's")
    assert up.push("mine") == 2
    assert _keys(client, "a/mine/") == {"de-en/mined.parquet": b"pairs", "stats.json": b"{}"}
    down = RunFolder("s3://runs/a", tmp_path / "two")
    extra = down.scratch / "mine" / "left-over.txt"
    extra.parent.mkdir(parents=True)
    extra.write_text("not in the run folder")
    (down.scratch / "mine" / "stats.json").write_text("{..}")  # differs: downloaded again
    assert down.fetch("mine") == 2
    assert not extra.exists()
    assert (down.scratch / "mine" / "de-en" / "mined.parquet").read_bytes() == b"pairs"
    assert (down.scratch / "mine" / "stats.json").read_text() == "{}"
    assert down.fetch("mine") == 0  # nothing changed: nothing fetched
    # The same times on both machines, and the run folder spelled $OUT: a job's shard
    # fingerprint of its inputs is the same in either scratch copy (resume anywhere).
    from labse_common.resume_shards import RUN_FOLDER_ENV, fingerprint

    (up.scratch / "mine" / "_CLAIM.json").unlink()
    prints = []
    for copy in (up, down):
        os.environ[RUN_FOLDER_ENV] = str(copy.scratch)
        prints.append(fingerprint([copy.scratch / "mine"], {"lexicon": str(copy.scratch / "x")}))
    os.environ.pop(RUN_FOLDER_ENV)
    assert prints[0] == prints[1]
    down.clear("mine")
    assert _keys(client, "a/mine/") == {}


def test_the_remote_state_wins_and_a_persons_labels_are_kept(s3, tmp_path):
    from pipelines.run.run_folder import RunFolder

    _, client = s3
    client.put_object(Bucket="runs", Key="b/_state/mine.manifest.json", Body=b'{"key": "r"}')
    client.put_object(Bucket="runs", Key="b/_run.json", Body=b'{"ran": []}')
    f = RunFolder("s3://runs/b", tmp_path / "s")
    (f.scratch / "_state").mkdir(parents=True)
    (f.scratch / "_state" / "embed.manifest.json").write_text("{}")  # not on the remote: gone
    (f.scratch / "labels.tsv").write_text("a person's labels\n")
    f.pull_state()
    assert sorted(p.name for p in (f.scratch / "_state").iterdir()) == ["mine.manifest.json"]
    assert (f.scratch / "_run.json").read_text() == '{"ran": []}'
    assert (f.scratch / "labels.tsv").read_text() == "a person's labels\n"
    (f.scratch / "_logs").mkdir()
    (f.scratch / "_logs" / "mine.log").write_text("log")
    f.push_state()
    keys = _keys(client, "b/")
    assert keys["labels.tsv"] == b"a person's labels\n" and keys["_logs/mine.log"] == b"log"


def test_one_runner_per_remote_folder_and_a_dead_ones_claim_is_taken_over(s3, tmp_path):
    from pipelines.run.run_folder import RunFolder

    _, client = s3
    first = RunFolder("s3://runs/c", tmp_path / "1")
    first.claim()
    with pytest.raises(OutputBusy, match="being written by another runner"):
        RunFolder("s3://runs/c", tmp_path / "2").claim()  # this process is alive
    first.release()
    assert "_CLAIM.json" not in _keys(client, "c/")
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    ).stdout.strip()
    claim = {"job_id": "x", "host": socket.gethostname(), "pid": int(dead), "kind": "run folder"}
    client.put_object(Bucket="runs", Key="c/_CLAIM.json", Body=json.dumps(claim).encode())
    taker = RunFolder("s3://runs/c", tmp_path / "3")
    taker.claim()  # its process is gone: taken over
    taker.release()
    claim["host"] = "another-host"
    client.put_object(Bucket="runs", Key="c/_CLAIM.json", Body=json.dumps(claim).encode())
    with pytest.raises(OutputBusy, match="delete s3://runs/c/_CLAIM.json"):
        RunFolder("s3://runs/c", tmp_path / "4").claim()


def _runner(out: str, scratch: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipelines.run", "--output", out, "--scratch", str(scratch)],
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_every_remote_failure_is_one_line_before_any_stage(s3, tmp_path):
    """A dead endpoint, a missing bucket, no credentials: exit 2, one line naming the URL,
    and no stage ran (the scratch copy was not even made)."""
    from tests.support.scaleout_util import free_port, s3_args

    endpoint, _ = s3
    base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    base["AWS_EC2_METADATA_DISABLED"] = "true"
    dead = f"http://127.0.0.1:{free_port()}"
    no_keys = [a for a in s3_args(endpoint) if a not in ("testing",)]
    no_keys = [a for a in no_keys if not a.startswith(("--s3_access", "--s3_secret"))]
    cases = {
        "does not answer": ("s3://runs/d", shlex.join(s3_args(dead))),
        "does not exist": ("s3://no-such-bucket/d", shlex.join(s3_args(endpoint))),
        "no S3 credentials": ("s3://runs/d", shlex.join(no_keys)),
    }
    for words, (url, options) in cases.items():
        scratch = tmp_path / words.replace(" ", "-")
        p = _runner(url, scratch, {**base, filesystems.ENV: options})
        errors = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(errors) == 1, (words, p.stderr[-2000:])
        assert words in errors[0] and url.split("/d")[0] in errors[0], errors[0]
        assert not scratch.exists()
    p = _runner(str(tmp_path / "local"), tmp_path / "scratch", base)
    assert p.returncode == 2 and "--scratch" in p.stderr, p.stderr[-2000:]
    options = {**base, filesystems.ENV: shlex.join(s3_args(endpoint))}
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.run",
            "--output",
            "s3://runs/e",
            "--publish",
            "s3://runs/e/published",
            "--dry-run",
        ],
        cwd=ROOT,
        env={**options, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )  # a run publishing into its own run folder: refused before anything runs
    assert p.returncode == 2 and "inside or above the run folder" in p.stderr, p.stderr[-2000:]


def test_a_run_folder_file_is_fingerprinted_by_content_in_any_scratch_copy(tmp_path):
    """labels.tsv lies in the run folder: two scratch copies (other paths, other times) give
    the stages that read it the same key; a data file outside the run folder keeps its path."""
    from types import SimpleNamespace

    from pipelines.run.plan import _file_part

    parts = []
    for n, when in ((1, 1_000_000), (2, 2_000_000)):
        out = tmp_path / f"scratch{n}"
        out.mkdir()
        (out / "labels.tsv").write_text("src\ttrg\tlabel\na\tb\tGOOD\n")
        os.utime(out / "labels.tsv", (when, when))
        parts.append(_file_part(str(out / "labels.tsv"), SimpleNamespace(out=out)))
    assert parts[0] == parts[1]
    outside = _file_part(
        str(tmp_path / "scratch1" / "labels.tsv"), SimpleNamespace(out=tmp_path / "x")
    )
    assert outside["path"].endswith("labels.tsv") and "mtime" in outside
