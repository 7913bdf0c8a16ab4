"""The Beam jobs read from and write to an S3-compatible server (moto, started here on
127.0.0.1) through Beam's S3 filesystem options, with the same results as on local disk."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.pipelines.test_dask_runner import tree
from tests.support.paths import REPO as ROOT
from tests.support.scaleout_util import dask_args, s3_args, s3_test_server

SAMPLE = ROOT / "pipelines" / "sample_data" / "sample.warc.wet.gz"
DIRECT = ["--direct_running_mode", "in_memory", "--direct_num_workers", "1"]
# Beam's DaskRunner runs each transform once per partition (the DoFns' setup included): two
# partitions, one per worker, prove the same as four at about two thirds of the time.
PARTITIONS = 2

pytestmark = pytest.mark.slow
# Nothing may leave the machine: boto must never ask a cloud metadata address for credentials.
os.environ["AWS_EC2_METADATA_DISABLED"] = "true"


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    with s3_test_server(tmp_path_factory.mktemp("moto-logs"), "corpus") as (endpoint, client):
        client.upload_file(str(SAMPLE), "corpus", "in/sample.warc.wet.gz")
        yield endpoint, client


@pytest.fixture(scope="module")
def local_cc(tmp_path_factory) -> Path:
    from pipelines import commoncrawl

    out = tmp_path_factory.mktemp("local") / "cc"
    assert commoncrawl.main(["--input", str(SAMPLE), "--output", str(out), *DIRECT]) == 0
    return out


def download(client, prefix: str) -> dict[str, bytes]:
    keys = client.list_objects_v2(Bucket="corpus", Prefix=prefix).get("Contents", [])
    return {
        k["Key"][len(prefix) :]: client.get_object(Bucket="corpus", Key=k["Key"])["Body"].read()
        for k in keys
    }


def assert_same_as_local(files: dict[str, bytes], local: Path) -> None:
    assert "_CLAIM.json" not in files and not [k for k in files if k.startswith("_tmp-")]
    stats = json.loads(files["stats.json"])
    assert stats["counts"] == json.loads((local / "stats.json").read_text())["counts"]
    remote = {
        k: pq.read_table(io.BytesIO(v)).to_pylist()
        for k, v in files.items()
        if k.endswith(".parquet")
    }
    assert remote and remote == tree(local)


def test_commoncrawl_reads_and_writes_s3(s3, local_cc):
    from pipelines import commoncrawl

    endpoint, client = s3
    argv = [
        "--input",
        "s3://corpus/in/*.warc.wet.gz",
        "--output",
        "s3://corpus/out/cc",
        *DIRECT,
        *s3_args(endpoint),
    ]
    assert commoncrawl.main(argv) == 0
    assert_same_as_local(download(client, "out/cc/"), local_cc)
    # The output is exclusive on the object store too: not empty -> exit 2, files untouched.
    assert commoncrawl.main(argv) == 2
    client.put_object(Bucket="corpus", Key="out/cc/de/part-99999-00000.parquet", Body=b"old")
    assert commoncrawl.main([*argv, "--overwrite"]) == 0
    assert_same_as_local(download(client, "out/cc/"), local_cc)  # the stale shard is gone


def test_commoncrawl_on_dask_with_s3(s3, local_cc, cluster):
    """Dask workers get the job's S3 options (a worker plugin) and write to the bucket. The
    session's loopback cluster (tests/conftest.py): its workers were started without them."""
    from pipelines import commoncrawl

    endpoint, client = s3
    assert (
        commoncrawl.main(
            [
                "--input",
                "s3://corpus/in/*.warc.wet.gz",
                "--output",
                "s3://corpus/out/dask",
                *dask_args(cluster, PARTITIONS),
                *s3_args(endpoint),
            ]
        )
        == 0
    )
    assert_same_as_local(download(client, "out/dask/"), local_cc)


def test_embedding_store_and_beam_mining_on_s3(s3, tmp_path):
    """A store written to the bucket reads back identically; the Beam mining job reads the
    stores from the bucket and mines exactly what it mines from local copies."""
    from labse_common.embedding_store import StoreWriter, load_vectors
    from labse_common.filesystems import configure
    from pipelines.mine import run as beam_mine

    endpoint, _ = s3
    configure(s3_args(endpoint))
    rng = np.random.default_rng(3)
    centres = rng.normal(size=(40, 16))
    sides = {
        "src": centres + 0.1 * rng.normal(size=(40, 16)),
        "trg": centres[rng.permutation(40)] + 0.1 * rng.normal(size=(40, 16)),
    }
    for name, vecs in sides.items():
        for root in ("s3://corpus/emb", str(tmp_path)):
            w = StoreWriter(f"{root}/{name}", dim=16, dtype="float32", rows_per_shard=25)
            w.add(
                vecs.astype(np.float32),
                [f"{name}{i}" for i in range(40)],
                text=[f"{name} {i}" for i in range(40)],
            )
            w.close()
        remote = load_vectors(f"s3://corpus/emb/{name}")
        assert [len(b) for b in remote] == [25, 15]
        np.testing.assert_array_equal(np.concatenate(remote), vecs.astype(np.float32))
    # Beam's S3 filesystem builds a boto3 client per file operation (~0.5 s here): few shards.
    opts = ["--shard-rows", "25", *DIRECT, *s3_args(endpoint)]
    assert (
        beam_mine(
            [
                "--src-emb",
                "s3://corpus/emb/src",
                "--trg-emb",
                "s3://corpus/emb/trg",
                "--output",
                str(tmp_path / "m_s3"),
                *opts,
            ]
        )
        == 0
    )
    assert (
        beam_mine(
            [
                "--src-emb",
                str(tmp_path / "src"),
                "--trg-emb",
                str(tmp_path / "trg"),
                "--output",
                str(tmp_path / "m_local"),
                *opts,
            ]
        )
        == 0
    )
    a = pq.read_table(tmp_path / "m_s3" / "mined.parquet")
    b = pq.read_table(tmp_path / "m_local" / "mined.parquet")
    assert a.num_rows >= 30 and a.equals(b)
    assert sorted(os.listdir(tmp_path / "m_s3")) == sorted(os.listdir(tmp_path / "m_local"))


def test_mining_output_round_trips_through_s3(s3, tmp_path, monkeypatch):
    """`mining mine` writes to a bucket: claimed there, staged locally, uploaded and committed;
    the files equal those of the same run into a local folder. The command's main() in this
    process (its own process is tests/labse_common/test_remote_faults.py's case)."""
    import shlex

    from apache_beam.io.filesystems import FileSystems

    from labse_common.embedding_store import StoreWriter
    from mining.__main__ import main as mining_main

    endpoint, client = s3
    rng = np.random.default_rng(5)
    centres = rng.normal(size=(30, 8)).astype(np.float32)
    for name, vecs in (
        ("src", centres + 0.05 * rng.normal(size=(30, 8))),
        ("trg", centres[::-1] + 0.05 * rng.normal(size=(30, 8))),
    ):
        (tmp_path / f"{name}.txt").write_text("".join(f"{name} sentence {i}\n" for i in range(30)))
        w = StoreWriter(str(tmp_path / name), dim=8, dtype="float32")
        w.add(
            vecs.astype(np.float32),
            [f"{name}{i}" for i in range(30)],
            text=[f"{name} sentence {i}" for i in range(30)],
        )
        w.close()
    monkeypatch.setenv("LABSE_BEAM_OPTIONS", shlex.join(s3_args(endpoint)))
    args = [
        "--src-text",
        str(tmp_path / "src.txt"),
        "--trg-text",
        str(tmp_path / "trg.txt"),
        "--src-emb",
        str(tmp_path / "src"),
        "--trg-emb",
        str(tmp_path / "trg"),
    ]
    previous = FileSystems._pipeline_options
    try:
        for out in ("s3://corpus/mined", str(tmp_path / "mined")):
            assert mining_main(["mine", *args, "--output", out, "--log-level", "WARNING"]) == 0
    finally:
        FileSystems.set_options(previous)
    remote = download(client, "mined/")
    local = {
        str(f.relative_to(tmp_path / "mined")): f.read_bytes()
        for f in (tmp_path / "mined").rglob("*")
        if f.is_file()
    }
    assert set(remote) == set(local) and "mined.parquet" in remote
    assert pq.read_table(io.BytesIO(remote["mined.parquet"])).equals(
        pq.read_table(io.BytesIO(local["mined.parquet"]))
    )
    assert pq.read_table(io.BytesIO(remote["mined.parquet"])).num_rows >= 20


def test_beam_mining_output_round_trips_through_s3(s3, tmp_path):
    """`pipelines.mine --output s3://...`: the bucket gets the files of the same job into a
    local folder, no claim or staging prefix left behind."""
    from labse_common.embedding_store import StoreWriter
    from pipelines.mine import run as beam_mine

    endpoint, client = s3
    rng = np.random.default_rng(11)
    centres = rng.normal(size=(40, 8)).astype(np.float32)
    for name, vecs in (
        ("src", centres + 0.05 * rng.normal(size=(40, 8))),
        ("trg", centres[::-1] + 0.05 * rng.normal(size=(40, 8))),
    ):
        w = StoreWriter(str(tmp_path / name), dim=8, dtype="float32", rows_per_shard=15)
        w.add(
            vecs.astype(np.float32),
            [f"{name}{i}" for i in range(40)],
            text=[f"{name} sentence {i}" for i in range(40)],
        )
        w.close()
    args = [
        "--src-emb",
        str(tmp_path / "src"),
        "--trg-emb",
        str(tmp_path / "trg"),
        "--shard-rows",
        "15",
        *DIRECT,
        *s3_args(endpoint),
    ]
    assert beam_mine([*args, "--output", "s3://corpus/beam_mined"]) == 0
    assert beam_mine([*args, "--output", str(tmp_path / "local")]) == 0
    remote = download(client, "beam_mined/")
    local = {f.name: f.read_bytes() for f in (tmp_path / "local").iterdir()}
    assert (
        set(remote)
        == set(local)
        == {"mined.parquet", "mined.tsv.gz", "score_hist.png", "stats.json"}
    )
    a = pq.read_table(io.BytesIO(remote["mined.parquet"]))
    b = pq.read_table(io.BytesIO(local["mined.parquet"]))
    assert a.num_rows >= 30 and a.to_pandas().equals(b.to_pandas())  # NaN == NaN here
    assert json.loads(remote["stats.json"])["counts"] == json.loads(local["stats.json"])["counts"]
    # A second writer into the same bucket folder is refused (exit 2), the files stay.
    assert beam_mine([*args, "--output", "s3://corpus/beam_mined"]) == 2
    assert download(client, "beam_mined/")["mined.parquet"] == remote["mined.parquet"]


def test_vocab_output_round_trips_through_s3(s3, tmp_path):
    """The vocabulary job writes to a bucket (the Beam counts through FileSystems, the learner's
    files staged locally and uploaded): the same vocab.txt as into a local folder."""
    import pyarrow as pa

    from pipelines.vocab import run as vocab

    endpoint, client = s3
    words = [f"w{i}" for i in range(300)]
    rng = np.random.default_rng(0)
    for lang in ("en", "de"):
        texts = [" ".join(rng.choice(words, 8)) + f" {lang}" for _ in range(200)]
        (tmp_path / "in" / lang).mkdir(parents=True)
        pq.write_table(
            pa.table({"text": texts, "lang": [lang] * len(texts)}),
            tmp_path / "in" / lang / "p.parquet",
        )
    args = ["--input", str(tmp_path / "in"), "--vocab-size", "400", *DIRECT, *s3_args(endpoint)]
    assert vocab([*args, "--output", "s3://corpus/vocab"]) == 0
    assert vocab([*args, "--output", str(tmp_path / "vocab")]) == 0
    remote = download(client, "vocab/")
    assert {"vocab.txt", "tokenizer.json", "vocab_stats.json", "stats.json"} <= set(remote)
    assert remote["vocab.txt"] == (tmp_path / "vocab" / "vocab.txt").read_bytes()
    assert not [k for k in remote if k.startswith(("_tmp-", "_CLAIM"))]


def test_the_training_scan_cache_keys_on_s3_listings(s3, tmp_path, monkeypatch):
    """Training inputs in a bucket: the kept scan is loaded while the objects are as they were
    (sizes and times from one listing per folder) and scanned again once one is rewritten.
    In this process: the kept scan is a file in the output folder, so each call starts from
    what a new process would find there."""
    import shlex

    import pyarrow as pa
    from apache_beam.io.filesystems import FileSystems

    from labse_common.filesystems import configure
    from labse_model import stream
    from labse_model.distributed import DistInfo

    endpoint, client = s3

    def put(lang: str, n: int) -> None:
        buf = io.BytesIO()
        pq.write_table(pa.table({"text": [f"{lang} sentence {i}." for i in range(n)]}), buf)
        client.put_object(
            Bucket="corpus", Key=f"scan-in/{lang}/part-0.parquet", Body=buf.getvalue()
        )

    put("de", 500)
    put("fr", 120)
    monkeypatch.setenv("LABSE_BEAM_OPTIONS", shlex.join(s3_args(endpoint)))
    previous = FileSystems._pipeline_options
    configure(s3_args(endpoint))
    scanned: list[str] = []
    real = stream._scan_file
    monkeypatch.setattr(stream, "_scan_file", lambda *a, **k: scanned.append(a[0]) or real(*a, **k))

    def run() -> dict:
        scanned.clear()
        groups = stream.expand_inputs(["s3://corpus/scan-in"])
        res = stream.scan_distributed(
            groups, stream.SENTENCES, 100, 0.0, 0, DistInfo(), str(tmp_path / "scan")
        )
        return {"scanned": sorted(scanned), "rows": res.total_rows()}

    try:
        files = ["s3://corpus/scan-in/de/part-0.parquet", "s3://corpus/scan-in/fr/part-0.parquet"]
        assert run() == {"scanned": files, "rows": 620}
        assert run() == {"scanned": [], "rows": 620}  # loaded: nothing read
        put("fr", 300)
        assert run() == {"scanned": files, "rows": 800}
    finally:
        FileSystems.set_options(previous)
