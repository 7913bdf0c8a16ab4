"""S3 faults after the start-up check, on loopback: a server that stalls mid-write, dies
mid-upload, dies at the commit or answers HTML with status 200 is one line naming the
operation, the object and the endpoint, with exit status 2 from every command, within the
bounds set by LABSE_S3_CONNECT_TIMEOUT / LABSE_S3_READ_TIMEOUT / LABSE_S3_MAX_ATTEMPTS; never a
hang, a traceback, or Beam's minutes of retries. The loopback moto server sits behind
tests/labse_common/fault_proxy.py, which misbehaves when a test arms it."""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import socket
import threading
import time

import pytest

from labse_common.errors import RemoteError, RemoteFailure, UsageError
from tests.labse_common.fault_proxy import FaultProxy
from tests.support.scaleout_util import free_port, s3_args, s3_test_server

pytestmark = pytest.mark.slow

BUCKET = "faults"
#: Limits small enough for the test: each fault ends in about 2 x 1 s.
LIMITS = {
    "LABSE_S3_CONNECT_TIMEOUT": "1",
    "LABSE_S3_READ_TIMEOUT": "1",
    "LABSE_S3_MAX_ATTEMPTS": "2",
}
#: What a fault may cost at most here (the bounds plus back-off, on a loaded machine).
BOUND_S = 20


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    with s3_test_server(tmp_path_factory.mktemp("moto-logs"), BUCKET) as server:
        yield server


@pytest.fixture
def proxy(s3, monkeypatch):
    """A fault proxy before the moto server; this process's FileSystems and boto3 clients go
    through it with the test's small limits."""
    from apache_beam.io.filesystems import FileSystems

    from labse_common.filesystems import configure

    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for k, v in LIMITS.items():
        monkeypatch.setenv(k, v)
    p = FaultProxy(int(s3[0].rsplit(":", 1)[1]))
    previous = FileSystems._pipeline_options
    monkeypatch.setenv("LABSE_BEAM_OPTIONS", shlex.join(s3_args(p.endpoint)))
    configure()
    yield p
    p.close()
    FileSystems.set_options(previous)


def bounded(fn, limit: float = BOUND_S) -> tuple[BaseException | None, float]:
    """Run ``fn`` in a thread; its exception and its time. A call still running after
    ``limit`` seconds fails the test (a hang), instead of hanging the suite."""
    out: dict = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out["error"] = e

    t0 = time.monotonic()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(limit)
    assert not t.is_alive(), f"still running after {limit} s: the fault hangs the command"
    return out.get("error"), time.monotonic() - t0


def one_line(msg: str, *parts: str) -> str:
    assert "\n" not in msg and all(p in msg for p in parts), msg
    return msg


def no_beam_retries(caplog) -> None:
    retries = [r for r in caplog.records if "Retry with exponential backoff" in r.getMessage()]
    assert not retries, retries[0].getMessage()[:500]


def command(body, url: str, caplog, limit: float = BOUND_S) -> tuple[int, list[str]]:
    """``body`` as a command with ``--output url`` under run_main (the preflight included):
    its exit status and the ERROR lines the command itself logged."""
    from labse_common.cli import run_main

    args = argparse.Namespace(output=url, overwrite=False)
    caplog.clear()
    box: dict = {}

    def call() -> None:
        box["status"] = run_main(body, "faults", args)

    with caplog.at_level(logging.WARNING):
        err, _ = bounded(call, limit)
    assert err is None, f"a traceback (exit 1), not one line: {type(err).__name__}: {err}"
    no_beam_retries(caplog)
    return box["status"], [
        r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR and r.name == "faults"
    ]


def write(path: str, data: bytes) -> None:
    from labse_common import filesystems as fs

    with fs.create(path) as f:
        f.write(data)


def is_put(key_part: str):
    return lambda method, path, headers: (
        method == "PUT" and key_part in path and "x-amz-copy-source" not in headers
    )


# -- the server stops answering mid-write ---------------------------------------------------


def test_a_server_that_stalls_mid_write_is_one_line_not_a_hang(proxy, caplog):
    path = f"s3://{BUCKET}/stall/part-0.bin"
    proxy.arm("stall", is_put("/stall/"))
    with caplog.at_level(logging.WARNING):
        err, took = bounded(lambda: write(path, b"x" * 1000))
    assert isinstance(err, RemoteFailure), repr(err)
    one_line(
        str(err),
        "PutObject",
        path,
        proxy.endpoint,
        "did not answer within 1 s",
        "2 attempts",
        "LABSE_S3_READ_TIMEOUT",
    )
    assert proxy.hits == 2 and took < 10, proxy.seen  # the bounded attempts, nothing more
    no_beam_retries(caplog)


def test_a_stall_under_a_command_is_exit_2(proxy, caplog):
    """The whole path of a command: preflight (answered), the claim, a write that stalls, the
    clean-up; one ERROR line naming the endpoint, exit status 2."""
    from labse_common.output_dir import OutputDir

    url = f"s3://{BUCKET}/stall-cmd"

    def body() -> int:
        with OutputDir(url).open() as out:
            proxy.arm("stall", is_put("/stall-cmd/_tmp-"))
            write(f"{out.tmp}/data.bin", b"y" * 100)
        return 0

    status, errors = command(body, url, caplog)
    assert status == 2 and len(errors) == 1, errors
    one_line(errors[0], "PutObject", proxy.endpoint, "did not answer")


def test_a_stall_under_a_beam_job_on_worker_processes_is_exit_2(proxy, caplog):
    """A Beam job's sink written by worker processes (Beam's own code only, nothing of this
    project unpickled there): the workers use the bounded client too (``--beam_plugin``), and
    the worker's failure, sent back as traceback text, is one line."""
    import apache_beam as beam

    from pipelines.options import pipeline_options, run_pipeline

    url = f"s3://{BUCKET}/beam-stall"
    opts = pipeline_options(
        [
            *s3_args(proxy.endpoint),
            "--direct_running_mode",
            "multi_processing",
            "--direct_num_workers",
            "1",
        ]
    )

    def body() -> int:
        p = beam.Pipeline(options=opts)
        _ = p | beam.Create(["a", "b"]) | beam.io.WriteToText(f"{url}/part")
        proxy.arm("stall", is_put("/beam-stall/"))
        run_pipeline(p)
        return 0

    status, errors = command(body, url, caplog, limit=120)  # Beam's stock client: > 200 s
    assert status == 2 and len(errors) == 1, errors
    one_line(errors[0], "PutObject", f"{url}/", proxy.endpoint, "did not answer within 1 s")


def test_mining_to_a_bucket_that_stalls_mid_upload_exits_2_in_one_line(proxy, tmp_path):
    """The audit's case, a real command in its own process: `mining mine --output s3://...`
    whose upload meets a silent server ended with a kill at 150 s; now exit 2 with one line."""
    import subprocess
    import sys

    import numpy as np

    from labse_common.embedding_store import StoreWriter

    rng = np.random.default_rng(0)
    for name in ("src", "trg"):
        (tmp_path / f"{name}.txt").write_text("".join(f"{name} {i}\n" for i in range(20)))
        w = StoreWriter(str(tmp_path / name), dim=8, dtype="float32")
        w.add(
            rng.normal(size=(20, 8)).astype(np.float32),
            [f"{name}{i}" for i in range(20)],
            text=[f"{name} {i}" for i in range(20)],
        )
        w.close()
    url = f"s3://{BUCKET}/cli-stall"
    proxy.arm("stall", is_put("/cli-stall/_tmp-"))  # the claim passes, the upload stalls
    args = [sys.executable, "-m", "mining", "mine", "--output", url]
    for flag, name in (
        ("--src-text", "src.txt"),
        ("--trg-text", "trg.txt"),
        ("--src-emb", "src"),
        ("--trg-emb", "trg"),
    ):
        args += [flag, str(tmp_path / name)]
    t0 = time.monotonic()
    p = subprocess.run(
        args,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert proxy.hits and time.monotonic() - t0 < 90
    errors = [line for line in p.stderr.splitlines() if proxy.endpoint in line]
    assert len(errors) == 1, p.stderr[-3000:]
    one_line(errors[0], "PutObject", f"{url}/_tmp-", "did not answer within 1 s")


def test_publish_to_a_server_that_stalls_is_bounded_and_names_it(proxy, tmp_path):
    """``--publish`` has its own boto3 client: the same limits, the same endpoint named."""
    import boto3  # noqa: F401 - imported before the clock starts: the bound is the stall's

    from labse_common.publish import publish

    (tmp_path / "final").mkdir()
    (tmp_path / "final" / "bitext.tsv").write_text("a\tb\n")
    url = f"s3://{BUCKET}/published"
    proxy.arm("stall", is_put("/published/bitext"))  # the file, not _PUBLISHING.json first
    err, took = bounded(lambda: publish(tmp_path / "final", url))
    assert isinstance(err, RemoteError) and took < 10, repr(err)
    one_line(str(err), "--publish", url, "bitext.tsv", proxy.endpoint, "did not answer within 1 s")


# -- the server dies mid-upload -------------------------------------------------------------


def test_a_server_dying_mid_upload_is_one_line_without_beam_retries(proxy, caplog):
    """A large file (multipart) whose first part kills the server: the upload fails once the
    client's attempts are spent, the clean-up finds the server gone, and that is one line with
    exit 2, not Beam's retries with a traceback each (minutes)."""
    from labse_common.output_dir import claim_output
    from labse_common.s3_upload import PART_BYTES

    url = f"s3://{BUCKET}/dying"

    def body() -> int:
        with claim_output(url, staged=True) as staged:
            local = staged.path
            proxy.arm("die", lambda m, p, h: m == "PUT" and "partNumber=" in p)
            with open(os.path.join(local, "big.bin"), "wb") as f:
                f.write(os.urandom(PART_BYTES + 1000))
        return 0

    t0 = time.monotonic()
    status, errors = command(body, url, caplog)
    assert status == 2 and len(errors) == 1, errors
    assert proxy.hits == 1 and time.monotonic() - t0 < BOUND_S
    one_line(errors[0], "UploadPart 1 of", f"s3://{BUCKET}/dying/", proxy.endpoint)
    assert "refused the connection" in errors[0] or "closed the connection" in errors[0]


def test_a_part_that_dies_is_a_remote_failure_naming_the_part(proxy):
    from labse_common.s3_upload import PART_BYTES

    path = f"s3://{BUCKET}/parts/big.bin"
    proxy.arm("die", lambda m, p, h: m == "PUT" and "partNumber=" in p)
    err, _ = bounded(lambda: write(path, os.urandom(PART_BYTES + 10)))
    assert isinstance(err, RemoteFailure), repr(err)
    one_line(str(err), "UploadPart 1 of", path, proxy.endpoint)


# -- the server dies at the commit ----------------------------------------------------------


def test_a_server_dying_at_the_commit_is_one_line_exit_2(proxy, caplog):
    from labse_common.output_dir import OutputDir

    url = f"s3://{BUCKET}/commit"

    def body() -> int:
        with OutputDir(url).open() as out:
            write(f"{out.tmp}/a.txt", b"a")
            # The commit moves _tmp-*/a.txt into place: CopyObject, then the delete.
            proxy.arm("die", lambda m, p, h: m == "PUT" and "x-amz-copy-source" in h)
        return 0

    status, errors = command(body, url, caplog)
    assert status == 2 and len(errors) == 1 and proxy.hits == 1, errors
    # The clean-up after it (output_dir's abort) finds the server gone too; the line names the
    # operation that broke, not the clean-up's.
    one_line(errors[0], "CopyObject", f"s3://{BUCKET}/commit/a.txt", proxy.endpoint)


# -- the server answers HTML with status 200 ------------------------------------------------


@pytest.mark.parametrize("what", ["write", "claim"])
def test_html_with_status_200_is_not_taken_for_s3(proxy, caplog, what):
    """botocore takes an HTML 200 for an empty S3 success: a write "succeeded" into a web page
    and a claim read back as a web page. Both are one line: the endpoint is not S3."""
    from labse_common.output_dir import OutputDir

    url = f"s3://{BUCKET}/html-{what}"

    def body() -> int:
        proxy.arm("html", lambda m, p, h: True)  # after the preflight: the server changed
        if what == "write":
            write(f"{url}/a.txt", b"a")
        else:
            with OutputDir(url).open() as out:
                write(f"{out.tmp}/a.txt", b"a")
        return 0

    status, errors = command(body, url, caplog)
    assert status == 2 and len(errors) == 1, errors
    one_line(errors[0], url, proxy.endpoint, "HTTP 200", "not S3")


# -- the endpoint named is the one used -----------------------------------------------------


@pytest.fixture
def silent_server():
    """A tiny socket server: accepts connections and never answers."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                continue

    threading.Thread(target=serve, daemon=True).start()
    yield f"http://127.0.0.1:{srv.getsockname()[1]}"
    stop.set()
    for c in held:
        c.close()
    srv.close()


@pytest.mark.parametrize("silent", [True, False])
def test_the_message_names_aws_endpoint_url(monkeypatch, silent_server, silent):
    """With AWS_ENDPOINT_URL set (and no --s3_endpoint_url), a silent or refusing endpoint is
    named, not "the default AWS endpoint"; within the bounds."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from labse_common.remote import check_s3

    endpoint = silent_server if silent else f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    for k, v in {
        "AWS_ACCESS_KEY_ID": "t",
        "AWS_SECRET_ACCESS_KEY": "t",
        "AWS_DEFAULT_REGION": "us-east-1",
        **LIMITS,
    }.items():
        monkeypatch.setenv(k, v)
    err, took = bounded(lambda: check_s3(f"s3://{BUCKET}/x", PipelineOptions([]), "--output"))
    assert isinstance(err, RemoteError), repr(err)
    one_line(str(err), "--output", endpoint, "does not answer")
    assert "default AWS endpoint" not in str(err) and took < 10


@pytest.mark.parametrize(
    "name,value",
    [
        ("LABSE_S3_READ_TIMEOUT", "soon"),
        ("LABSE_S3_CONNECT_TIMEOUT", "0"),
        ("LABSE_S3_MAX_ATTEMPTS", "2.5"),
        ("LABSE_S3_READ_TIMEOUT", "inf"),
    ],
)
def test_a_bad_limit_is_one_line_naming_the_variable(monkeypatch, name, value):
    from labse_common.s3_limits import s3_limits

    monkeypatch.setenv(name, value)
    with pytest.raises(UsageError) as e:
        s3_limits()
    one_line(str(e.value), name, repr(value))


def test_the_limits_reach_beams_s3_client(proxy):
    """Beam's S3 filesystem builds its own boto3 client with 60 s timeouts; the project's is
    built with the limits and refuses answers that are not S3's."""
    from apache_beam.io.aws.clients.s3 import boto3_client
    from apache_beam.io.filesystems import FileSystems

    client = boto3_client.Client(FileSystems._pipeline_options).client
    cfg = client.meta.config
    assert (cfg.connect_timeout, cfg.read_timeout) == (1.0, 1.0)
    assert cfg.retries["total_max_attempts"] == 2 and client.meta.endpoint_url == proxy.endpoint


def test_dask_workers_get_the_limits(monkeypatch):
    """A Dask cluster's workers do not share this process's environment: the worker plugin
    that gives them the job's S3 options carries the limits too."""
    from apache_beam.io.filesystems import FileSystems

    from labse_common.s3_limits import s3_limits
    from pipelines.options import _FileSystemOptions

    for k, v in LIMITS.items():
        monkeypatch.setenv(k, v)
    plugin = _FileSystemOptions(["--s3_region_name", "us-east-1"])
    for k in LIMITS:
        monkeypatch.delenv(k)  # a worker on another machine
    previous = FileSystems._pipeline_options
    try:
        plugin.setup(None)
        lim = s3_limits()
        assert (lim.connect_s, lim.read_s, lim.attempts) == (1.0, 1.0, 2)
    finally:  # monkeypatch's undo removes the variables setup() set
        FileSystems.set_options(previous)
