"""The runner's ``mine`` stage on the Beam engine: one ``pipelines.mine --pair``
job per language pair, then ``--sum-stats``. Each job writes exactly the files and rows
``mining mine-many`` writes for that pair (sentences joined from the corpus, the lexicon's
re-ranking and lex_* columns, the config's shards), on a loopback Dask cluster and with the
run folder on a loopback S3 server; the stage's command lines are those jobs."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from labse_common.embedding_store import StoreWriter
from labse_common.stats import check_balanced
from mining import lexicon, lexicon_file
from mining.__main__ import main as mining_main
from pipelines.mine import run as beam_mine
from tests.support.lexicon_toy import toy_corpus
from tests.support.scaleout_util import dask_args, s3_args, s3_test_server

PAIRS = ["de-en", "fr-en"]  # de-en has dictionaries in the lexicon, fr-en has none
N, DIM = 30, 32
# 25-row shards of the larger side (60 rows): 3 shard tasks per direction, merged.
CONFIG = ["--set", "k=4", "--set", "shard_rows=25", "--set", "lexicon_weight=0.1"]
CONFIG += ["--set", "progress=false"]
DIRECT = ["--direct_running_mode", "in_memory", "--direct_num_workers", "1"]


def _sides() -> dict[str, tuple[list[str], np.ndarray]]:
    """German sources whose decoy is nearer than their translation (the lexicon re-ranks), the
    English translations and decoys, French sentences near the translations."""
    rng = np.random.default_rng(0)
    pairs, decoys = toy_corpus(N, seed=11), [b for _, b in toy_corpus(N, seed=12)]
    base = rng.standard_normal((N, DIM))
    near = base + 0.05 * rng.standard_normal((N, DIM))
    en = np.vstack(
        [base + 0.6 * rng.standard_normal((N, DIM)), base + 0.3 * rng.standard_normal((N, DIM))]
    )
    fr = base + 0.2 * rng.standard_normal((N, DIM))
    return {
        "de": ([a for a, _ in pairs], near),
        "en": ([b for _, b in pairs] + decoys, en),
        "fr": ([f"fr phrase {i}" for i in range(N)], fr),
    }


def _write_inputs(root: str, local: Path) -> None:
    """``root`` (a folder or an s3:// prefix) gets sentences/<lang>/ and emb/<lang>/ stores;
    the sentences carry provenance the mined pairs must carry too. The sentence files are
    written under ``local`` (uploaded by the caller when ``root`` is remote)."""
    for lang, (texts, vecs) in _sides().items():
        ids = [f"{lang}-{i}" for i in range(len(texts))]
        table = pa.table({"text": texts, "id": ids, "source": [f"web-{lang}"] * len(texts)})
        (local / "sentences" / lang).mkdir(parents=True, exist_ok=True)
        pq.write_table(table, local / "sentences" / lang / "sentences.parquet")
        w = StoreWriter(f"{root}/emb/{lang}", dim=DIM, dtype="float16", rows_per_shard=25)
        w.add(vecs.astype(np.float32), ids, text=texts)
        w.close()
    lex = lexicon.LexiconSet(tables={"de-en": lexicon.fit(toy_corpus(400))}, langs={"de-en": 400})
    lexicon_file.save(lex, local / "lexicon.parquet")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("mine-inputs")
    _write_inputs(str(d), d)
    return d


@pytest.fixture(scope="module")
def mine_many(inputs: Path) -> Path:
    """The local path's output: ``mining mine-many`` over both pairs."""
    out = inputs / "mine-many"
    argv = ["mine-many", "--pairs", *PAIRS, *_patterns(str(inputs)), "--output", str(out)]
    assert mining_main([*argv, "--lexicon", str(inputs / "lexicon.parquet"), *CONFIG]) == 0
    return out


def _patterns(root: str) -> list[str]:
    return ["--corpus", f"{root}/sentences/{{lang}}", "--emb", f"{root}/emb/{{lang}}"]


def _job(root: str, out: str, pair: str, *beam: str) -> int:
    argv = ["--pair", pair, *_patterns(root), "--output", out]
    return beam_mine([*argv, "--lexicon", f"{root}/lexicon.parquet", *CONFIG, *beam])


def _assert_pair_equal(a: pa.Table, b: pa.Table) -> None:
    assert a.column_names == b.column_names
    assert a.num_rows == b.num_rows
    for col in a.column_names:
        x, y = a.column(col), b.column(col)
        if pa.types.is_floating(x.type):  # the same shards: equal up to float rounding
            np.testing.assert_allclose(x.to_numpy(), y.to_numpy(), rtol=1e-5, atol=1e-6)
        else:
            assert x.to_pylist() == y.to_pylist(), col


def _assert_stats_equal(a: dict, b: dict) -> None:
    assert a["counts"] == b["counts"] and check_balanced(b) == []
    for key in ("index", "lexicon", "src_lang", "trg_lang", "k", "shard_rows"):
        assert a["config"].get(key) == b["config"].get(key), key


@pytest.mark.slow
def test_one_job_per_pair_on_dask_writes_what_mine_many_writes(
    cluster, inputs, mine_many, tmp_path
):
    beam = dask_args(cluster, 2)
    for pair in PAIRS:
        assert _job(str(inputs), str(tmp_path / pair), pair, *beam) == 0
    assert beam_mine(["--sum-stats", str(tmp_path), "--pairs", *PAIRS, *beam]) == 0
    assert sorted(os.listdir(tmp_path)) == sorted(os.listdir(mine_many))
    for pair in PAIRS:
        assert sorted(os.listdir(tmp_path / pair)) == sorted(os.listdir(mine_many / pair))
        lib, job = (pq.read_table(d / pair / "mined.parquet") for d in (mine_many, tmp_path))
        _assert_pair_equal(lib, job)
        assert {"lex_fwd", "lex_bwd", "src_source", "trg_source"} <= set(job.column_names)
        stats = [json.loads((d / pair / "stats.json").read_text()) for d in (mine_many, tmp_path)]
        _assert_stats_equal(*stats)
    de_en = pq.read_table(tmp_path / "de-en" / "mined.parquet")
    assert de_en.num_rows >= N - 2 and not np.isnan(de_en.column("lex_fwd").to_numpy()).any()
    # The lexicon re-ranked: most German sentences get their translation, not the decoy.
    truth = dict(toy_corpus(N, seed=11))
    assert sum(truth.get(r["src"]) == r["trg"] for r in de_en.to_pylist()) >= N - 2
    fr_en = pq.read_table(tmp_path / "fr-en" / "mined.parquet")  # no dictionaries: NaN
    assert fr_en.num_rows > 0 and np.isnan(fr_en.column("lex_fwd").to_numpy()).all()
    top = [json.loads((d / "stats.json").read_text()) for d in (mine_many, tmp_path)]
    assert top[1]["counts"] == top[0]["counts"] and top[1]["shards"] == top[0]["shards"] == 2
    assert top[1]["stage"] == top[0]["stage"] == "mine-many"


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    with s3_test_server(tmp_path_factory.mktemp("moto-logs"), "run") as (endpoint, client):
        yield endpoint, client


@pytest.mark.slow
def test_the_job_reads_and_writes_the_run_folder_on_s3(s3, mine_many, tmp_path):
    """Stores, sentences and lexicon in the bucket, the pair's folder and stats.json written
    there: the same rows as mine-many's from local files."""
    from labse_common.filesystems import configure

    endpoint, client = s3
    configure(s3_args(endpoint))
    _write_inputs("s3://run/r", tmp_path)
    for f in tmp_path.rglob("*.parquet"):
        client.upload_file(str(f), "run", f"r/{f.relative_to(tmp_path)}")
    beam = [*DIRECT, *s3_args(endpoint)]
    assert _job("s3://run/r", "s3://run/r/mine/de-en", "de-en", *beam) == 0
    assert beam_mine(["--sum-stats", "s3://run/r/mine", "--pairs", "de-en", *beam]) == 0
    keys = client.list_objects_v2(Bucket="run", Prefix="r/mine/")["Contents"]
    files = {
        k["Key"][len("r/mine/") :]: client.get_object(Bucket="run", Key=k["Key"])["Body"].read()
        for k in keys
    }
    assert sorted(files) == sorted(f"de-en/{n}" for n in os.listdir(mine_many / "de-en")) + [
        "stats.json"
    ]
    job = pq.read_table(io.BytesIO(files["de-en/mined.parquet"]))
    _assert_pair_equal(pq.read_table(mine_many / "de-en" / "mined.parquet"), job)
    lib = json.loads((mine_many / "de-en" / "stats.json").read_text())
    _assert_stats_equal(lib, json.loads(files["de-en/stats.json"]))
    assert json.loads(files["stats.json"])["counts"] == lib["counts"]


def test_wrong_forms_exit_2(tmp_path):
    """Each form with its own flags only: one line, exit 2, before any job runs."""
    pat = _patterns(str(tmp_path))
    assert beam_mine(["--pair", "de-en", "--output", str(tmp_path / "o")]) == 2  # no patterns
    assert beam_mine(["--pair", "../de-en", *pat, "--output", str(tmp_path / "o")]) == 2
    assert beam_mine(["--pair", "de-en", "--corpus", "x", "--emb", "y", "--output", "o"]) == 2
    assert (
        beam_mine(["--pair", "de-en", "--corpus", "{x}{lang}", "--emb", "{lang}", "--output", "o"])
        == 2
    )
    assert beam_mine(["--sum-stats", str(tmp_path)]) == 2  # no --pairs
    assert beam_mine(["--sum-stats", str(tmp_path), "--pairs", "de-en", "--output", "o"]) == 2
    assert beam_mine(["--sum-stats", str(tmp_path), "--pairs", "de-en"]) == 2  # no stats.json
    assert beam_mine(["--lexicon", "l", "--src-emb", "a", "--trg-emb", "b", "--output", "o"]) == 2


def _context(out: Path, *sets: str):
    from pipelines.run.config import effective_config
    from pipelines.run.declare import Context

    cfg = effective_config("demo", list(sets))
    ctx = Context(out, out, True, out / "_config.yaml", cfg, on={"lexicon": True})
    return ctx


def test_mine_on_a_beam_runner_is_one_pipelines_mine_job_per_pair(tmp_path):
    from pipelines.run.model_stages import MINE

    opts = "beam.options={dask_client_address: 'tcp://127.0.0.1:1', dask_npartitions: 2}"
    ctx = _context(tmp_path, "beam.runner=DaskRunner", opts)
    assert MINE.engine and MINE.on_engine(ctx)
    cmds = MINE.command_lines(ctx)
    beam = ctx.beam_args
    assert "--runner=DaskRunner" in beam
    assert len(cmds) == len(ctx.pairs) + 1
    for pair, cmd in zip(ctx.pairs, cmds, strict=False):
        assert cmd[1:3] == ["-m", "pipelines.mine"] and cmd[-len(beam) :] == beam
        args = cmd[3 : -len(beam)]
        assert args[args.index("--pair") + 1] == pair
        assert args[args.index("--output") + 1] == str(tmp_path / "mine" / pair)
        assert args[args.index("--corpus") + 1] == str(tmp_path / "sentences/mine/{lang}")
        assert args[args.index("--emb") + 1] == str(tmp_path / "embed/{lang}")
        assert args[args.index("--lexicon") + 1] == str(tmp_path / "lexicon/lexicon.parquet")
        assert "--config" in args
    last = cmds[-1]
    assert last[3:] == ["--sum-stats", str(tmp_path / "mine"), "--pairs", *ctx.pairs, *beam]
    # The run folder on object storage: the jobs are given its URLs, the config stays local.
    ctx.remote = "s3://bucket/run"
    remote = MINE.command_lines(ctx)
    assert remote[0][remote[0].index("--output") + 1] == f"s3://bucket/run/mine/{ctx.pairs[0]}"
    assert remote[0][remote[0].index("--emb") + 1] == "s3://bucket/run/embed/{lang}"
    assert remote[0][remote[0].index("--config") + 1] == str(tmp_path / "_config.yaml")
    # Without a runner: the one local mine-many command, as before.
    local = MINE.command_lines(_context(tmp_path))
    assert len(local) == 1 and local[0][2:4] == ["mining", "mine-many"]
