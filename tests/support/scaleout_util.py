"""Real components on loopback for the scale-out tests and bench: a dask.distributed scheduler
with worker processes, an S3-compatible server (moto), free ports, process-group clean-up.

Each helper is a context manager that starts its processes in their own session, waits (bounded)
until they answer, and kills the whole process group when the block ends, whatever happened.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from tests.support.paths import REPO as ROOT

BIN = Path(sys.executable).parent
DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"


def env(**extra: str) -> dict[str, str]:
    """The environment of every process started here: the repository first on the path."""
    e = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **extra}
    return e


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, procs: list[subprocess.Popen], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"{what} exited with {p.returncode} before it answered")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.2)
    raise TimeoutError(f"{what} did not answer on 127.0.0.1:{port} within {timeout:.0f}s")


def kill_group(p: subprocess.Popen) -> None:
    if p.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)


def _popen(cmd: list[str], log: Path, **extra_env: str) -> subprocess.Popen:
    f = open(log, "wb")  # noqa: SIM115 - closed with the process
    p = subprocess.Popen(
        cmd, stdout=f, stderr=subprocess.STDOUT, env=env(**extra_env), start_new_session=True
    )
    f.close()
    return p


def dask_available() -> str | None:
    """None, or why the DaskRunner cannot run here."""
    # Without distributed, Beam's dask module raises AttributeError, not ImportError.
    try:
        import apache_beam.runners.dask.dask_runner  # noqa: F401
        import distributed  # noqa: F401
    except (ImportError, AttributeError) as e:
        return f"dask[distributed] is not installed (pip install '.[dev]'): {e}"
    return None


@contextlib.contextmanager
def dask_cluster(workers: int, logdir: Path, timeout: float = 90) -> Iterator[str]:
    """A scheduler and ``workers`` single-threaded worker processes; yields the address.

    Every process gets the repository on PYTHONPATH: the scheduler deserialises the task graph
    (which names the job's modules) and the workers run it.
    """
    logdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    addr = f"tcp://127.0.0.1:{port}"
    dask = str(BIN / "dask") if (BIN / "dask").exists() else shutil.which("dask") or "dask"
    procs = [
        _popen(
            [
                dask,
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--no-dashboard",
                "--no-show",
            ],
            logdir / "scheduler.log",
        )
    ]
    try:
        _wait_port(port, procs, timeout, "dask scheduler")
        for i in range(workers):
            procs.append(
                _popen(
                    [
                        dask,
                        "worker",
                        addr,
                        "--nthreads",
                        "1",
                        "--nworkers",
                        "1",
                        "--no-dashboard",
                        "--host",
                        "127.0.0.1",
                        "--name",
                        f"w{i}",
                    ],
                    logdir / f"worker{i}.log",
                )
            )
        _wait_workers(addr, workers, procs, timeout)
        yield addr
    finally:
        for p in reversed(procs):
            kill_group(p)


def _wait_workers(addr: str, n: int, procs: list[subprocess.Popen], timeout: float) -> None:
    from distributed import Client

    with Client(addr, timeout=timeout) as c:
        deadline = time.monotonic() + timeout
        while len(c.scheduler_info()["workers"]) < n:
            for p in procs:
                if p.poll() is not None:
                    raise RuntimeError(f"a dask process exited with {p.returncode}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(c.scheduler_info()['workers'])}/{n} dask workers")
            time.sleep(0.2)


def dask_args(addr: str, partitions: int = 4) -> list[str]:
    return [
        "--runner",
        DASK_RUNNER,
        "--dask_client_address",
        addr,
        "--dask_npartitions",
        str(partitions),
    ]


def s3_available() -> str | None:
    try:
        import boto3  # noqa: F401
        import moto.server  # noqa: F401
        from apache_beam.io.aws import s3filesystem  # noqa: F401
    except ImportError as e:
        return f"moto[server]/boto3 are not installed (pip install '.[dev]'): {e}"
    return None


S3_KEYS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@contextlib.contextmanager
def s3_server(logdir: Path, timeout: float = 60) -> Iterator[str]:
    """A moto S3 server on 127.0.0.1 (its own process); yields the endpoint URL."""
    logdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    p = _popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        logdir / "moto.log",
        **S3_KEYS,
    )
    try:
        _wait_port(port, [p], timeout, "moto S3 server")
        yield f"http://127.0.0.1:{port}"
    finally:
        kill_group(p)


@contextlib.contextmanager
def s3rver_server(exe: str, data: Path, timeout: float = 60) -> Iterator[str]:
    """The Node.js s3rver on 127.0.0.1 (objects as files under ``data``; bench/s3_bench.py's
    second server, accepting only the access key ``S3RVER``); yields the endpoint URL."""
    data.mkdir(parents=True, exist_ok=True)
    port = free_port()
    p = _popen(
        [exe, "-d", str(data), "-a", "127.0.0.1", "-p", str(port), "--silent"],
        data.parent / "s3rver.log",
    )
    try:
        _wait_port(port, [p], timeout, "s3rver")
        yield f"http://127.0.0.1:{port}"
    finally:
        kill_group(p)


def s3_args(endpoint: str) -> list[str]:
    """Beam's S3 options for the loopback server (pipeline options reach every worker)."""
    return [
        "--s3_endpoint_url",
        endpoint,
        "--s3_access_key_id",
        "testing",
        "--s3_secret_access_key",
        "testing",
        "--s3_region_name",
        "us-east-1",
        "--s3_verify",
        "false",
    ]


@contextlib.contextmanager
def s3_test_server(logdir: Path, *buckets: str) -> Iterator[tuple[str, object]]:
    """A test module's S3 server with its buckets: (endpoint, boto3 client); skips the test
    when moto/boto3 are missing. Nothing may leave the machine: boto must never ask a cloud
    metadata address for credentials, so that is switched off first."""
    import pytest

    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    why = s3_available()
    if why:
        pytest.skip(why)
    with s3_server(logdir) as endpoint:
        client = s3_client(endpoint)
        for bucket in buckets:
            client.create_bucket(Bucket=bucket)
        yield endpoint, client


def s3_client(endpoint: str, key: str = "testing"):
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=key,
        aws_secret_access_key=key,
        region_name="us-east-1",
    )


class BeamS3Wrapper:
    """Beam's boto3 wrapper as its uploader and downloader see it: the boto3 client as
    ``.client`` (what ``labse_common.s3_upload``/``s3_download`` are handed)."""

    def __init__(self, client) -> None:
        self.client = client


def count_s3_calls(client):
    """A Counter of the S3 operations ``client`` sends from now on, by name (``GetObject``...)."""
    from collections import Counter

    seen: Counter = Counter()
    client.meta.events.register("before-call.s3", lambda model, **_: seen.update([model.name]))
    return seen
