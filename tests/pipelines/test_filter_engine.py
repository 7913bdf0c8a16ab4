"""The runner's ``rules`` and ``cds_score`` stages on the Beam engine.

``pipelines.filter_pairs --same-as rules|cds-score`` leaves the folder ``python -m filters
rules`` / ``filters cds-score`` leave, row for row and in the same order (on a loopback Dask
cluster, and with input, model and output on a loopback S3 server), ``pipelines.pair_assembly
concat`` the same ``kept_all.parquet`` as ``e2e_tasks concat``, and with ``beam.runner`` set the
stages' command lines are those jobs with the ``beam:`` options.
"""

from __future__ import annotations

import gzip
import io
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from filters.__main__ import main as filters_main
from pipelines.filter_pairs import run as filter_pairs
from pipelines.pair_assembly import main as assembly_main
from tests.filters.bitext.test_pair_rules import CRAFTED, GOOD
from tests.support.cds_toy import TINY, toy_pairs
from tests.support.paths import REPO
from tests.support.scaleout_util import dask_args, s3_args, s3_test_server

TATOEBA = REPO.parent / "shared" / "data" / "tatoeba"
DIRECT = ["--direct_running_mode", "in_memory", "--direct_num_workers", "1"]
# Several batches, so several part files whose order the assembly must restore.
BATCH = ["--batch-rows", "40"]
CDS_SETS = ["--set", "device=cpu", "--set", "threads=1"]
# Fields that name the run itself, not what it wrote.
OWN = {"seconds", "input", "pairs_file", "model"}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """en-de/mined.parquet (crafted pairs every rule drops, then real or templated pairs),
    the filters' local outputs, and a toy CDS model with pairs for it to score."""
    d = tmp_path_factory.mktemp("engine")
    pairs = [GOOD] + [p for p, _, _ in CRAFTED]
    if (TATOEBA / "train.deu-eng.deu").is_file():
        de = (TATOEBA / "train.deu-eng.deu").read_text(encoding="utf-8").splitlines()[:200]
        en = (TATOEBA / "train.deu-eng.eng").read_text(encoding="utf-8").splitlines()[:200]
        pairs += list(zip(en, de))
    else:
        pairs += [
            (f"Sentence number {i} is fine.", f"Satz Nummer {i} ist gut.") for i in range(200)
        ]
    n = len(pairs)
    (d / "en-de").mkdir()
    mined = {"src": [a for a, _ in pairs], "trg": [b for _, b in pairs]}
    mined |= {"src_lang": ["en"] * n, "trg_lang": ["de"] * n}
    mined["margin"] = pa.array([1.0 + i / 1000 for i in range(n)], pa.float32())
    pq.write_table(pa.table(mined), d / "en-de" / "mined.parquet")
    rules = ["--src-lang", "en", "--trg-lang", "de", "--write-dropped", *BATCH]
    mined_path = str(d / "en-de" / "mined.parquet")
    assert filters_main(["rules", "--pairs", mined_path, "--output", str(d / "local"), *rules]) == 0
    src, trg = toy_pairs(60, 7)  # the least the TINY settings train on: fast
    for name, part in (("noisy", slice(0, 40)), ("trusted", slice(40, 60))):
        text = "".join(f"{a}\t{b}\n" for a, b in zip(src[part], trg[part]))
        (d / f"{name}.tsv").write_text(text, encoding="utf-8")
    train = ["cds-train", "--noisy", str(d / "noisy.tsv"), "--trusted", str(d / "trusted.tsv")]
    sets = [a for kv in TINY for a in ("--set", kv)]
    train += ["--output", str(d / "model"), "--bidirectional", "--threads", "1", *sets]
    assert filters_main(train) == 0
    s, t = toy_pairs(150, 9)
    toy = {"src": s, "trg": t, "margin": pa.array(np.linspace(1, 2, 150), pa.float32())}
    pq.write_table(pa.table(toy), d / "toy.parquet")
    score = ["cds-score", "--model", str(d / "model"), "--pairs", str(d / "toy.parquet")]
    assert filters_main([*score, "--output", str(d / "scored"), *BATCH, *CDS_SETS]) == 0
    return d


def _rules_job(data: Path, inp: str, out: str, *beam: str) -> int:
    argv = ["--input", inp, "--output", out, "--src-lang", "en", "--trg-lang", "de"]
    return filter_pairs([*argv, "--write-dropped", "--same-as", "rules", *BATCH, *beam])


def _score_job(inp: str, model: str, out: str, *beam: str) -> int:
    argv = ["--input", inp, "--output", out, "--same-as", "cds-score", "--cds-model", model]
    return filter_pairs([*argv, *BATCH, *CDS_SETS, *beam])


def _stats(text: bytes | str) -> dict:
    return {k: v for k, v in json.loads(text).items() if k not in OWN}


def assert_same_rules(files: dict[str, bytes], local: Path) -> None:
    """A rules folder (name -> bytes) equals the local command's, row for row, in order."""
    assert sorted(files) == sorted(p.name for p in local.iterdir())
    for name in ("kept", "dropped"):
        got = pq.read_table(io.BytesIO(files[f"{name}.parquet"]))
        want = pq.read_table(local / f"{name}.parquet")
        assert got.schema == want.schema and got.to_pylist() == want.to_pylist(), name
        tsv = gzip.decompress(files[f"{name}.tsv.gz"])
        assert tsv == gzip.decompress((local / f"{name}.tsv.gz").read_bytes()), name
    assert _stats(files["stats.json"]) == _stats((local / "stats.json").read_text())


def assert_same_scores(files: dict[str, bytes], local: Path) -> None:
    assert sorted(files) == ["scored.parquet", "stats.json"]
    got = pq.read_table(io.BytesIO(files["scored.parquet"]))
    want = pq.read_table(local / "scored.parquet")
    assert got.schema == want.schema and got.num_rows == want.num_rows == 150
    assert {"cds_score", "xent_clean", "cds_score_bwd", "dual_xent"} <= set(got.column_names)
    for name in got.column_names:
        a, b = got.column(name).to_pylist(), want.column(name).to_pylist()
        if got.schema.field(name).type == pa.float32() and name != "margin":
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=name)
        else:
            assert a == b, name
    assert _stats(files["stats.json"]) == _stats((local / "stats.json").read_text())


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


@pytest.mark.slow
def test_rules_on_dask_and_cds_score_on_beam_equal_the_local_commands(data, cluster, tmp_path):
    mined = str(data / "en-de" / "mined.parquet")
    assert _rules_job(data, mined, str(tmp_path / "rules"), *dask_args(cluster, 2)) == 0
    assert_same_rules(_tree(tmp_path / "rules"), data / "local")
    # kept_all.parquet: the same table as the local runner's concat
    kept = str(tmp_path / "rules" / "kept.parquet")
    assert assembly_main(["concat", kept, "--output", str(tmp_path / "all.parquet")]) == 0
    local_all = tmp_path / "local_all.parquet"
    from pipelines.e2e_tasks import main as e2e_main

    assert (
        e2e_main(["concat", str(data / "local" / "kept.parquet"), "--output", str(local_all)]) == 0
    )
    assert pq.read_table(tmp_path / "all.parquet").equals(pq.read_table(local_all))
    toy, model = str(data / "toy.parquet"), str(data / "model")
    assert _score_job(toy, model, str(tmp_path / "scored"), *DIRECT) == 0
    assert_same_scores(_tree(tmp_path / "scored"), data / "scored")


@pytest.mark.slow
def test_rules_concat_and_cds_score_read_and_write_s3(data, tmp_path):
    """Input, model and every output on a loopback S3 server: the local commands' files."""
    with s3_test_server(tmp_path / "moto", "run") as (endpoint, client):
        client.upload_file(str(data / "en-de" / "mined.parquet"), "run", "mine/en-de/mined.parquet")
        client.upload_file(str(data / "toy.parquet"), "run", "toy.parquet")
        for f in (data / "model").rglob("*"):
            if f.is_file():
                client.upload_file(str(f), "run", f"cds_train/{f.relative_to(data / 'model')}")
        s3 = [*DIRECT, *s3_args(endpoint)]
        rules = "s3://run/rules/en-de"
        assert _rules_job(data, "s3://run/mine/en-de/mined.parquet", rules, *s3) == 0
        assert_same_rules(_download(client, "rules/en-de/"), data / "local")
        concat = ["concat", f"{rules}/kept.parquet", "--output", "s3://run/rules/kept_all.parquet"]
        assert assembly_main([*concat, *s3_args(endpoint)]) == 0
        got = _download(client, "rules/kept_all.parquet")[""]
        assert pq.read_table(io.BytesIO(got)).equals(pq.read_table(data / "local" / "kept.parquet"))
        assert _score_job("s3://run/toy.parquet", "s3://run/cds_train", "s3://run/cds", *s3) == 0
        assert_same_scores(_download(client, "cds/"), data / "scored")


def _download(client, prefix: str) -> dict[str, bytes]:
    keys = client.list_objects_v2(Bucket="run", Prefix=prefix).get("Contents", [])
    return {
        k["Key"][len(prefix) :]: client.get_object(Bucket="run", Key=k["Key"])["Body"].read()
        for k in keys
    }


def _context(out: Path, *sets: str):
    from pipelines.run.config import effective_config
    from pipelines.run.declare import Context

    cfg = effective_config("demo", ["mining.pairs=[de-en, fr-en]", *sets])
    return Context(out, out / "synthetic", True, out / "_config.yaml", cfg)


def test_stage_command_lines_on_the_engine_are_the_beam_jobs(tmp_path):
    from pipelines.run.bitext_stages import CDS_SCORE, RULES

    beam = ["beam.runner=DaskRunner", "beam.options={dask_client_address: 'tcp://127.0.0.1:1'}"]
    ctx = _context(tmp_path, *beam)
    assert RULES.on_engine(ctx) and CDS_SCORE.on_engine(ctx)
    args = ctx.beam_args
    assert args == ["--runner=DaskRunner", "--dask_client_address=tcp://127.0.0.1:1"]
    cmds = RULES.command_lines(ctx)
    assert len(cmds) == 3
    for cmd, pair in zip(cmds, ("de-en", "fr-en")):
        assert cmd[1:3] == ["-m", "pipelines.filter_pairs"] and cmd[-len(args) :] == args
        assert cmd[cmd.index("--input") + 1] == str(tmp_path / "mine" / pair / "mined.parquet")
        assert cmd[cmd.index("--output") + 1] == str(tmp_path / "rules" / pair)
        assert cmd[cmd.index("--same-as") + 1] == "rules" and "--write-dropped" in cmd
    assert cmds[2][1:4] == ["-m", "pipelines.pair_assembly", "concat"]
    assert cmds[2][-len(args) :] == args
    *scores, joined = CDS_SCORE.command_lines(ctx)
    for score, pair in zip(scores, ("de-en", "fr-en"), strict=True):
        assert score[1:3] == ["-m", "pipelines.filter_pairs"] and score[-len(args) :] == args
        assert score[score.index("--same-as") + 1] == "cds-score"
        assert score[score.index("--cds-model") + 1] == str(tmp_path / "cds_train")
        assert score[score.index("--input") + 1] == str(tmp_path / "rules" / pair / "kept.parquet")
        assert score[score.index("--output") + 1] == str(tmp_path / "cds_score" / pair)
    assert joined[1:4] == ["-m", "pipelines.pair_assembly", "scored"]
    assert joined[-len(args) :] == args
    # A run folder on object storage: the jobs get its URLs, the config stays local.
    ctx.remote = "s3://bucket/run"
    score, _, joined = CDS_SCORE.command_lines(ctx)
    assert score[score.index("--input") + 1] == "s3://bucket/run/rules/de-en/kept.parquet"
    assert score[score.index("--output") + 1] == "s3://bucket/run/cds_score/de-en"
    assert score[score.index("--config") + 1] == str(tmp_path / "_config.yaml")
    assert joined[4] == "s3://bucket/run/cds_score"
    # Without beam.runner: the local commands, as before.
    local = _context(tmp_path)
    assert [c[3] for c in RULES.command_lines(local)] == ["rules", "rules", "concat"]
    assert [c[3] for c in CDS_SCORE.command_lines(local)] == ["cds-score", "cds-score", "scored"]


def test_same_as_cds_score_refuses_what_it_cannot_do(tmp_path, caplog):
    out = str(tmp_path / "o")
    base = ["--input", str(tmp_path / "x.parquet"), "--output", out, "--same-as", "cds-score"]
    assert filter_pairs([*base, *DIRECT]) == 2
    assert "--same-as cds-score needs --cds-model" in caplog.text
    assert not os.path.exists(out)
