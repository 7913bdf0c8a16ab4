"""Object-store throughput: Beam's FileSystems on the loopback S3 server (moto) against local disk.

    .venv/bin/python bench/s3_bench.py [--small 200 --small-kb 64] [--large 4 --large-mb 32]
        [--server moto|s3rver]

Two workloads, each written then read back through ``apache_beam.io.filesystems.FileSystems``
(the path every Beam job and the project's output claim use): many small files (what the corpus
and embedding jobs write: shards, stats, claims) and a few large ones. Three systems in one run,
on the same bytes:

  local    a local temporary folder through FileSystems (the named peer; page cache, no fsync),
  disk     the same folder's device: every file fsync'ed, and evicted from the page cache
           before it is read (what "local disk" costs when the bytes must reach the device),
  stock    s3:// with Beam's stock S3 filesystem (a new boto3 client for every operation),
  cached   s3:// with one boto3 client per process and option set
           (``labse_common.filesystems.install_s3_client_cache``) and Beam's stock uploader
           and downloader,
  parallel the same client cache with ``labse_common.s3_upload`` (one request per small file,
           parallel parts for large ones) and ``labse_common.s3_download`` (one request per
           small file, no HeadObject): what the project's jobs use,
  boto3    the peer outside Beam: boto3's managed transfers (``upload_fileobj`` and
           ``download_fileobj``, s3transfer's multipart and parallel ranged reads) on the same
           server: what a well-kept Python S3 client reaches there.

Prints MB/s and files/s of each and the ratios parallel/local, parallel/disk, parallel/cached, cached/stock
and parallel/boto3.
The server runs on 127.0.0.1 (AWS_EC2_METADATA_DISABLED is set), on the same 2 cores:

  moto     (default) moto's server in one Python process. It holds objects in memory and copies
           the whole object for every request, ranged or not: it, not the client, bounds the
           large transfers.
  s3rver   the Node.js fake S3 server s3rver 3.7.1 (files on disk, ranged reads streamed from
           the file), a server closer to a real store's cost model. Installed for the bench
           only, not by the project: ``npm install --prefix bench/.node s3rver@3.7.1``
           (``--s3rver`` names another executable). It ignores IfMatch, so the downloader's
           replaced-file check is not exercised there.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.scaleout_util import s3_args, s3_client, s3_server, s3rver_server  # noqa: E402

log = logging.getLogger("s3_bench")


def _transfer(root: str, payloads: list[bytes]) -> tuple[float, float]:
    from apache_beam.io.filesystems import FileSystems

    t0 = time.perf_counter()
    for i, data in enumerate(payloads):
        with FileSystems.create(FileSystems.join(root, f"f{i:05d}.bin")) as f:
            f.write(data)
    t_write = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i, data in enumerate(payloads):
        with FileSystems.open(FileSystems.join(root, f"f{i:05d}.bin")) as f:
            got = f.read()
        assert len(got) == len(data)
    return t_write, time.perf_counter() - t0


S3RVER = ROOT / "bench" / ".node" / "node_modules" / ".bin" / "s3rver"
S3RVER_KEY = "S3RVER"  # s3rver accepts only its own access key


def server_options(server: str, endpoint: str) -> list[str]:
    args = s3_args(endpoint)
    if server == "s3rver":
        args = [S3RVER_KEY if v == "testing" else v for v in args]
    return args


def _transfer_disk(root: str, payloads: list[bytes]) -> tuple[float, float]:
    """The local disk itself: each file fsync'ed when written, and dropped from the page cache
    (``POSIX_FADV_DONTNEED``) before it is read back, so the device is measured, not memory."""
    os.makedirs(root, exist_ok=True)
    paths = [os.path.join(root, f"f{i:05d}.bin") for i in range(len(payloads))]
    t0 = time.perf_counter()
    for path, data in zip(paths, payloads):
        with open(path, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    t_write = time.perf_counter() - t0
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    t0 = time.perf_counter()
    for path, data in zip(paths, payloads):
        with open(path, "rb") as f:
            assert len(f.read()) == len(data)
    return t_write, time.perf_counter() - t0


def _transfer_boto3(client, prefix: str, payloads: list[bytes]) -> tuple[float, float]:
    """The peer outside Beam: boto3's managed transfers (s3transfer: multipart above 8 MB,
    parallel ranged reads, 10 threads), the same bytes to the same server."""
    t0 = time.perf_counter()
    for i, data in enumerate(payloads):
        client.upload_fileobj(io.BytesIO(data), "bench", f"{prefix}/f{i:05d}.bin")
    t_write = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i, data in enumerate(payloads):
        buf = io.BytesIO()
        client.download_fileobj("bench", f"{prefix}/f{i:05d}.bin", buf)
        assert buf.getbuffer().nbytes == len(data)
    return t_write, time.perf_counter() - t0


def measure(name: str, root: str, payloads: list[bytes], client=None) -> dict:
    mb = sum(map(len, payloads)) / 2**20
    if client is not None:
        w, r = _transfer_boto3(client, root, payloads)
    elif name == "disk":
        w, r = _transfer_disk(root, payloads)
    else:
        w, r = _transfer(root, payloads)
    row = {
        "system": name,
        "files": len(payloads),
        "mb": mb,
        "write_mb_s": mb / w,
        "read_mb_s": mb / r,
        "write_files_s": len(payloads) / w,
        "read_files_s": len(payloads) / r,
    }
    log.info("%s", row)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--small", type=int, default=200, help="small files (default 200)")
    ap.add_argument("--small-kb", type=int, default=64, help="size of a small file in KB (64)")
    ap.add_argument("--large", type=int, default=4, help="large files (default 4)")
    ap.add_argument("--large-mb", type=int, default=32, help="size of a large file in MB (32)")
    ap.add_argument(
        "--server",
        choices=("moto", "s3rver"),
        default="moto",
        help="the loopback S3 server (see above; default moto)",
    )
    ap.add_argument("--s3rver", default=str(S3RVER), help=f"the s3rver executable ({S3RVER})")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    from labse_common.filesystems import (
        install_s3_client_cache,
        install_s3_transfers,
        uninstall_s3_client_cache,
        uninstall_s3_transfers,
    )

    workloads = {
        "small": [os.urandom(a.small_kb << 10) for _ in range(a.small)],
        "large": [os.urandom(a.large_mb << 20) for _ in range(a.large)],
    }
    rows = []
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        if a.server == "s3rver":
            if not os.access(a.s3rver, os.X_OK):
                ap.error(
                    f"--s3rver {a.s3rver}: not found "
                    "(npm install --prefix bench/.node s3rver@3.7.1)"
                )
            endpoint = stack.enter_context(s3rver_server(a.s3rver, Path(tmp) / "s3rver"))
            client = s3_client(endpoint, S3RVER_KEY)
        else:
            endpoint = stack.enter_context(s3_server(Path(tmp) / "moto"))
            client = s3_client(endpoint)
        client.create_bucket(Bucket="bench")
        print(f"server: {a.server} at {endpoint}")
        FileSystems.set_options(PipelineOptions(server_options(a.server, endpoint)))
        for wl, payloads in workloads.items():
            rows.append({"workload": wl, **measure("local", os.path.join(tmp, wl), payloads)})
            rows.append(
                {"workload": wl, **measure("disk", os.path.join(tmp, f"disk-{wl}"), payloads)}
            )
            uninstall_s3_client_cache()
            rows.append({"workload": wl, **measure("stock", f"s3://bench/stock-{wl}", payloads)})
            install_s3_client_cache()
            uninstall_s3_transfers()
            rows.append({"workload": wl, **measure("cached", f"s3://bench/cached-{wl}", payloads)})
            install_s3_transfers()
            rows.append({"workload": wl, **measure("parallel", f"s3://bench/par-{wl}", payloads)})
            rows.append({"workload": wl, **measure("boto3", f"boto3-{wl}", payloads, client)})
    print(
        f"{'workload':<9}{'system':<9}{'files':>7}{'MB':>8}{'write MB/s':>12}{'read MB/s':>11}"
        f"{'write files/s':>15}{'read files/s':>14}"
    )
    for r in rows:
        print(
            f"{r['workload']:<9}{r['system']:<9}{r['files']:>7}{r['mb']:>8.1f}{r['write_mb_s']:>12.1f}"
            f"{r['read_mb_s']:>11.1f}{r['write_files_s']:>15.1f}{r['read_files_s']:>14.1f}"
        )
    for wl in workloads:
        by = {r["system"]: r for r in rows if r["workload"] == wl}
        for op in ("write", "read"):
            k = f"{op}_mb_s"
            print(
                f"{wl} {op}: parallel/local {by['parallel'][k] / by['local'][k]:.3f}x, "
                f"parallel/disk {by['parallel'][k] / by['disk'][k]:.3f}x, "
                f"parallel/cached {by['parallel'][k] / by['cached'][k]:.2f}x, "
                f"cached/stock {by['cached'][k] / by['stock'][k]:.2f}x, stock/local {by['stock'][k] / by['local'][k]:.3f}x, "
                f"parallel/boto3 {by['parallel'][k] / by['boto3'][k]:.2f}x"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
