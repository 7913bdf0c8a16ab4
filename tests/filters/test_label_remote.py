"""``python -m filters label s3://…/labels.tsv``: the labelling page on a file in object storage.

On the loopback S3 server (moto): every label the page saves is on the object at once (through
the project's boto3 client, and through Beam's filesystems, the path gs:// takes); a change made
by someone else stops the saving with one clear line and is never overwritten; a wrong URL
(missing bucket, missing object, dead endpoint) is one line and exit 2 before any page starts.
"""

from __future__ import annotations

import json
import logging
import re
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from filters.bitext.cli_label import main as label_main
from filters.bitext.label_page import make_server, url_of
from filters.bitext.label_remote import (
    RemoteCopy,
    RemoteSheet,
    _BeamObject,
    _fetch_config,
    _remote_pairs,
    remote_object,
)
from tests.filters.bitext.test_label_page import get, post, write_sample
from tests.support.paths import REPO
from tests.support.scaleout_util import free_port, s3_args, s3_test_server

BUCKET = "labels"


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    with s3_test_server(tmp_path_factory.mktemp("moto-logs"), BUCKET) as server:
        yield server


@pytest.fixture
def endpoint(s3, monkeypatch) -> Iterator[str]:
    """This process's remote options point at the loopback server (``$LABSE_BEAM_OPTIONS``, as
    a person sets them for ``filters label``); the previous options come back afterwards."""
    from apache_beam.io.filesystems import FileSystems

    from labse_common.filesystems import configure

    previous = FileSystems._pipeline_options
    monkeypatch.setenv("LABSE_BEAM_OPTIONS", shlex.join(s3_args(s3[0])))
    configure()
    yield s3[0]
    FileSystems.set_options(previous)


def put_sample(client, key: str, tmp_path: Path) -> str:
    body = write_sample(tmp_path / "sample.tsv").read_bytes()
    client.put_object(Bucket=BUCKET, Key=key, Body=body)
    return f"s3://{BUCKET}/{key}"


def remote_labels(client, key: str) -> list[str]:
    lines = client.get_object(Bucket=BUCKET, Key=key)["Body"].read().decode().splitlines()
    col = lines[0].split("\t").index("label")
    return [line.split("\t")[col] for line in lines[1:]]


@pytest.fixture(params=["boto3", "beam"])
def page(request, s3, endpoint, tmp_path) -> Iterator[tuple[str, str]]:
    """The page on a remote labels.tsv, served in a thread: (page URL, object key). ``beam``:
    through Beam's filesystems (the path of gs:// and every scheme but s3://)."""
    key = f"{request.param}/{tmp_path.name}/labels.tsv"
    url = put_sample(s3[1], key, tmp_path)
    obj = remote_object(url) if request.param == "boto3" else _BeamObject(url)
    work = tmp_path / "work"
    work.mkdir()
    copy = RemoteCopy(obj, work)
    copy.download()
    srv = make_server(RemoteSheet(copy.path, copy=copy), "127.0.0.1", 0)
    thread = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield url_of(srv), key
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(5)


def test_every_label_is_on_the_object_after_its_save(s3, page):
    url, key = page
    assert get(url + "api/state")["file"] == f"s3://{BUCKET}/{key}"  # the page names the URL
    want = [""] * 5
    for index, label in [(0, "GOOD"), (3, "BAD"), (0, "BAD")]:
        status, d = post(url + "api/label", {"index": index, "label": label})
        assert status == 200, d
        want[index] = label
        assert remote_labels(s3[1], key) == want
    status, d = post(url + "api/undo", {})
    assert status == 200 and d["index"] == 0
    assert remote_labels(s3[1], key) == ["GOOD", "", "", "BAD", ""]


def test_a_change_made_elsewhere_stops_the_saving_and_is_kept(s3, page):
    url, key = page
    client = s3[1]
    assert post(url + "api/label", {"index": 1, "label": "GOOD"})[0] == 200
    theirs = client.get_object(Bucket=BUCKET, Key=key)["Body"].read().replace(b"target 4", b"edit")
    client.put_object(Bucket=BUCKET, Key=key, Body=theirs)
    for index in (2, 3):  # refused, and every later save too
        status, d = post(url + "api/label", {"index": index, "label": "BAD"})
        assert status == 409 and "was changed by something else" in d["error"], d
        assert f"s3://{BUCKET}/{key}" in d["error"] and "\n" not in d["error"]
        assert client.get_object(Bucket=BUCKET, Key=key)["Body"].read() == theirs


@pytest.mark.parametrize(
    ("where", "says"),
    [
        ("s3://no-such-bucket/run/labels.tsv", "bucket 'no-such-bucket' does not exist"),
        (f"s3://{BUCKET}/no/such/labels.tsv", "no such object"),
        (f"s3://{BUCKET}", "no object named"),
        ("dead", "does not answer"),
    ],
)
def test_a_wrong_url_is_one_line_and_exit_2(endpoint, monkeypatch, caplog, where, says):
    if where == "dead":
        dead = f"http://127.0.0.1:{free_port()}"
        monkeypatch.setenv("LABSE_BEAM_OPTIONS", shlex.join(s3_args(dead)))
        from labse_common.filesystems import configure

        configure()
        where = f"s3://{BUCKET}/run/labels.tsv"
    caplog.set_level(logging.INFO)
    rc = label_main([where, "--no-browser"])
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert rc == 2, errors
    assert len(errors) == 1 and where in errors[0] and says in errors[0], errors
    assert not any("open http" in r.getMessage() for r in caplog.records)  # no page started


def test_an_unusable_remote_file_names_the_url(s3, endpoint, caplog):
    s3[1].put_object(Bucket=BUCKET, Key="bad/labels.tsv", Body=b"src\ttrg\nHallo\thello\n")
    rc = label_main([f"s3://{BUCKET}/bad/labels.tsv", "--no-browser"])
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert rc == 2 and len(errors) == 1, errors
    assert f"s3://{BUCKET}/bad/labels.tsv" in errors[0] and "no 'label' column" in errors[0]


def test_the_run_folders_config_and_pairs_are_found_beside_the_url(s3, endpoint, tmp_path):
    """A runner on another machine wrote source.json with a path of its own scratch copy: the
    pairs are the same file in the run folder (same size); _config.yaml comes beside the copy."""
    client, run = s3[1], "beside/run"
    client.put_object(Bucket=BUCKET, Key=f"{run}/_config.yaml", Body=b"combine: {}\n")
    client.put_object(Bucket=BUCKET, Key=f"{run}/mine/pairs.parquet", Body=b"x" * 7)
    source = {"pairs": "/elsewhere/.cache/labse/runs/r/mine/pairs.parquet", "bytes": 7}
    client.put_object(Bucket=BUCKET, Key=f"{run}/sample/source.json", Body=json.dumps(source))
    url = f"s3://{BUCKET}/{run}/labels.tsv"
    assert _remote_pairs(url) == f"s3://{BUCKET}/{run}/mine/pairs.parquet"
    _fetch_config(url, tmp_path)
    assert (tmp_path / "_config.yaml").read_bytes() == b"combine: {}\n"
    source["bytes"] = 8  # another file of that name: not taken
    client.put_object(Bucket=BUCKET, Key=f"{run}/sample/source.json", Body=json.dumps(source))
    assert _remote_pairs(url) is None


@pytest.mark.slow
def test_the_command_saves_to_s3_and_exits_2_after_a_change_elsewhere(s3, tmp_path):
    """As a person runs it: labels reach the object; after someone else's change the page
    refuses to save, and Ctrl-C ends the command with that one line and exit status 2."""
    endpoint, client = s3
    key = "cmd/labels.tsv"
    url = put_sample(client, key, tmp_path)
    env_opts = {"LABSE_BEAM_OPTIONS": shlex.join(s3_args(endpoint))}
    import os

    proc = subprocess.Popen(
        [sys.executable, "-m", "filters", "label", url, "--no-browser"],
        cwd=REPO,
        env={**os.environ, **env_opts, "PYTHONPATH": str(REPO)},
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        lines: list[str] = []
        while not any("open http" in line for line in lines):
            line = proc.stderr.readline()
            assert line, "".join(lines) + proc.stderr.read()
            lines.append(line)
        page = re.search(r"open (http://127\.0\.0\.1:\d+/)", lines[-1]).group(1)
        assert post(page + "api/label", {"index": 0, "label": "GOOD"})[0] == 200
        assert remote_labels(client, key) == ["GOOD", "", "", "", ""]
        client.put_object(Bucket=BUCKET, Key=key, Body=b"src\ttrg\tlabel\na\tb\tBAD\n")
        assert post(page + "api/label", {"index": 1, "label": "BAD"})[0] == 409
        proc.send_signal(signal.SIGINT)
        err = proc.communicate(timeout=20)[1]
    finally:
        proc.kill()
    assert proc.returncode == 2, err
    assert (
        err.strip()
        .splitlines()[-1]
        .endswith(
            f"{url} was changed by something else since this page read it; the label was not "
            "saved and no more labels will be: stop python -m filters label and start it again "
            "to label the file as it is now"
        )
    ), err
    assert (
        client.get_object(Bucket=BUCKET, Key=key)["Body"].read() == b"src\ttrg\tlabel\na\tb\tBAD\n"
    )
