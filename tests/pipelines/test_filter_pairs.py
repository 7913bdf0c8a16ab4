"""The Beam job pipelines.filter_pairs: same kept pairs and counts as `python -m filters rules`."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from filters.__main__ import main as filters_main
from labse_common.stats import check_balanced
from pipelines.filter_pairs import run
from tests.filters.bitext.test_pair_rules import CRAFTED, GOOD
from tests.support.paths import REPO

TATOEBA = REPO.parent / "shared" / "data" / "tatoeba"
BEAM = ["--direct_running_mode", "in_memory", "--direct_num_workers", "1"]


@pytest.fixture()
def inputs(tmp_path: Path) -> list[Path]:
    """A TSV.gz of crafted and real pairs (with a malformed line) and a mining-style Parquet."""
    pairs = [GOOD] + [p for p, _, _ in CRAFTED]
    if (TATOEBA / "train.deu-eng.deu").is_file():
        de = (TATOEBA / "train.deu-eng.deu").read_text(encoding="utf-8").splitlines()[:150]
        en = (TATOEBA / "train.deu-eng.eng").read_text(encoding="utf-8").splitlines()[:150]
        real = list(zip(en, de))
    else:
        real = [(f"Sentence number {i} is fine.", f"Satz Nummer {i} ist gut.") for i in range(150)]
    tsv = tmp_path / "a.tsv.gz"
    with gzip.open(tsv, "wt", encoding="utf-8") as f:
        f.writelines(f"{a}\t{b}\n" for a, b in pairs + real[:100])
        f.write("broken line\n")
    par = tmp_path / "b.parquet"
    rest = real[100:]
    pq.write_table(
        pa.table(
            {
                "src": [a for a, _ in rest],
                "trg": [b for _, b in rest],
                "src_lang": ["en"] * len(rest),
                "trg_lang": ["de"] * len(rest),
                "margin": pa.array([1.1] * len(rest), pa.float32()),
            }
        ),
        par,
    )
    return [tsv, par]


def _rows(paths) -> list[tuple[str, str]]:
    return sorted(
        (r["src"], r["trg"])
        for p in paths
        for r in pq.read_table(p, columns=["src", "trg"]).to_pylist()
    )


def test_beam_job_gives_the_same_pairs_and_counts_as_the_cli(inputs, tmp_path):
    beam_out = tmp_path / "beam"
    rc = run(
        [
            "--input",
            str(tmp_path / "*.tsv.gz"),
            str(tmp_path / "*.parquet"),
            "--output",
            str(beam_out),
            "--src-lang",
            "en",
            "--trg-lang",
            "de",
            "--write-dropped",
            "--batch-rows",
            "40",
            *BEAM,
        ]
    )
    assert rc == 0
    rep = json.loads((beam_out / "stats.json").read_text())
    assert not check_balanced(rep) and not check_balanced({"counts": rep["steps"]})
    assert rep["counts"]["files"] == {"in": 2, "out": 2, "dropped": {}}
    assert rep["counts"]["lines"]["dropped"] == {"malformed": 1}

    cli_kept, cli_counts = [], {"in": 0, "out": 0, "dropped": {}}
    cli_steps: dict = {}
    for i, path in enumerate(inputs):
        out = tmp_path / f"cli{i}"
        assert (
            filters_main(
                [
                    "rules",
                    "--pairs",
                    str(path),
                    "--src-lang",
                    "en",
                    "--trg-lang",
                    "de",
                    "--output",
                    str(out),
                ]
            )
            == 0
        )
        cli_kept.append(out / "kept.parquet")
        c = json.loads((out / "stats.json").read_text())
        cli_counts["in"] += c["counts"]["pairs"]["in"]
        cli_counts["out"] += c["counts"]["pairs"]["out"]
        for k, v in c["counts"]["pairs"]["dropped"].items():
            cli_counts["dropped"][k] = cli_counts["dropped"].get(k, 0) + v
        for name, s in c["steps"].items():
            cli_steps.setdefault(name, []).append(s["out"])
    beam_kept = sorted((beam_out / "kept").glob("*.parquet"))
    assert _rows(beam_kept) == _rows(cli_kept)
    assert rep["counts"]["pairs"] == cli_counts
    assert {n: s["out"] for n, s in rep["steps"].items()} == {
        n: sum(v) for n, v in cli_steps.items()
    }
    dropped = [
        r
        for p in sorted((beam_out / "dropped").glob("*.parquet"))
        for r in pq.read_table(p).to_pylist()
    ]
    assert sorted(r["reason"] for r in dropped) == sorted(
        k for k, n in cli_counts["dropped"].items() for _ in range(n)
    )
    assert {r["reason"] for r in dropped} >= {r for _, _, r in CRAFTED}
    assert rep["summary"]["by_lang_pair"]["en-de"]["in"] == cli_counts["in"]
    with gzip.open(sorted((beam_out / "kept").glob("*.tsv.gz"))[0], "rt", encoding="utf-8") as f:
        assert f.readline().count("\t") >= 1


def test_beam_job_bad_arguments_are_clear_errors(tmp_path, caplog):
    def errors() -> list[str]:
        got = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
        caplog.clear()
        return got

    out = str(tmp_path / "o")
    assert run(["--input", str(tmp_path / "none*.tsv"), "--output", out, *BEAM]) == 2
    err = errors()
    assert len(err) == 1 and "no input matches" in err[0] and "--input" in err[0]
    (tmp_path / "x.tsv").write_text("a\tb\n")
    assert (
        run(["--input", str(tmp_path / "x.tsv"), "--output", out, "--cds-threshold", "0.5", *BEAM])
        == 2
    )
    assert "--cds-model" in errors()[0]
    assert (
        run(["--input", str(tmp_path / "x.tsv"), "--output", out, "--set", "max_ratio=0", *BEAM])
        == 2
    )
    assert "max_ratio" in errors()[0]
    assert (
        run(["--input", str(tmp_path / "x.tsv"), "--output", out, "--batch-rows", "0", *BEAM]) == 2
    )
    assert "--batch-rows" in errors()[0]
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_beam_job_survives_a_damaged_file_and_claims_its_output(inputs, tmp_path, caplog):
    """A Parquet damaged in the middle loses that row group only (counted ``damaged_row_group``;
    the rest is read); a file with no footer is counted (files: unreadable) and the job goes on
    with the others; the output is claimed: a held folder is exit 2, --overwrite leaves no stale
    file."""
    from tests.filters.test_cli_contract import damaged_parquet, pairs_table

    bad = damaged_parquet(tmp_path / "c.parquet", pairs_table(3000, lang=("en", "de")))
    junk = tmp_path / "d.parquet"
    junk.write_bytes(b"PAR1 not really parquet")
    out = tmp_path / "beam"
    args = [
        "--input",
        str(inputs[1]),
        str(bad),
        str(junk),
        "--output",
        str(out),
        "--set",
        "steps=[empty, length]",
        "--batch-rows",
        "500",
        *BEAM,
    ]
    assert run(args) == 0
    rep = json.loads((out / "stats.json").read_text())
    assert rep["counts"]["files"] == {
        "in": 3,
        "out": 2,
        "dropped": {"unreadable": 1},
        "events": {"damaged_row_groups": 1},
    }
    assert rep["counts"]["pairs"]["dropped"]["damaged_row_group"] == 1000
    assert not check_balanced(rep) and not check_balanced({"counts": rep["steps"]})
    # Counted and survived: warnings naming the files, and the unreadable one in stats.json.
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(str(bad) in m and "row group 1" in m for m in warned), warned
    assert any(str(junk) in m for m in warned), warned
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
    assert [u["path"] for u in rep["unreadable"]] == [str(junk)]
    # The file read in part is named too, with what it lost.
    assert rep["damaged"] == [
        {
            "path": str(bad),
            "pairs_read": 2000,
            "row_groups_lost": 1,
            "pairs_lost": 1000,
            "truncated_gzip": False,
        }
    ]
    kept = [
        r for p in sorted((out / "kept").glob("*.parquet")) for r in pq.read_table(p).to_pylist()
    ]
    assert len(kept) == rep["counts"]["pairs"]["out"] > 0
    assert not [p.name for p in out.iterdir() if p.name.startswith(("_tmp-", "_CLAIM"))]

    (out / "_CLAIM.json").write_text('{"job_id": "other-job"}')
    caplog.clear()
    assert run([*args, "--overwrite"]) == 2
    assert any("other-job" in r.getMessage() for r in caplog.records if r.levelname == "ERROR")
    (out / "_CLAIM.json").unlink()
    (out / "kept" / "part-99999-00000.parquet").write_text("stale")
    assert run(args) == 2  # not empty, no --overwrite
    assert (
        run(
            [
                *args[:2],
                "--output",
                str(out),
                "--set",
                "steps=[empty, length]",
                *BEAM,
                "--overwrite",
            ]
        )
        == 0
    )
    assert not (out / "kept" / "part-99999-00000.parquet").exists()
    rep2 = json.loads((out / "stats.json").read_text())
    assert rep2["counts"]["files"] == {"in": 1, "out": 1, "dropped": {}}
    parts = sorted((out / "kept").glob("*.parquet"))
    assert sum(pq.read_metadata(p).num_rows for p in parts) == rep2["counts"]["pairs"]["out"]


@pytest.mark.slow
def test_beam_job_cds_path(inputs, tmp_path):
    """With a trained CDS scorer directory the kept pairs get cds_score, and --cds-threshold
    drops as cds_below_threshold (filters.bitext.cds is another engineer's module: skipped until it
    is merged)."""
    pytest.importorskip(
        "filters.bitext.cds.score", reason="filters.bitext.cds is not on this branch yet"
    )
    fit = pytest.importorskip(
        "filters.bitext.cds.fit",
        reason="filters.bitext.cds.fit (train_cds) is not on this branch yet",
    )
    from labse_common.config import ConfigError, load

    if not (TATOEBA / "train.deu-eng.deu").is_file():
        pytest.skip(f"Tatoeba sample not found under {TATOEBA}")
    de = (TATOEBA / "train.deu-eng.deu").read_text(encoding="utf-8").splitlines()
    en = (TATOEBA / "train.deu-eng.eng").read_text(encoding="utf-8").splitlines()
    tiny = [
        "noisy_epochs=1",
        "clean_epochs=1",
        "model.d_model=16",
        "model.ffn_dim=32",
        "model.encoder_layers=1",
        "model.decoder_layers=1",
        "model.attention_heads=2",
        "vocab_size=400",
        "progress=false",
        "threads=1",
    ]
    try:
        cfg = load("cds", "demo", tiny)
    except ConfigError as e:
        pytest.skip(f"the demo preset's cds section does not take the tiny-model settings: {e}")
    model = str(tmp_path / "cds")
    n_trusted, n_noisy = int(cfg.min_trusted), int(cfg.min_noisy)
    fit.train_cds((en[:n_noisy], de[:n_noisy]), (en[-n_trusted:], de[-n_trusted:]), cfg, model)
    out = tmp_path / "beam"
    rc = run(
        [
            "--input",
            str(inputs[1]),
            "--output",
            str(out),
            "--cds-model",
            model,
            "--cds-threshold=-1e9",
            *BEAM,
        ]
    )
    assert rc == 0
    kept = pq.read_table(sorted((out / "kept").glob("*.parquet"))[0])
    assert "cds_score" in kept.column_names and kept.column("cds_score").null_count == 0
    rep = json.loads((out / "stats.json").read_text())
    assert rep["steps"]["cds"]["in"] == rep["steps"]["cds"]["out"] == kept.num_rows > 0


def test_a_cut_gzip_is_read_to_the_cut_and_named_in_the_report(tmp_path):
    """A TSV.gz cut short keeps the pairs before the cut; stats.json names the file under
    ``damaged`` (a whole file is not listed there)."""
    whole = tmp_path / "whole.tsv.gz"
    with gzip.open(whole, "wt", encoding="utf-8") as f:
        f.writelines(
            f"Sentence number {i} is fine.\tSatz Nummer {i} ist gut.\n" for i in range(4000)
        )
    cut = tmp_path / "cut.tsv.gz"
    data = whole.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    out = tmp_path / "o"
    args = [
        "--input",
        str(whole),
        str(cut),
        "--output",
        str(out),
        "--src-lang",
        "en",
        "--trg-lang",
        "de",
        "--set",
        "steps=[empty]",
        *BEAM,
    ]
    assert run(args) == 0
    rep = json.loads((out / "stats.json").read_text())
    assert not check_balanced(rep)
    [d] = rep["damaged"]
    assert d["path"] == str(cut) and d["truncated_gzip"] and d["row_groups_lost"] == 0
    assert 0 < d["pairs_read"] < 4000
    assert rep["counts"]["pairs"]["in"] == 4000 + d["pairs_read"]
