"""``python -m filters cds-train`` and ``cds-score``: outputs, stats, and bad input (exit 2)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from filters.bitext.cli_cds_score import main as score_main
from filters.bitext.cli_cds_train import main as train_main
from labse_common.stats import check_balanced
from tests.support.cds_toy import TINY, toy_pairs
from tests.support.paths import REPO as ROOT

SETS = [a for kv in TINY for a in ("--set", kv)]


def _tsv(path: Path, src, trg, extra_lines: str = "") -> Path:
    path.write_text(
        "".join(f"{s}\t{t}\n" for s, t in zip(src, trg)) + extra_lines, encoding="utf-8"
    )
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    src, trg = toy_pairs(100, 7)
    # Noisy file: a malformed line (three fields among two-field lines) and an empty side.
    noisy = _tsv(d / "noisy.tsv", src[:70], trg[:70], "bad\tline\thas three\n \tempty source\n")
    # Trusted file gzipped and cut short: the readable part is used, the cut counted.
    blob = gzip.compress("".join(f"{s}\t{t}\n" for s, t in zip(src[70:], trg[70:])).encode())
    trusted = d / "trusted.tsv.gz"
    trusted.write_bytes(blob[: len(blob) - 12])
    model = d / "model"
    rc = train_main(
        [
            "--noisy",
            str(noisy),
            "--trusted",
            str(trusted),
            "--output",
            str(model),
            "--bidirectional",
            "--threads",
            "1",
            *SETS,
        ]
    )
    assert rc == 0
    return d, model


def test_train_outputs_and_stats(trained):
    _, model = trained
    stats = json.loads((model / "stats.json").read_text())
    assert not check_balanced(stats)
    c = stats["counts"]
    assert c["noisy_pairs"] == {
        "in": 71,
        "out": 70,
        "dropped": {"empty_side": 1},
        "events": c["noisy_pairs"].get("events", {}),
    }
    assert c["noisy_pairs_lines"]["dropped"] == {"malformed": 1}
    assert c["trusted_pairs_lines"]["events"]["truncated_gzip"] == 1
    assert 25 <= c["trusted_pairs"]["out"] <= 30
    assert stats["directions"] == ["fwd", "bwd"]
    meta = json.loads((model / "cds.json").read_text())
    assert meta["config"]["bidirectional"] is True and meta["noisy_pairs"] == 70


def test_score_keeps_columns_and_text(trained, capsys):
    d, model = trained
    src, trg = toy_pairs(30, 9)
    src[0] = "  le chat .  "  # scored text stays exactly as given
    table = pa.table(
        {
            "src": src,
            "trg": trg,
            "margin": pa.array(np.linspace(1, 2, 30), pa.float32()),
            "src_lang": ["fr"] * 30,
        }
    )
    pq.write_table(table, d / "pairs.parquet")
    # The labelled sample scored in the same run, into the same folder (one model load, one
    # stats.json counting both).
    labelled = _tsv(d / "labelled.tsv", src[:12], trg[:12])
    folder = d / "scored"
    rc = score_main(
        [
            "--model",
            str(model),
            "--pairs",
            str(d / "pairs.parquet"),
            "--output",
            str(folder),
            "--labelled",
            str(labelled),
            "--batch-rows",
            "7",
            "--threads",
            "1",
            "--set",
            "progress=false",
        ]
    )
    assert rc == 0, capsys.readouterr().err
    assert sorted(p.name for p in folder.iterdir()) == [
        "labelled.parquet",
        "scored.parquet",
        "stats.json",
    ]
    scored = pq.read_table(folder / "scored.parquet")
    assert scored.column_names == [
        "src",
        "trg",
        "margin",
        "src_lang",
        "cds_score",
        "xent_clean",
        "cds_score_bwd",
        "xent_clean_bwd",
        "dual_xent",
    ]
    assert scored.column("src").to_pylist() == src and scored.column("trg").to_pylist() == trg
    dx = scored.column("dual_xent").to_numpy()
    assert np.isfinite(scored.column("cds_score").to_numpy()).all() and ((dx > 0) & (dx <= 1)).all()
    lab = pq.read_table(folder / "labelled.parquet")
    assert lab.num_rows == 12 and "cds_score" in lab.column_names
    np.testing.assert_allclose(
        lab.column("cds_score").to_numpy()[1:],
        scored.column("cds_score").to_numpy()[1:12],
        rtol=1e-4,
    )
    stats = json.loads((folder / "stats.json").read_text())
    assert not check_balanced(stats)
    assert stats["counts"]["pairs"]["in"] == stats["counts"]["pairs"]["out"] == 30
    assert stats["counts"]["labelled_pairs"] == {"in": 12, "out": 12, "dropped": {}}
    assert stats["counts"]["labelled_pairs_lines"]["out"] == 12


def test_trusted_set_too_small_is_exit_2(tmp_path, capsys, caplog):
    src, trg = toy_pairs(40, 3)
    noisy = _tsv(tmp_path / "n.tsv", src[:30], trg[:30])
    trusted = _tsv(tmp_path / "t.tsv", src[30:], trg[30:])
    rc = train_main(
        [
            "--noisy",
            str(noisy),
            "--trusted",
            str(trusted),
            "--output",
            str(tmp_path / "m"),
            *SETS,
            "--set",
            "min_trusted=20",
        ]
    )
    assert rc == 2
    err = capsys.readouterr().err + caplog.text
    assert "trusted set has 10 usable pairs; at least 20" in err and "Traceback" not in err
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize(
    "problem", ["missing_pairs", "missing_model", "not_a_model", "bad_config", "output_file"]
)
def test_score_bad_input_is_exit_2(trained, tmp_path, capsys, caplog, problem):
    d, model = trained
    pairs = _tsv(tmp_path / "p.tsv", ["a"], ["b"])
    args = {"--model": str(model), "--pairs": str(pairs), "--output": str(tmp_path / "s")}
    extra = []
    if problem == "missing_pairs":
        args["--pairs"] = str(tmp_path / "none.tsv")
    elif problem == "missing_model":
        args["--model"] = str(tmp_path / "no_model")
    elif problem == "not_a_model":
        args["--model"] = str(d)
    elif problem == "output_file":  # the old form: --output is a folder now
        args["--output"] = str(tmp_path / "s.parquet")
    else:
        extra = ["--set", "score_batch_size=0"]
    rc = score_main([x for kv in args.items() for x in kv] + extra)
    assert rc == 2
    err = capsys.readouterr().err + caplog.text
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "Traceback" not in err
    flag = {
        "missing_pairs": "--pairs",
        "missing_model": "--model",
        "not_a_model": "--model",
        "bad_config": "score_batch_size",
        "output_file": "--output",
    }[problem]
    assert flag in errors[0]
    assert not (tmp_path / "s").exists() and not (tmp_path / "s.parquet").exists()


@pytest.mark.slow
def test_help_via_python_m():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for cmd in ("cds-train", "cds-score", "calibrate", "apply"):
        res = subprocess.run(
            [sys.executable, "-m", "filters", cmd, "--help"],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=120,
        )
        assert res.returncode == 0 and "--output" in res.stdout, res.stderr


def test_train_from_a_local_pretrained_checkpoint(trained, tmp_path):
    """--init: any local seq2seq checkpoint dir with its tokenizer is the starting point."""
    import shutil

    _, model = trained
    init = tmp_path / "pretrained"
    shutil.copytree(model / "fwd" / "clean", init)
    for f in model.iterdir():
        if f.is_file() and f.name not in ("cds.json", "stats.json"):
            shutil.copy(f, init / f.name)
    src, trg = toy_pairs(40, 13)
    noisy = _tsv(tmp_path / "n.tsv", src[:25], trg[:25])
    trusted = _tsv(tmp_path / "t.tsv", src[25:], trg[25:])
    out = tmp_path / "m"
    rc = train_main(
        [
            "--noisy",
            str(noisy),
            "--trusted",
            str(trusted),
            "--output",
            str(out),
            "--init",
            str(init),
            *SETS,
            "--set",
            "noisy_epochs=1",
        ]
    )
    assert rc == 0
    meta = json.loads((out / "cds.json").read_text())
    assert meta["config"]["init"] == str(init)
    base = json.loads((init / "config.json").read_text())
    got = json.loads((out / "fwd" / "noisy" / "config.json").read_text())
    assert (got["d_model"], got["vocab_size"]) == (base["d_model"], base["vocab_size"])
    from filters.bitext.cds.model import load_tokenizer

    assert load_tokenizer(str(out)).get_vocab() == load_tokenizer(str(init)).get_vocab()
    assert (
        train_main(
            [
                "--noisy",
                str(noisy),
                "--trusted",
                str(trusted),
                "--output",
                str(tmp_path / "m2"),
                "--init",
                str(tmp_path / "missing"),
                *SETS,
            ]
        )
        == 2
    )


def test_train_output_is_exclusive(trained, tmp_path, caplog):
    """cds-train claims its output like every stage: a folder another job holds, or a non-empty
    one without --overwrite, is exit 2 and left as it was; --overwrite replaces it whole."""
    d, _ = trained
    src, trg = toy_pairs(60, 5)
    noisy = _tsv(tmp_path / "n.tsv", src[:40], trg[:40])
    trusted = _tsv(tmp_path / "t.tsv", src[40:], trg[40:])
    out = tmp_path / "m"
    out.mkdir()
    (out / "_CLAIM.json").write_text('{"job_id": "other"}')
    args = [
        "--noisy",
        str(noisy),
        "--trusted",
        str(trusted),
        "--output",
        str(out),
        "--threads",
        "1",
        *SETS,
        "--set",
        "min_trusted=10",
        "--set",
        "min_noisy=10",
    ]
    assert train_main(args) == 2
    assert "being written by another job" in caplog.text
    assert sorted(p.name for p in out.iterdir()) == ["_CLAIM.json"]
    (out / "_CLAIM.json").unlink()
    (out / "stale.txt").write_text("old")
    caplog.clear()
    assert train_main(args) == 2
    assert "not empty" in caplog.text and (out / "stale.txt").exists()
    assert train_main([*args, "--overwrite"]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert "stale.txt" not in names and "stats.json" in names
    assert not [n for n in names if n.startswith(("_tmp-", "_CLAIM"))]
