"""The runner on a user's own data: a layout the demo never used, a non-English pair,
pairs as TSV and as Moses files, an evaluation alignment as TSV and Parquet, and an encoder given
by ``model.init``. The run stops for a person's labels with exit status 3 naming the file; the
same command completes once the file is filled; labels of an earlier run are matched to a rerun's
mined pairs by text; the bitext's provenance names the given files; ``--publish`` round-trips
through a loopback S3 server and a dead endpoint is refused before any stage runs.

The encoder is a small random one (no training here), so what is checked is the plumbing and the
contracts, not the quality of the pairs: the demo's figures measure that (bench/README.md)."""

from __future__ import annotations

import csv
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.parquet as pq
import pytest

from labse_common.stats import check_balanced
from tests.pipelines.own_layout import make_layout

if TYPE_CHECKING:
    from tests.support.cli_process import ForkedCommands

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
FAST = [
    "run.quality_bootstrap=false",
    "cds.noisy_epochs=1",
    "cds.clean_epochs=1",
    "cds.model.d_model=32",
    "cds.model.ffn_dim=64",
    "cds.model.encoder_layers=1",
    "cds.model.decoder_layers=1",
    "combine.min_labelled=10",
    "combine.min_per_label=2",
    "combine.on_unreachable=continue",
    "train.steps=0",
    'sources.eval=["gold/*.{src}-{trg}.*"]',
    # One torch thread: the other test worker keeps the second core busy (test_run_pipeline.py).
    "cds.threads=1",
]

pytestmark = pytest.mark.slow


def run(
    data: Path,
    out: Path,
    *extra: str,
    env: dict | None = None,
    cli: ForkedCommands | None = None,
) -> subprocess.CompletedProcess:
    """The runner on ``data``: a new interpreter, or with ``cli`` a process forked from a server
    that imported the runner once (tests/support/cli_process.py ForkedCommands; 2-7 s less per
    command)."""
    sets = [a for s in FAST for a in ("--set", s)]
    argv = [
        "--config",
        str(ROOT / "configs" / "own-data.yaml"),
        "--data",
        str(data),
        "--output",
        str(out),
        "--set",
        f"model.init={data / 'labse'}",
        *sets,
        *extra,
    ]
    if cli is not None:
        return cli.run("pipelines.run", *argv, env=env or ENV, timeout=900)
    return subprocess.run(
        [sys.executable, "-m", "pipelines.run", *argv],
        cwd=ROOT,
        env=env or ENV,
        capture_output=True,
        text=True,
        timeout=900,
    )


def label_rows(path: Path) -> tuple[list[str], list[list[str]]]:
    rows = list(csv.reader(path.open(encoding="utf-8"), delimiter="\t", quoting=csv.QUOTE_NONE))
    return rows[0], rows[1:]


def fill_labels(path: Path) -> int:
    """Label every sampled pair, alternating GOOD and BAD (a stand-in for a person: the random
    encoder finds few true pairs, and the filter needs both labels)."""
    header, rows = label_rows(path)
    i = header.index("label")
    for n, r in enumerate(rows):
        r[i] = "GOOD" if n % 2 == 0 else "BAD"
    path.write_text("".join("\t".join(r) + "\n" for r in [header, *rows]), encoding="utf-8")
    return len(rows)


@pytest.fixture(scope="module")
def own(tmp_path_factory, forked_commands: ForkedCommands) -> dict:
    data = tmp_path_factory.mktemp("own")
    make_layout(data)
    out = tmp_path_factory.mktemp("run") / "out"
    first = run(data, out)  # the command line itself, in a new interpreter
    labelled = fill_labels(out / "labels.tsv") if (out / "labels.tsv").is_file() else 0
    second = run(data, out, cli=forked_commands)
    return {
        "data": data,
        "out": out,
        "first": first,
        "second": second,
        "labelled": labelled,
        "cli": forked_commands,
    }


def test_stops_for_labels_naming_the_file_then_the_same_command_completes(own):
    first, out = own["first"], own["out"]
    assert first.returncode == 3, first.stderr[-3000:]
    needs = [ln for ln in first.stderr.splitlines() if ln.startswith("labels needed:")]
    assert len(needs) == 1 and str(out / "labels.tsv") in needs[0], first.stderr[-2000:]
    assert "python -m filters label" in needs[0]
    assert "run the same command again" in first.stderr
    assert not (out / "_state" / "combine.manifest.json").exists() or own["second"].returncode == 0
    assert own["labelled"] >= 10
    second = own["second"]
    assert second.returncode == 0, second.stderr[-3000:]
    assert (out / "bitext" / "bitext.tsv.gz").is_file() and (
        out / "report" / "report.html"
    ).is_file()


def test_vocab_pretrain_train_are_skipped_with_model_init(own):
    plan = {p["stage"]: p for p in json.loads((own["out"] / "_run.json").read_text())["plan"]}
    for stage in ("vocab", "pretrain", "train", "synthetic", "demo"):
        assert plan[stage]["action"] == "off", plan[stage]
    assert "model.init" in plan["vocab"]["reason"] and "train.steps is 0" in plan["train"]["reason"]
    assert not (own["out"] / "vocab").exists() and not (own["out"] / "train").exists()
    embed = json.loads((own["out"] / "_state" / "embed.manifest.json").read_text())
    assert str(own["data"] / "labse") in " ".join(embed["commands"][0])


def test_both_pair_formats_and_the_non_english_pair_are_read_and_mined(own):
    out = own["out"]
    stats = json.loads((out / "inputs" / "stats.json").read_text())
    assert check_balanced(stats) == []
    pairs = {f["pair"]: f for f in stats["files"] if f["kind"] == "pairs"}
    assert set(pairs) == {"de-en", "de-fr"}
    assert pairs["de-fr"]["paths"][0].endswith("corpus.de-fr.de") and pairs["de-fr"]["rows"] == 120
    evals = {f["pair"]: f for f in stats["files"] if f["kind"] == "eval"}
    assert (
        evals["de-fr"]["paths"][0].endswith("dev.deu-fra.parquet") and evals["de-fr"]["rows"] == 40
    )
    for pair in ("de-en", "de-fr"):
        assert pq.read_table(out / "mine" / pair / "mined.parquet").num_rows > 0
    pr = json.loads((out / "eval" / "mined_pr.json").read_text())
    assert pr["de-fr"]["gold"] == 40 and pr["de-en"]["gold"] == 40 and "half" not in pr


def test_every_stage_balances_and_provenance_names_the_given_files(own):
    out, data = own["out"], own["data"]
    for manifest in (out / "_state").glob("*.manifest.json"):
        stats = out / manifest.name.split(".")[0] / "stats.json"
        if stats.is_file():
            assert check_balanced(json.loads(stats.read_text())) == [], stats
    given = {p.name for p in (data / "crawl").iterdir()} | {
        p.name for p in (data / "dumps").iterdir()
    }
    kept = pq.read_table(out / "bitext" / "bitext.parquet").to_pylist()
    rejected = pq.read_table(out / "bitext" / "rejected.parquet").to_pylist()
    rows = [r for r in kept + rejected if r.get("src_locator")]
    assert rows
    for r in rows:
        for side in ("src", "trg"):
            assert r[f"{side}_locator"].split("@")[0] in given, r[f"{side}_locator"]
            assert r[f"{side}_source"] in ("commoncrawl", "wikipedia")


def test_earlier_labels_are_matched_by_text_to_a_rerun_with_other_mined_pairs(own, tmp_path):
    out = tmp_path / "rerun"
    shutil.copytree(own["out"], out)
    (out / "labels.tsv").unlink()
    earlier = own["out"] / "labels.tsv"
    # Up to the labels stage alone: what comes after it reads the labels, it does not match them.
    until_labels = "mine,rules,cds_train,cds_score,sample,labels"
    p = run(
        own["data"],
        out,
        "--set",
        "mining.k=2",
        "--set",
        f"combine.labels={earlier}",
        "--only",
        until_labels,
        cli=own["cli"],
    )
    assert p.returncode in (0, 3), p.stderr[-3000:]
    stats = json.loads((out / "labels" / "stats.json").read_text()) if p.returncode == 0 else None
    # The earlier labels prefill the new sample wherever the same pair text was sampled again.
    h_old, old_rows = label_rows(earlier)
    header, new_rows = label_rows(out / "labels.tsv")
    old = {
        (r[h_old.index("src")], r[h_old.index("trg")]): r[h_old.index("label")] for r in old_rows
    }
    for r in new_rows:
        key = (r[header.index("src")], r[header.index("trg")])
        assert r[header.index("label")] == old.get(key, ""), key
    # Every earlier label is either matched to a mined pair of the rerun or counted not_mined.
    cand = pq.read_table(out / "cds_score" / "scored.parquet", columns=["src", "trg"]).to_pylist()
    mined = {(c["src"], c["trg"]) for c in cand}
    unmatched = sum(1 for k in old if k not in mined)
    assert unmatched > 0, "mining.k=2 should change some mined pairs"
    if stats is not None:
        counts = stats["counts"]["labels"]
        assert counts["in"] == len(old) and counts["dropped"].get("not_mined", 0) == unmatched
        assert counts["out"] == len(old) - unmatched


def test_publish_round_trips_through_s3_and_a_dead_endpoint_stops_before_any_stage(own, tmp_path):
    from tests.support.scaleout_util import free_port, s3_args, s3_test_server

    with s3_test_server(tmp_path / "moto", "published") as (endpoint, client):
        env = {
            **ENV,
            "AWS_EC2_METADATA_DISABLED": "true",
            "LABSE_BEAM_OPTIONS": shlex.join(s3_args(endpoint)),
        }
        p = run(
            own["data"], own["out"], "--publish", "s3://published/run1", env=env, cli=own["cli"]
        )
        assert p.returncode == 0, p.stderr[-3000:]
        keys = {
            o["Key"] for o in client.list_objects_v2(Bucket="published", Prefix="run1/")["Contents"]
        }
        local = {
            str(f.relative_to(own["out"] / "bitext"))
            for f in (own["out"] / "bitext").rglob("*")
            if f.is_file()
        }
        assert {f"run1/{k}" for k in local} <= keys and "run1/_PUBLISHED.json" in keys
        assert "run1/report/report.html" in keys
        body = client.get_object(Bucket="published", Key="run1/bitext.tsv.gz")["Body"].read()
        assert body == (own["out"] / "bitext" / "bitext.tsv.gz").read_bytes()
        _republish_only_with_overwrite(own, env, client)
    dead = {
        **ENV,
        "AWS_EC2_METADATA_DISABLED": "true",
        "LABSE_BEAM_OPTIONS": shlex.join(s3_args(f"http://127.0.0.1:{free_port()}")),
    }
    fresh = tmp_path / "fresh"
    p = run(own["data"], fresh, "--publish", "s3://published/run2", env=dead, cli=own["cli"])
    assert p.returncode == 2, p.stderr[-2000:]
    errors = [ln for ln in p.stderr.splitlines() if "ERROR" in ln or "error" in ln]
    assert len(errors) == 1 and "s3://published" in errors[0], p.stderr[-2000:]
    assert not fresh.exists() or not any(
        d.is_dir() and not d.name.startswith("_") for d in fresh.iterdir()
    )


def _republish_only_with_overwrite(own: dict, env: dict, client) -> None:
    """The same URL again: refused (exit 2, one line) without --publish-overwrite; with it, the
    publication is replaced and a user's object beside it kept. A prefix of a user's objects is
    refused either way, the objects left as they were."""

    def objects(prefix: str) -> dict[str, bytes]:
        listed = client.list_objects_v2(Bucket="published", Prefix=prefix).get("Contents", [])
        return {
            o["Key"]: client.get_object(Bucket="published", Key=o["Key"])["Body"].read()
            for o in listed
        }

    client.put_object(Bucket="published", Key="run1/notes/keep.txt", Body=b"the user's")
    client.put_object(Bucket="published", Key="theirs/bitext.tsv.gz", Body=b"the user's own")
    before = objects("run1/")
    for url, extra, words in (
        ("s3://published/run1", [], "--publish-overwrite"),
        ("s3://published/theirs", ["--publish-overwrite"], "not empty"),
    ):
        p = run(own["data"], own["out"], "--publish", url, *extra, env=env, cli=own["cli"])
        errors = [ln for ln in p.stderr.splitlines() if "ERROR" in ln or "error" in ln]
        assert p.returncode == 2 and len(errors) == 1, p.stderr[-2000:]
        assert url in errors[0] and words in errors[0], errors[0]
    assert objects("run1/") == before
    assert objects("theirs/") == {"theirs/bitext.tsv.gz": b"the user's own"}
    p = run(
        own["data"],
        own["out"],
        "--publish",
        "s3://published/run1",
        "--publish-overwrite",
        env=env,
        cli=own["cli"],
    )
    assert p.returncode == 0, p.stderr[-3000:]
    after = objects("run1/")
    assert json.loads(after.pop("run1/_PUBLISHED.json"))["file_count"] == len(after) - 1
    before.pop("run1/_PUBLISHED.json")
    assert after == before  # the same files again, the user's kept


def _sentences(folder: Path) -> tuple[list[str], dict]:
    """A corpus job's output as sorted rows (shard names and counts differ between runners) and
    its stats."""
    rows = []
    for f in sorted(folder.rglob("*.parquet")):
        t = pq.read_table(f)
        rows += [repr(r) for r in zip(*(t.column(c).to_pylist() for c in sorted(t.column_names)))]
    return sorted(rows), json.loads((folder / "stats.json").read_text())


def test_beam_stages_on_a_loopback_dask_cluster_give_the_same_sentences(own, cluster, tmp_path):
    """beam.runner/options reach every Beam stage: the corpus jobs and the embedding jobs run on
    two stock Dask workers and write the local runner's sentences, counts and stores. Only
    those stages are rerun (``--only``): what follows them reads the same rows and vectors,
    which the comparison proves."""
    out = tmp_path / "dask"
    shutil.copytree(own["out"], out)
    # One partition per worker: DaskRunner runs each transform (DoFn setup included) once per
    # partition, and two still spread the job over both workers.
    options = f"beam.options={{dask_client_address: '{cluster}', dask_npartitions: 2}}"
    p = run(
        own["data"],
        out,
        "--set",
        "beam.runner=DaskRunner",
        "--set",
        options,
        "--only",
        "wikipedia,commoncrawl,sentences,embed",
        cli=own["cli"],
    )
    assert p.returncode == 0, p.stderr[-3000:]
    run_json = json.loads((out / "_run.json").read_text())
    assert run_json["ran"] == ["wikipedia", "commoncrawl", "sentences", "embed"]
    engine = {"wikipedia": "DaskRunner", "commoncrawl": "DaskRunner", "sentences": "local"}
    assert run_json["engine"] == {**engine, "embed": "DaskRunner"}
    # embed: one Beam job per language, the distributed form of the same embedding path: the
    # local stage's stores, byte for byte.
    local = {k: v for k, v in _store_bytes(own["out"] / "embed").items() if "/" in k}
    assert _store_bytes(out / "embed") == local
    for stage in ("wikipedia", "commoncrawl"):
        cmd = " ".join(
            json.loads((out / "_state" / f"{stage}.manifest.json").read_text())["commands"][0]
        )
        assert "--runner=DaskRunner" in cmd and f"--dask_client_address={cluster}" in cmd
        rows, stats = _sentences(out / stage)
        local_rows, local_stats = _sentences(own["out"] / stage)
        assert rows and rows == local_rows, stage
        assert stats["counts"] == local_stats["counts"], stage


def _store_bytes(d: Path) -> dict[str, bytes]:
    """Every file but stats.json (it names times and paths), gzip files by their content (their
    header holds the time they were written)."""
    import gzip

    return {
        str(p.relative_to(d)): gzip.decompress(p.read_bytes())
        if p.suffix == ".gz"
        else p.read_bytes()
        for p in sorted(d.rglob("*"))
        if p.is_file() and p.name != "stats.json"
    }


def test_a_killed_embed_stage_resumes_from_its_finished_shards(own, tmp_path):
    """``LABSE_KILL_AFTER=embed:1`` kills the embed stage's process right after its first
    language; the same command then keeps that language (``resumed_shards``), embeds the rest,
    and writes the stores an uninterrupted run writes, byte for byte (so the same bitext)."""
    setting = ["--set", "run.embed_batch_size=16", "--only", "embed"]  # a new embed key
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    shutil.copytree(own["out"], whole)
    shutil.copytree(own["out"], killed)
    p = run(own["data"], whole, *setting, cli=own["cli"])
    assert p.returncode == 0, p.stderr[-3000:]
    p = run(own["data"], killed, *setting, env={**ENV, "LABSE_KILL_AFTER": "embed:1"})
    assert p.returncode != 0 and "embed" in p.stderr, p.stderr[-3000:]
    assert (killed / "embed" / "_partial" / "_done").is_dir()
    p = run(own["data"], killed, *setting, cli=own["cli"])
    assert p.returncode == 0, p.stderr[-3000:]
    stats = json.loads((killed / "embed" / "stats.json").read_text())
    assert stats["resumed_shards"] == 1 and stats["shards"] > 1
    assert json.loads((whole / "embed" / "stats.json").read_text())["resumed_shards"] == 0
    assert _store_bytes(killed / "embed") == _store_bytes(whole / "embed")
    assert not (killed / "embed" / "_partial").exists()


def test_a_killed_stage_of_several_commands_keeps_its_finished_ones(own, tmp_path):
    """The rules stage runs one command per language pair. ``LABSE_KILL_AFTER=rules:1`` kills
    the runner right after the first is recorded; the same command keeps that pair's output
    (``resumed_shards`` in the manifest and ``_run.json``) and ends as an uninterrupted rerun."""
    setting = ["--set", "pair_rules.max_ratio=2.9", "--only", "rules"]  # a new rules key
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    shutil.copytree(own["out"], whole)
    shutil.copytree(own["out"], killed)
    assert run(own["data"], whole, *setting, cli=own["cli"]).returncode == 0
    p = run(own["data"], killed, *setting, env={**ENV, "LABSE_KILL_AFTER": "rules:1"})
    assert p.returncode == -9, p.stderr[-3000:]
    p = run(own["data"], killed, *setting, cli=own["cli"])
    assert p.returncode == 0, p.stderr[-3000:]
    manifest = json.loads((killed / "_state" / "rules.manifest.json").read_text())
    assert manifest["resumed_shards"] == 1
    assert json.loads((killed / "_run.json").read_text())["resumed_shards"] == {"rules": 1}
    assert json.loads((killed / "_run.json").read_text())["engine"] == {"rules": "local"}
    assert _store_bytes(killed / "rules") == _store_bytes(whole / "rules")


def test_a_killed_mine_stage_keeps_the_pairs_it_mined(own, tmp_path):
    """``LABSE_KILL_AFTER=mine:1`` kills the mine stage's process after its first language
    pair; the same command keeps that pair (``resumed_shards``) and mines what an
    uninterrupted run mines."""
    setting = ["--set", "mining.threshold=1.01", "--only", "mine"]  # a new mine key
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    shutil.copytree(own["out"], whole)
    shutil.copytree(own["out"], killed)
    assert run(own["data"], whole, *setting, cli=own["cli"]).returncode == 0
    p = run(own["data"], killed, *setting, env={**ENV, "LABSE_KILL_AFTER": "mine:1"})
    assert p.returncode != 0 and "mine" in p.stderr, p.stderr[-3000:]
    p = run(own["data"], killed, *setting, cli=own["cli"])
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads((killed / "_run.json").read_text())["resumed_shards"] == {"mine": 1}
    mined = sorted(p.relative_to(whole) for p in whole.glob("mine/*/mined.parquet"))
    assert len(mined) > 1
    for rel in mined:
        assert pq.read_table(killed / rel).equals(pq.read_table(whole / rel)), rel


def test_a_killed_cds_score_stage_keeps_the_pairs_it_scored(own, tmp_path):
    """cds_score runs one ``filters cds-score`` per language pair, then joins them.
    ``LABSE_KILL_AFTER=cds_score:1`` kills the runner after the first pair; the same command
    keeps it (``resumed_shards``) and its scored.parquet is an uninterrupted run's, row for row,
    in the rules' kept_all order."""
    setting = ["--only", "cds_score"]
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    for copy in (whole, killed):  # the stage not run yet (a changed cds key retrains cds_train)
        shutil.copytree(own["out"], copy)
        (copy / "_state" / "cds_score.manifest.json").unlink()
    assert run(own["data"], whole, *setting, cli=own["cli"]).returncode == 0
    p = run(own["data"], killed, *setting, env={**ENV, "LABSE_KILL_AFTER": "cds_score:1"})
    assert p.returncode == -9, p.stderr[-3000:]
    assert not (killed / "cds_score" / "scored.parquet").exists()
    p = run(own["data"], killed, *setting, cli=own["cli"])
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads((killed / "_run.json").read_text())["resumed_shards"] == {"cds_score": 1}
    scored = pq.read_table(killed / "cds_score" / "scored.parquet")
    # pandas' equals: a score may be NaN (an empty side), the same NaN in both.
    assert scored.to_pandas().equals(
        pq.read_table(whole / "cds_score" / "scored.parquet").to_pandas()
    )
    kept = pq.read_table(killed / "rules" / "kept_all.parquet", columns=["src", "trg"])
    assert scored.select(["src", "trg"]).to_pylist() == kept.to_pylist()
    stats = json.loads((killed / "cds_score" / "stats.json").read_text())
    assert stats["shards"] == len(list((killed / "mine").glob("*/mined.parquet"))) > 1
    assert stats["counts"]["pairs"]["out"] == scored.num_rows and not check_balanced(stats)


def test_a_killed_bitext_stage_keeps_the_pairs_it_exported(own, tmp_path):
    """bitext runs one ``filters export --pair`` per language pair, then assembles the parts.
    ``LABSE_KILL_AFTER=bitext:1`` kills the runner after the first pair; the same command keeps
    it (``resumed_shards``) and its folder is the uninterrupted run's, row for row. In the
    fixture's own run folder (a copy's labels file has another path: the labels stage, upstream,
    would count as changed); it ends as complete as it was."""
    setting = ["--only", "bitext"]
    killed = own["out"]
    whole = tmp_path / "whole"
    shutil.copytree(killed / "bitext", whole)
    (killed / "_state" / "bitext.manifest.json").unlink()  # the stage not run yet
    shutil.rmtree(killed / "bitext")
    p = run(own["data"], killed, *setting, env={**ENV, "LABSE_KILL_AFTER": "bitext:1"})
    assert p.returncode == -9, p.stderr[-3000:]
    assert not (killed / "bitext" / "bitext.tsv.gz").exists()
    assert len(list((killed / "bitext" / "_parts").iterdir())) == 1
    p = run(own["data"], killed, *setting, cli=own["cli"])
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads((killed / "_run.json").read_text())["resumed_shards"] == {"bitext": 1}
    got = killed / "bitext"
    assert _bitext_rows((got / "bitext.tsv.gz").read_bytes()) == _bitext_rows(
        (whole / "bitext.tsv.gz").read_bytes()
    )
    for name in ("bitext.parquet", "rejected.parquet"):  # pandas' equals: the same NaN in both
        a, b = pq.read_table(got / name), pq.read_table(whole / name)
        assert a.schema == b.schema and a.to_pandas().equals(b.to_pandas()), name
    stats, want = (json.loads((d / "stats.json").read_text()) for d in (got, whole))
    assert (stats.pop("resumed_shards"), want.pop("resumed_shards", 0)) == (1, 0)
    assert stats == want and not check_balanced(stats)
    assert not (got / "_parts").exists() and stats["counts"]["pairs"]["in"] > 0


ENGINE_STAGES = ("wikipedia", "commoncrawl", "embed", "mine", "rules", "cds_score", "bitext")


def _bitext_rows(tsv_gz: bytes) -> list[str]:
    import gzip

    return gzip.decompress(tsv_gz).decode("utf-8").splitlines()


def test_the_run_folder_on_s3_with_the_stages_on_a_dask_cluster(own, cluster, tmp_path):
    """``--output s3://…`` on a loopback S3 server and ``beam.runner: DaskRunner`` on two stock
    Dask workers. The first attempt's CommonCrawl job dies after its first shard
    (``LABSE_KILL_AFTER=commoncrawl:1``); the second keeps that shard and is killed right after
    the embed stage's first language (``embed:1``, SIGKILL of the runner); a runner with a new,
    empty scratch copy (as on another machine) keeps that language (``resumed_shards``) and
    stops for labels naming the remote file; labelled there, a fourth runner, again on an empty
    scratch, ends with the local runner's bitext, pair for pair. Everything lives in the
    bucket, and every data-parallel stage ran on the Dask workers."""
    from tests.support.scaleout_util import s3_args, s3_test_server

    with s3_test_server(tmp_path / "moto", "runs") as (endpoint, client):
        s3 = dict(zip(s3_args(endpoint)[::2], s3_args(endpoint)[1::2], strict=True))
        opts = ", ".join(f"{k[2:]}: '{v}'" for k, v in s3.items())
        options = f"beam.options={{dask_client_address: '{cluster}', dask_npartitions: 2, {opts}}}"
        env = {
            **ENV,
            "AWS_EC2_METADATA_DISABLED": "true",
            "LABSE_BEAM_OPTIONS": shlex.join(s3_args(endpoint)),
        }
        url = "s3://runs/own"
        args = ["--set", "beam.runner=DaskRunner", "--set", options]

        def attempt(n: int, **extra: str) -> subprocess.CompletedProcess:
            return run(
                own["data"],
                url,  # type: ignore[arg-type]
                *args,
                "--scratch",
                str(tmp_path / f"scratch{n}"),
                env={**env, **extra},
            )

        def keys() -> set[str]:
            listed = client.list_objects_v2(Bucket="runs", Prefix="own/", MaxKeys=1000)
            return {o["Key"] for o in listed.get("Contents", [])}

        def get(key: str) -> bytes:
            return client.get_object(Bucket="runs", Key=f"own/{key}")["Body"].read()

        p = attempt(0, LABSE_KILL_AFTER="commoncrawl:1")  # the corpus job dies after a shard
        assert p.returncode != 0 and "commoncrawl" in p.stderr, p.stderr[-3000:]
        assert "own/_CLAIM.json" not in keys()  # the runner ended: its claim went
        p = attempt(1, LABSE_KILL_AFTER="embed:1")  # the runner itself dies after a language
        assert p.returncode == -9, p.stderr[-3000:]
        assert json.loads(get("_run.json"))["resumed_shards"] == {"commoncrawl": 1}
        assert "own/_CLAIM.json" in keys()  # killed outright: taken over by the next runner
        p = attempt(2)
        assert p.returncode == 3, p.stderr[-3000:]
        assert f"python -m filters label {url}/labels.tsv" in p.stderr
        assert "the page is the safe way" in p.stderr and "any editor" not in p.stderr
        history = json.loads(get("_run.json"))
        assert history["resumed_shards"]["embed"] == 1, history
        assert history["engine"]["embed"] == "DaskRunner"
        labels = tmp_path / "labels.tsv"
        labels.write_bytes(get("labels.tsv"))
        fill_labels(labels)
        client.put_object(Bucket="runs", Key="own/labels.tsv", Body=labels.read_bytes())
        p = attempt(3)
        assert p.returncode == 0, p.stderr[-3000:]
        assert f"bitext: {url}/bitext/bitext.tsv.gz" in p.stdout
        remote = _bitext_rows(get("bitext/bitext.tsv.gz"))
        local = _bitext_rows((own["out"] / "bitext" / "bitext.tsv.gz").read_bytes())
        assert remote and remote == local
        # Where each stage ran, from its manifest (_run.json has the stages of its own run).
        engine = {
            stage: json.loads(get(f"_state/{stage}.manifest.json"))["engine"]
            for stage in ENGINE_STAGES + ("sentences", "sample", "combine", "report")
        }
        assert engine == {
            **dict.fromkeys(ENGINE_STAGES, "DaskRunner"),
            **dict.fromkeys(("sentences", "sample", "combine", "report"), "local"),
        }
        assert "own/_CLAIM.json" not in keys() and "own/report/report.html" in keys()
