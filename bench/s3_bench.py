"""Object-store throughput: Beam's FileSystems on the loopback S3 server (moto) against local disk.

    .venv/bin/python bench/s3_bench.py [--small 200 --small-kb 64] [--large 4 --large-mb 32]

Two workloads, each written then read back through ``apache_beam.io.filesystems.FileSystems``
(the path every Beam job and the project's output claim use): many small files (what the corpus
and embedding jobs write: shards, stats, claims) and a few large ones. Three systems in one run,
on the same bytes:

  local    a local temporary folder (the named peer; page cache, no fsync),
  stock    s3:// with Beam's stock S3 filesystem (a new boto3 client for every operation),
  cached   s3:// with one boto3 client per process and option set
           (``labse_common.filesystems.install_s3_client_cache``) and Beam's stock uploader
           and downloader,
  parallel the same client cache with ``labse_common.s3_upload`` (one request per small file,
           parallel parts for large ones) and ``labse_common.s3_download`` (one request per
           small file, no HeadObject): what the project's jobs use.

Prints MB/s and files/s of each and the ratios parallel/local, parallel/cached, cached/stock. The server is
moto in one Python process on this 2-core machine, so it, not the network, bounds the large
transfers; AWS_EC2_METADATA_DISABLED is set and the endpoint is 127.0.0.1.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.scaleout_util import s3_args, s3_client, s3_server  # noqa: E402

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


def measure(name: str, root: str, payloads: list[bytes]) -> dict:
    mb = sum(map(len, payloads)) / 2**20
    w, r = _transfer(root, payloads)
    row = {"system": name, "files": len(payloads), "mb": mb, "write_mb_s": mb / w, "read_mb_s": mb / r,
           "write_files_s": len(payloads) / w, "read_files_s": len(payloads) / r}  # fmt: skip
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
    with tempfile.TemporaryDirectory() as tmp, s3_server(Path(tmp) / "moto") as endpoint:
        s3_client(endpoint).create_bucket(Bucket="bench")
        FileSystems.set_options(PipelineOptions(s3_args(endpoint)))
        for wl, payloads in workloads.items():
            rows.append({"workload": wl, **measure("local", os.path.join(tmp, wl), payloads)})
            uninstall_s3_client_cache()
            rows.append({"workload": wl, **measure("stock", f"s3://bench/stock-{wl}", payloads)})
            install_s3_client_cache()
            uninstall_s3_transfers()
            rows.append({"workload": wl, **measure("cached", f"s3://bench/cached-{wl}", payloads)})
            install_s3_transfers()
            rows.append({"workload": wl, **measure("parallel", f"s3://bench/par-{wl}", payloads)})
    print(f"{'workload':<9}{'system':<9}{'files':>7}{'MB':>8}{'write MB/s':>12}{'read MB/s':>11}"
          f"{'write files/s':>15}{'read files/s':>14}")  # fmt: skip
    for r in rows:
        print(f"{r['workload']:<9}{r['system']:<9}{r['files']:>7}{r['mb']:>8.1f}{r['write_mb_s']:>12.1f}"
              f"{r['read_mb_s']:>11.1f}{r['write_files_s']:>15.1f}{r['read_files_s']:>14.1f}")  # fmt: skip
    for wl in workloads:
        by = {r["system"]: r for r in rows if r["workload"] == wl}
        for op in ("write", "read"):
            k = f"{op}_mb_s"
            print(f"{wl} {op}: parallel/local {by['parallel'][k] / by['local'][k]:.3f}x, "
                  f"parallel/cached {by['parallel'][k] / by['cached'][k]:.2f}x, "
                  f"cached/stock {by['cached'][k] / by['stock'][k]:.2f}x, stock/local {by['stock'][k] / by['local'][k]:.3f}x")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
