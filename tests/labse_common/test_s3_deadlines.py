"""S3 bounds are bounds, on loopback: a write that meets a stalled server and
the clean-up after it end within one request's bound plus a short grace, not one bound per
clean-up call; a failed multipart upload sends no more parts and leaves no thread retrying after
its error; the preflight refuses an endpoint that answers HTML with status 200 before any work.
The moto server sits behind tests/labse_common/fault_proxy.py, armed by each test."""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import subprocess
import sys
import threading
import time

import pytest

from labse_common.errors import RemoteError, RemoteFailure
from tests.labse_common.fault_proxy import FaultProxy
from tests.support.paths import REPO
from tests.support.scaleout_util import s3_args, s3_test_server

pytestmark = pytest.mark.slow

BUCKET = "deadlines"
READ_S, ATTEMPTS = 2, 2
LIMITS = {
    "LABSE_S3_CONNECT_TIMEOUT": "1",
    "LABSE_S3_READ_TIMEOUT": str(READ_S),
    "LABSE_S3_MAX_ATTEMPTS": str(ATTEMPTS),
}
#: What a stalled request costs: its attempts, each waiting the read timeout.
BOUND_S = READ_S * ATTEMPTS
#: Room for botocore's back-off between attempts, the clean-up's grace and a loaded machine.
SLACK_S = 5


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    with s3_test_server(tmp_path_factory.mktemp("moto-logs"), BUCKET) as server:
        yield server


@pytest.fixture
def proxy(s3, monkeypatch):
    from apache_beam.io.filesystems import FileSystems

    from labse_common.filesystems import configure, forget_configuration

    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for k, v in LIMITS.items():
        monkeypatch.setenv(k, v)
    p = FaultProxy(int(s3[0].rsplit(":", 1)[1]))
    previous = FileSystems._pipeline_options
    monkeypatch.setenv("LABSE_BEAM_OPTIONS", shlex.join(s3_args(p.endpoint)))
    forget_configuration()
    configure()
    yield p
    p.close()
    forget_configuration()
    FileSystems.set_options(previous)


def write(path: str, data: bytes) -> None:
    from labse_common import filesystems as fs

    with fs.create(path) as f:
        f.write(data)


def failure(fn) -> BaseException | None:
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - handed to the test
        return e
    return None


def upload_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("s3-upload") and t.is_alive()]


def test_a_stalled_write_and_its_clean_up_share_one_deadline(proxy):
    """The audit: after a write stall every clean-up call paid the whole timeout x attempts
    again (59 s for a 10 s bound). Now the write pays its bound, the clean-up a short grace."""
    from labse_common import filesystems as fs

    path = f"s3://{BUCKET}/stall/part-0.bin"
    proxy.arm("stall", lambda m, p, h: True)  # the whole server stops answering
    t0 = time.monotonic()
    err = failure(lambda: write(path, b"x" * 1000))
    wrote = time.monotonic() - t0
    assert isinstance(err, RemoteFailure) and "did not answer" in str(err), repr(err)
    # The clean-up a command does after a failed write: delete it, look for leftovers, list.
    cleanup = [
        failure(lambda: fs.delete([path])),
        failure(lambda: fs.exists(f"s3://{BUCKET}/stall/_CLAIM.json")),
        failure(lambda: fs.match(f"s3://{BUCKET}/stall/*")),
        failure(lambda: fs.delete([f"s3://{BUCKET}/stall/_CLAIM.json"])),
    ]
    took = time.monotonic() - t0
    assert all(isinstance(e, RemoteFailure) for e in cleanup), cleanup
    assert wrote < BOUND_S + SLACK_S and took < BOUND_S + SLACK_S, (wrote, took, proxy.seen)
    assert "was not tried" in str(cleanup[-1]) and "\n" not in str(cleanup[-1]), cleanup[-1]


def test_a_failed_multipart_upload_stops_its_parts_before_the_error(proxy):
    """A large file whose parts stall: the writer learns of the first failed part at its next
    part, no part is sent after that, and no upload thread is alive (or retries) once the
    error is raised."""
    from labse_common.s3_upload import MAX_IN_FLIGHT, PART_BYTES

    path = f"s3://{BUCKET}/parts/big.bin"
    proxy.arm("stall", lambda m, p, h: m == "PUT" and "partNumber=" in p)
    block = os.urandom(1 << 20)
    t0 = time.monotonic()

    def big_write() -> None:
        from labse_common import filesystems as fs

        with fs.create(path) as f:
            for _ in range(9 * PART_BYTES // len(block)):
                f.write(block)

    err = failure(big_write)
    took = time.monotonic() - t0
    assert isinstance(err, RemoteFailure) and "UploadPart" in str(err), repr(err)
    assert not upload_threads(), upload_threads()
    hits = proxy.hits
    assert hits <= MAX_IN_FLIGHT * ATTEMPTS, (hits, proxy.seen)
    assert took < BOUND_S + SLACK_S, took
    time.sleep(1.5)  # nothing goes on retrying after the error
    assert proxy.hits == hits and not upload_threads()


@pytest.mark.parametrize("flag", [None, "--output"])
def test_the_preflight_refuses_an_endpoint_that_answers_html(proxy, flag):
    """A web server answering every request with 200 and a page passed the preflight's
    HeadBucket (no body to judge); the run then failed at its end."""
    from labse_common.remote import check_s3

    proxy.arm("html", lambda m, p, h: True)
    url = f"s3://{BUCKET}/html"
    with pytest.raises(RemoteError) as e:
        check_s3(url, None, flag)
    msg = str(e.value)
    assert "\n" not in msg and url in msg and proxy.endpoint in msg and "not S3" in msg, msg
    assert msg.startswith(f"{flag} {url}" if flag else url), msg


def test_a_command_stops_before_its_work_on_an_html_endpoint(proxy, caplog):
    from labse_common.cli import run_main

    proxy.arm("html", lambda m, p, h: True)
    url = f"s3://{BUCKET}/html-cmd"
    ran: list[bool] = []

    def body() -> int:
        ran.append(True)
        return 0

    with caplog.at_level(logging.ERROR):
        status = run_main(body, "deadlines", argparse.Namespace(output=url, overwrite=False))
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert status == 2 and not ran and len(errors) == 1, errors
    assert proxy.endpoint in errors[0] and "not S3" in errors[0], errors


def test_a_beam_job_refuses_an_html_endpoint_in_one_line(proxy, tmp_path):
    """The corpus job with ``--output s3://...`` on an endpoint that answers web pages: exit 2
    with one line naming the endpoint, at the preflight's one request (before the claim)."""
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t"}
    env.pop("LABSE_BEAM_OPTIONS", None)
    proxy.arm("html", lambda m, p, h: True)
    args = [
        sys.executable,
        "-m",
        "pipelines.commoncrawl",
        "--input",
        str(REPO / "pipelines" / "sample_data" / "sample.warc.wet.gz"),
        "--output",
        f"s3://{BUCKET}/html-job",
        *s3_args(proxy.endpoint),
    ]
    p = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120, cwd=REPO)
    lines = [line for line in p.stderr.splitlines() if proxy.endpoint in line]
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert len(lines) == 1 and "not S3" in lines[0], p.stderr[-3000:]
    assert len(proxy.seen) == 1, proxy.seen
