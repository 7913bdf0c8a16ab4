"""``python -m pipelines.export`` (the bitext stage on the Beam engine) writes the folder
``python -m filters export`` writes from the same inputs, file for file: on the DirectRunner, on
a loopback Dask cluster, with inputs and output on a loopback S3 server; and the runner's bitext
stage is that Beam job when ``beam.runner`` is set."""

from __future__ import annotations

import gzip
import io
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.scaleout_util import dask_args, s3_args, s3_test_server

pytestmark = pytest.mark.slow
os.environ["AWS_EC2_METADATA_DISABLED"] = "true"  # nothing may leave the machine

DIRECT = ["--direct_running_mode", "in_memory", "--direct_num_workers", "1"]
PAIRS = ("de-en", "fr-en")
BUCKET = "export"


def _mined(pair: str, n: int) -> pa.Table:
    s, t = pair.split("-")
    return pa.table(
        {
            "src": [f"{s} satz {i}" for i in range(n)],
            "trg": [f"{t} sentence {i}" for i in range(n)],
            "src_lang": [s] * n,
            "trg_lang": [t] * n,
            "margin": pa.array([1.0 + (i % 7) / 40 for i in range(n)], pa.float32()),
            "cosine": pa.array([0.5 + i / 100 for i in range(n)], pa.float32()),
            "src_url_or_title": [f"http://{s}.example/{i}" for i in range(n)],
            "src_doc_id": pa.array(range(n), pa.int32()),
            "trg_locator": [f"cc.warc@{100 * i}" if i % 3 else None for i in range(n)],
        }
    )


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """mine/, rules/ and combine/ as the runner's stages leave them, for two language pairs."""
    d = tmp_path_factory.mktemp("export_inputs")
    scored = []
    for k, pair in enumerate(PAIRS):
        table = _mined(pair, 30 + 10 * k)
        (d / "mine" / pair).mkdir(parents=True)
        (d / "rules" / pair).mkdir(parents=True)
        pq.write_table(table, d / "mine" / pair / "mined.parquet")
        rows = table.to_pylist()
        dropped = [{**r, "reason": "too_short" if i % 2 else None} for i, r in enumerate(rows[:6])]
        pq.write_table(pa.Table.from_pylist(rows[6:]), d / "rules" / pair / "kept.parquet")
        pq.write_table(pa.Table.from_pylist(dropped), d / "rules" / pair / "dropped.parquet")
        scored += [
            {
                "src": r["src"],
                "trg": r["trg"],
                "keep": i % 4 != 0,
                "combined_score": i / 50,
                "cds_score": None if i % 5 == 0 else -i / 10,
            }
            for i, r in enumerate(rows[6:])
        ]
    (d / "combine").mkdir()
    pq.write_table(pa.Table.from_pylist(scored), d / "combine" / "scored.parquet")
    summary = {
        "target": 0.8,
        "target_reached": True,
        "calibration": {"threshold": 0.1, "precision": 0.85, "precision_ci": [0.8, 0.9]},
        "per_pair": {"fr": {"threshold": 0.2, "precision": 0.9}},
    }
    (d / "combine" / "combined.json").write_text(json.dumps(summary))
    return d


def _args(d: str, variant: str) -> list[str]:
    extra = {
        "combined": ["--combined", f"{d}/combine", "--rules", f"{d}/rules"],
        "rules": ["--rules", f"{d}/rules", "--min-margin", "1.06"],
        "margin": ["--min-margin", "1.1"],
    }[variant]
    return ["--mined", f"{d}/mine", *extra]


def local_export(d: Path, variant: str, out: Path) -> Path:
    from filters.bitext.cli_export import main

    assert main([*_args(str(d), variant), "--output", str(out)]) == 0
    return out


def files_of(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def assert_same_folder(got: dict[str, bytes], want: dict[str, bytes]) -> None:
    """Every file of ``want`` in ``got`` and nothing else: Parquet by schema and rows, gzip by
    its lines (the header holds the time it was written), the rest byte for byte."""
    assert sorted(got) == sorted(want)
    for name, data in want.items():
        if name.endswith(".parquet"):
            a, b = pq.read_table(io.BytesIO(got[name])), pq.read_table(io.BytesIO(data))
            assert a.schema == b.schema and a.to_pylist() == b.to_pylist(), name
        elif name.endswith(".gz"):
            assert gzip.decompress(got[name]) == gzip.decompress(data), name
        else:
            assert got[name] == data, name


@pytest.mark.parametrize("variant", ["combined", "rules", "margin"])
def test_same_folder_as_filters_export(inputs, tmp_path, variant):
    from pipelines.export import main

    want = files_of(local_export(inputs, variant, tmp_path / "local"))
    out = tmp_path / "beam"
    assert main([*_args(str(inputs), variant), "--output", str(out), *DIRECT]) == 0
    assert_same_folder(files_of(out), want)
    stats = json.loads(want["stats.json"])
    assert set(stats["pairs_per_language_pair"]) == set(PAIRS)
    c = stats["counts"]["pairs"]
    assert c["in"] == 70 and 0 < c["out"] < 70 and c["dropped"], c
    assert {"hf/README.md", "bitext.de-en.de", "bitext.fr-en.en"} <= set(want)


def test_on_a_loopback_dask_cluster(inputs, tmp_path, cluster):
    from pipelines.export import main

    want = files_of(local_export(inputs, "combined", tmp_path / "local"))
    out = tmp_path / "dask"
    argv = [*_args(str(inputs), "combined"), "--output", str(out), *dask_args(cluster, 2)]
    assert main(argv) == 0
    assert_same_folder(files_of(out), want)


def test_inputs_and_output_on_s3(inputs, tmp_path):
    from pipelines.export import main

    want = files_of(local_export(inputs, "combined", tmp_path / "local"))
    with s3_test_server(tmp_path / "moto", BUCKET) as (endpoint, client):
        for p in sorted(inputs.rglob("*")):
            if p.is_file():
                client.upload_file(str(p), BUCKET, f"run/{p.relative_to(inputs)}")
        argv = [
            *_args(f"s3://{BUCKET}/run", "combined"),
            "--output",
            f"s3://{BUCKET}/run/bitext",
            *DIRECT,
            *s3_args(endpoint),
        ]
        assert main(argv) == 0
        listed = client.list_objects_v2(Bucket=BUCKET, Prefix="run/bitext/")["Contents"]
        got = {
            o["Key"][len("run/bitext/") :]: client.get_object(Bucket=BUCKET, Key=o["Key"])[
                "Body"
            ].read()
            for o in listed
        }
    assert_same_folder(got, want)


def test_a_file_damaged_past_its_footer_is_one_line(tmp_path, damaged_parquet, caplog):
    """A worker meets the damage: the driver names the file in one line, exit 2, no output."""
    from pipelines.export import main

    mine = tmp_path / "mine"
    (mine / "de-en").mkdir(parents=True)
    bad = mine / "de-en" / "mined.parquet"
    damaged_parquet(bad, _mined("de-en", 600))
    out = tmp_path / "out"
    assert main(["--mined", str(mine), "--output", str(out), *DIRECT]) == 2
    err = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(err) == 1 and str(bad) in err[0] and "damaged Parquet" in err[0], err
    assert not out.exists() or not any(out.iterdir())


def test_bitext_stage_runs_the_beam_job_on_the_engine(tmp_path):
    from pipelines.run.config import effective_config
    from pipelines.run.declare import Context
    from pipelines.run.stages import STAGES

    [bitext] = [s for s in STAGES if s.name == "bitext"]
    assert bitext.engine

    def ctx(*sets: str) -> Context:
        c = Context(
            out=tmp_path,
            base=tmp_path / "synthetic",
            synthetic=True,
            config_file=tmp_path / "_config.yaml",
            cfg=effective_config("demo", list(sets)),
        )
        c.on.update(rules=True, combine=True)
        return c

    engine = ctx("beam.runner=DaskRunner", "beam.options={dask_npartitions: 2}")
    *jobs, assemble = bitext.command_lines(engine)
    local = ctx()
    *plains, plain_assemble = bitext.command_lines(local)
    assert len(jobs) == len(plains) == len(engine.pairs) > 1 and bitext.resumable
    for cmd, plain, pair in zip(jobs, plains, engine.pairs):  # one job per language pair
        assert cmd[1:3] == ["-m", "pipelines.export"]
        assert cmd[-len(engine.beam_args) :] == engine.beam_args
        assert "--runner=DaskRunner" in cmd and "--dask_npartitions=2" in cmd
        assert plain[1:4] == ["-m", "filters", "export"] and "--runner=DaskRunner" not in plain
        # The same inputs, flags and output either way: the pair's part in the stage folder.
        assert cmd[3 : -len(engine.beam_args)] == plain[4:]
        assert plain[plain.index("--pair") + 1] == pair
        assert plain[plain.index("--output") + 1].endswith(f"bitext/_parts/{pair}")
    # The parts as one folder (no --output: the runner never keeps it as a finished unit).
    assert (
        assemble[1:4] == ["-m", "pipelines.pair_assembly", "bitext"] and "--output" not in assemble
    )
    assert plain_assemble == assemble[: len(plain_assemble)]
