"""The corpus jobs resume by shard (``--resume``, pipelines/corpus_resume.py): a job killed
after finishing some shards (``LABSE_KILL_AFTER=commoncrawl:1``) is rerun, keeps those shards
(``resumed_shards`` in stats.json), does the rest and writes what an uninterrupted job writes,
row for row; a damaged or half-written shard is done again, never taken."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines import commoncrawl, wikipedia
from pipelines.run.corpus_stages import COMMONCRAWL, COMMONCRAWL_Q, WIKIPEDIA
from tests.support.corpus_fixtures import article, good_wet_payload, page_xml, write_dump, write_wet
from tests.support.corpus_util import assert_balanced, read_stats

ROOT = Path(__file__).resolve().parents[2]
ONE_PROCESS = ["--direct_running_mode", "in_memory", "--direct_num_workers", "1"]
FILES = 3


def _parquet(out: Path) -> dict[str, list]:
    """Every Parquet file of an output (sentences and _dropped), by its path, as rows."""
    return {
        str(p.relative_to(out)): pq.read_table(p).to_pylist()
        for p in sorted(out.rglob("*.parquet"))
    }


@pytest.fixture(scope="module")
def crawl(tmp_path_factory) -> dict:
    """Three WET files sharing sentences (so the dedup collapses rows across shards) and the
    output of the job run whole, without --resume."""
    d = tmp_path_factory.mktemp("crawl")
    (d / "in").mkdir()
    for i in range(FILES):
        docs = [
            (
                f"http://site{i}.example/{j}",
                good_wet_payload(f"Report {j} from site {i} says the new bridge opened in May."),
            )
            for j in range(3)
        ]
        write_wet(d / "in" / f"part-{i}.warc.wet.gz", docs)
    argv = ["--input", str(d / "in" / "*.wet.gz"), "--write-dropped", *ONE_PROCESS]
    assert commoncrawl.main([*argv, "--output", str(d / "whole")]) == 0
    return {"dir": d, "argv": [*argv, "--resume", "--files-per-shard", "1"], "whole": d / "whole"}


def _killed(
    argv: list[str], out: Path | str, kill: str, module: str = "pipelines.commoncrawl"
) -> None:
    """The job in a process of its own that LABSE_KILL_AFTER kills."""
    env = {**os.environ, "LABSE_KILL_AFTER": kill, "PYTHONPATH": str(ROOT)}
    p = subprocess.run(
        [sys.executable, "-m", module, *argv, "--output", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]


def _assert_same_as_whole(out: Path, whole: Path) -> dict:
    assert _parquet(out) == _parquet(whole)
    assert sorted(os.listdir(out)) == sorted(os.listdir(whole))  # no _partial left
    stats, ref = read_stats(out), read_stats(whole)
    assert stats["counts"] == ref["counts"]
    assert_balanced(stats)
    return stats


@pytest.mark.slow
def test_a_killed_commoncrawl_job_keeps_its_finished_shards(crawl, tmp_path):
    out = tmp_path / "cc"
    _killed(crawl["argv"], out, "commoncrawl:1")
    done = out / "_partial" / "_done"
    assert sorted(os.listdir(done)) == ["shard-00000.json"]  # killed right after the first
    assert commoncrawl.main([*crawl["argv"], "--output", str(out)]) == 0
    stats = _assert_same_as_whole(out, crawl["whole"])
    assert stats["shards"] == FILES and stats["resumed_shards"] == 1


@pytest.mark.slow
def test_a_damaged_or_half_written_shard_is_done_again(crawl, tmp_path):
    out = tmp_path / "cc"
    _killed([*crawl["argv"], "--resume-stage", "commoncrawl_q"], out, "commoncrawl_q:2")
    partial = out / "_partial"
    # Shard 1 damaged after it was recorded; shard 2 half-written (begun, never recorded).
    victim = next((partial / "shard-00001" / "kept").rglob("*.parquet"))
    victim.write_bytes(victim.read_bytes()[:-10])
    (partial / "shard-00002" / "kept").mkdir(parents=True)
    (partial / "shard-00002" / "kept" / "junk.parquet").write_bytes(b"half")
    argv = [*crawl["argv"], "--resume-stage", "commoncrawl_q"]
    assert commoncrawl.main([*argv, "--output", str(out)]) == 0
    stats = _assert_same_as_whole(out, crawl["whole"])
    assert stats["resumed_shards"] == 1  # shard 0 only


@pytest.mark.slow
def test_a_killed_wikipedia_job_resumes(tmp_path):
    d = tmp_path / "dumps"
    d.mkdir()
    for name, ids in (("a", range(0, 5)), ("b", range(3, 9))):
        write_dump(
            d / f"{name}-pages-articles.xml.bz2",
            [page_xml(f"T{i}", article(i), pid=i) for i in ids],
        )
    argv = ["--input", str(d / "*.xml.bz2"), *ONE_PROCESS]
    assert wikipedia.main([*argv, "--output", str(tmp_path / "whole")]) == 0
    _killed([*argv, "--resume"], tmp_path / "w", "wikipedia:1", "pipelines.wikipedia")
    assert wikipedia.main([*argv, "--resume", "--output", str(tmp_path / "w")]) == 0
    stats = _assert_same_as_whole(tmp_path / "w", tmp_path / "whole")
    assert stats["shards"] == 2 and stats["resumed_shards"] == 1


def test_files_per_shard_below_one_is_a_usage_error(tmp_path, caplog):
    wet = write_wet(tmp_path / "a.warc.wet.gz", [("http://a.example/", good_wet_payload())])
    argv = ["--input", str(wet), "--output", str(tmp_path / "o"), "--resume"]
    assert commoncrawl.main([*argv, "--files-per-shard", "0"]) == 2
    assert "--files-per-shard 0: must be at least 1" in caplog.text
    assert not (tmp_path / "o").exists()


def test_the_runner_resumes_the_corpus_stages_by_shard():
    """The runner keeps these stages' folders on a rerun and passes --resume (see
    pipelines/run/corpus_stages.py); the stage's name is what LABSE_KILL_AFTER names."""
    assert COMMONCRAWL.resumable and COMMONCRAWL_Q.resumable and WIKIPEDIA.resumable
    args = ["--input", "x", "--output", "o", "--resume", "--resume-stage", "commoncrawl_q"]
    assert commoncrawl.parser().parse_args(args).resume_stage == "commoncrawl_q"


@pytest.mark.slow
def test_a_killed_job_resumes_on_s3(crawl, tmp_path):
    """The same with the output on an S3 server (moto, on loopback): the shards' records live
    in ``OUTPUT/_partial/`` on the bucket, the killed job's claim and temporary folder are
    taken over, and the output equals an uninterrupted job's into the bucket."""
    from tests.support.scaleout_util import s3_args, s3_test_server

    with s3_test_server(tmp_path / "moto-logs", "corpus") as (endpoint, client):
        for f in sorted((crawl["dir"] / "in").iterdir()):
            client.upload_file(str(f), "corpus", f"in/{f.name}")
        argv = ["--input", "s3://corpus/in/*.wet.gz", "--write-dropped", *ONE_PROCESS]
        argv += s3_args(endpoint)
        assert commoncrawl.main([*argv, "--output", "s3://corpus/whole"]) == 0
        resumed = [*argv, "--resume", "--files-per-shard", "1"]
        _killed(resumed, "s3://corpus/res", "commoncrawl:1")
        left = _objects(client, "res/")
        assert "_partial/_done/shard-00000.json" in left and "_CLAIM.json" in left
        assert "_partial/_done/shard-00001.json" not in left
        assert commoncrawl.main([*resumed, "--output", "s3://corpus/res"]) == 0
        got, want = _objects(client, "res/"), _objects(client, "whole/")
    assert sorted(got) == sorted(want)  # no _partial, _tmp-* or claim left
    for name, data in want.items():
        if name.endswith(".parquet"):
            assert pq.read_table(pa.BufferReader(got[name])).equals(
                pq.read_table(pa.BufferReader(data))
            ), name
    stats, ref = json.loads(got["stats.json"]), json.loads(want["stats.json"])
    assert stats["counts"] == ref["counts"] and stats["resumed_shards"] == 1
    assert_balanced(stats)


def _objects(client, prefix: str) -> dict[str, bytes]:
    keys = client.list_objects_v2(Bucket="corpus", Prefix=prefix).get("Contents", [])
    return {
        k["Key"][len(prefix) :]: client.get_object(Bucket="corpus", Key=k["Key"])["Body"].read()
        for k in keys
    }
