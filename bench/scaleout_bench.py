"""Scale-out bench: the CommonCrawl corpus job on Beam's DaskRunner with 1 and 2 workers against
the DirectRunner on the same input, and on an S3-compatible server against local disk.

    python bench/scaleout_bench.py [--copies 6] [--input 'DIR/*.warc.wet.gz']

Starts its own dask scheduler/workers and moto server on 127.0.0.1 (tests/support/scaleout_util.py).
The input is the shared CommonCrawl sample (else pipelines/sample_data) copied ``--copies``
times under different names, so there are files to spread. Prints documents/s of each run and
the ratios against the named peers; this machine is shared and contended, so only the ratios
(peers measured minutes apart in one process) mean anything.
"""

from __future__ import annotations

import argparse
import glob
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.scaleout_util import (  # noqa: E402
    dask_args,
    dask_cluster,
    s3_args,
    s3_client,
    s3_server,
)


def _run(argv: list[str]) -> float:
    from pipelines import commoncrawl

    t0 = time.perf_counter()
    rc = commoncrawl.main(argv)
    if rc != 0:
        raise SystemExit(f"job failed ({rc}): {argv}")
    return time.perf_counter() - t0


def _docs(stats_path: str) -> int:
    return json.loads(Path(stats_path).read_text())["counts"]["documents"]["in"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--input", default=None, help="WET/WARC glob (default: the shared sample)")
    ap.add_argument("--copies", type=int, default=24, help="copies of each input file")
    ap.add_argument(
        "--partitions",
        type=int,
        default=4,
        help="--dask_npartitions for both Dask runs (the DaskRunner sets DoFns up, "
        "e.g. loads the LID model, once per partition: few large ones)",
    )
    args = ap.parse_args()
    pattern = args.input or str(ROOT.parent / "shared/data/commoncrawl/*.gz")
    files = sorted(glob.glob(pattern)) or [str(ROOT / "pipelines/sample_data/sample.warc.wet.gz")]
    work = Path(tempfile.mkdtemp(prefix="scaleout-bench-"))
    try:
        inp = work / "in"
        inp.mkdir()
        for c in range(args.copies):
            for f in files:
                shutil.copy(f, inp / f"c{c}-{Path(f).name}")
        n_files = len(list(inp.iterdir()))
        common = ["--input", str(inp / "*"), "--config", "demo"]
        rows = []

        def record(name: str, seconds: float, stats: str) -> None:
            docs = _docs(stats)
            rows.append((name, seconds, docs / seconds))
            print(f"{name:<34}{seconds:8.1f} s {docs / seconds:9.1f} docs/s", flush=True)

        direct = ["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"]
        t = _run([*common, "--output", str(work / "direct"), *direct])
        record("DirectRunner multi_processing x2", t, str(work / "direct/stats.json"))
        for n in (1, 2):
            with dask_cluster(n, work / f"dask{n}-logs") as addr:
                t = _run(
                    [
                        *common,
                        "--output",
                        str(work / f"dask{n}"),
                        *dask_args(addr, partitions=args.partitions),
                    ]
                )
            record(f"DaskRunner, {n} worker(s)", t, str(work / f"dask{n}/stats.json"))
        inmem = ["--direct_running_mode", "in_memory", "--direct_num_workers", "1"]
        t = _run([*common, "--output", str(work / "local"), *inmem])
        record("DirectRunner in_memory, local disk", t, str(work / "local/stats.json"))
        with s3_server(work / "moto-logs") as endpoint:
            client = s3_client(endpoint)
            client.create_bucket(Bucket="bench")
            for f in sorted(inp.iterdir()):
                client.upload_file(str(f), "bench", f"in/{f.name}")
            t = _run(
                [
                    "--input",
                    "s3://bench/in/*",
                    "--config",
                    "demo",
                    "--output",
                    "s3://bench/out",
                    *inmem,
                    *s3_args(endpoint),
                ]
            )
            body = client.get_object(Bucket="bench", Key="out/stats.json")["Body"].read()
            (work / "s3-stats.json").write_bytes(body)
        record("DirectRunner in_memory, S3 (moto)", t, str(work / "s3-stats.json"))
        rate = {name: r for name, _, r in rows}
        d1, d2 = rate["DaskRunner, 1 worker(s)"], rate["DaskRunner, 2 worker(s)"]
        print(
            f"\ninput: {n_files} files, {_docs(str(work / 'direct/stats.json'))} documents; "
            f"{args.partitions} Dask partitions"
        )
        print(f"Dask 2 workers / 1 worker (scaling):       {d2 / d1:.2f}x")
        print(f"Dask 2 workers / DirectRunner x2:          {d2 / rate[rows[0][0]]:.2f}x")
        print(f"Dask 1 worker / DirectRunner x2:           {d1 / rate[rows[0][0]]:.2f}x")
        s3, local = (
            rate["DirectRunner in_memory, S3 (moto)"],
            rate["DirectRunner in_memory, local disk"],
        )
        print(f"S3 (moto) / local disk, same job:          {s3 / local:.2f}x throughput")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
