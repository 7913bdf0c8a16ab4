"""The contract of every ``python -m filters`` command, on bad input and shared outputs.

* a Parquet input damaged in the middle (footer intact, so it opens): the commands whose pairs
  stand alone (:data:`PER_PAIR`: rules, cds-score, lexicon, apply) read past the damaged row group and
  count its pairs dropped ``damaged_row_group`` (exit 0, balanced stats); the commands whose
  result depends on the whole file (a threshold, a sample, a training set, a margin over
  neighbours, the final export) refuse it: exit 2 and one error line naming the file and the
  flag, no traceback, no output left;
* a second writer to an output folder another job holds: exit 2 and the folder untouched; two
  real processes started together into one folder: exactly one succeeds and the folder holds
  that one's rows under that one's stats.json;
* ``--overwrite`` leaves nothing of the previous run (stale files, temporary folders);
* the pair-file layout is the majority's: a stray third column on line 1 costs one line (counted,
  warned), and a file whose lines mostly do not fit is refused.

Every command ``python -m filters`` lists must have a case here (checked).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from filters.__main__ import commands
from filters.__main__ import main as filters_main
from labse_common.stats import check_balanced
from tests.support.cds_toy import TINY, toy_pairs
from tests.support.paths import REPO as ROOT

SETS = [a for kv in TINY for a in ("--set", kv)]
RULES_FAST = ["--set", "steps=[empty, length]"]  # no LID model: the contract, not the rules
WORDS = ["alpha", "beta", "gamma", "delta", "Haus", "Stadt", "maison", "ville", "río", "город"]
# A damaged input: three row groups of 100 pairs, the middle one damaged. What is read past the
# damage, counted or refused does not depend on the size (3,000 pairs cost cds-score 4 s).
DAMAGED_ROWS = 300
GROUP = DAMAGED_ROWS // 3


# --- inputs ------------------------------------------------------------------------------------


def pairs_table(n: int = 300, seed: int = 0, lang: tuple[str, str] = ("de", "en")) -> pa.Table:
    rng = random.Random(seed)
    src = [" ".join(rng.choice(WORDS) for _ in range(6)) + f" {i}" for i in range(n)]
    trg = [" ".join(rng.choice(WORDS) for _ in range(6)) + f" {i}" for i in range(n)]
    return pa.table(
        {
            "src": src,
            "trg": trg,
            "src_lang": [lang[0]] * n,
            "trg_lang": [lang[1]] * n,
            "margin": pa.array([1.0 + (i % 50) / 100 for i in range(n)], pa.float32()),
            "cds_score": pa.array([(i % 10) / 10 for i in range(n)], pa.float32()),
        }
    )


def damaged_parquet(path: Path, table: pa.Table | None = None, groups: int = 3) -> Path:
    """A snappy Parquet of several row groups with bytes flipped inside the middle group's
    ``src`` pages: the footer is intact (the file opens), reading it fails half-way."""
    table = table if table is not None else pairs_table(3000)
    pq.write_table(
        table,
        path,
        compression="snappy",
        use_dictionary=False,
        row_group_size=max(1, table.num_rows // groups),
    )
    meta = pq.ParquetFile(path).metadata
    col = meta.row_group(meta.num_row_groups // 2).column(0)
    start, size = col.data_page_offset, col.total_compressed_size
    data = bytearray(path.read_bytes())
    for i in range(start + size // 3, start + 2 * size // 3):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))
    pq.ParquetFile(path)  # still opens: the damage is in the middle
    with pytest.raises(OSError):
        pq.read_table(path)
    return path


def _tsv(path: Path, rows) -> Path:
    path.write_text("".join("\t".join(map(str, r)) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict:
    """One set of small valid inputs for every command."""
    d = tmp_path_factory.mktemp("contract")
    table = pairs_table(300)
    pq.write_table(table, d / "scored.parquet")
    (d / "mined" / "de-en").mkdir(parents=True)
    pq.write_table(table, d / "mined" / "de-en" / "mined.parquet")
    rows = table.slice(0, 60).to_pylist()
    _tsv(
        d / "labels.tsv",
        [(r["src"], r["trg"], "GOOD" if r["cds_score"] >= 0.5 else "BAD") for r in rows],
    )
    (d / "threshold.json").write_text(json.dumps({"threshold": 0.5, "score_column": "cds_score"}))
    src, trg = toy_pairs(80, 7)
    _tsv(d / "noisy.tsv", zip(src[:50], trg[:50]))
    _tsv(d / "trusted.tsv", zip(src[50:], trg[50:]))
    (d / "not_a_labse_model").mkdir()
    return {"dir": d, "table": table}


@pytest.fixture(scope="module")
def cds_model(data) -> Path:
    from filters.bitext.cli_cds_train import main as train_main

    d = data["dir"]
    model = d / "cds_model"
    rc = train_main(
        [
            "--noisy",
            str(d / "noisy.tsv"),
            "--trusted",
            str(d / "trusted.tsv"),
            "--output",
            str(model),
            "--threads",
            "1",
            "--log-level",
            "WARNING",
            *SETS,
        ]
    )
    assert rc == 0
    return model


# Each command: argv with the damaged file in place of DAMAGED, and the flag naming it.
def _cases(d: Path, model: str) -> dict[str, tuple[list[str], str]]:
    return {
        "rules": (
            ["--pairs", "DAMAGED", "--src-lang", "de", "--trg-lang", "en", *RULES_FAST],
            "--pairs",
        ),
        "margin-score": (
            ["--model", str(d / "not_a_labse_model"), "--pairs", "DAMAGED"],
            "--pairs",
        ),
        "cds-train": (
            ["--noisy", "DAMAGED", "--trusted", str(d / "trusted.tsv"), *SETS],
            "--noisy",
        ),
        "cds-score": (
            ["--model", model, "--pairs", "DAMAGED", "--threads", "1", "--set", "progress=false"],
            "--pairs",
        ),
        "lexicon": (
            ["--fit", str(d / "trusted.tsv"), "--pairs", "DAMAGED", "--set", "progress=false"],
            "--pairs",
        ),
        "calibrate": (["--scored", "DAMAGED", "--labels", str(d / "labels.tsv")], "--scored"),
        "apply": (["--scored", "DAMAGED", "--threshold", str(d / "threshold.json")], "--scored"),
        "sample": (["--pairs", "DAMAGED", "--n", "20"], "--pairs"),
        "combine": (["--pairs", "DAMAGED", "--labels", str(d / "labels.tsv")], "--pairs"),
        "export": (["--mined", "DAMAGED_DIR"], "--mined"),
    }


def _run(command: str, argv: list[str]) -> int:
    return filters_main([command, *argv, "--log-level", "WARNING"])


def _errors(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]


def test_every_command_has_a_case(data):
    # `label` serves a page on a labelling TSV and writes no output folder:
    # tests/filters/bitext/test_label_page.py and tests/end_to_end/test_cli_contract.py hold its
    # contract.
    assert set(commands()) - {"label"} <= set(_cases(data["dir"], "m")), (
        "add the new command to _cases"
    )


# --- damage in the middle of a Parquet input -----------------------------------------------------


# A pair's decision here does not depend on the other pairs: losing a row group loses those pairs
# only, counted. Elsewhere the lost rows would change every kept row's result (a calibrated
# threshold, a sample's draw, a trained model, margins over neighbours), so damage is refused.
PER_PAIR = ("rules", "cds-score", "lexicon", "apply")
#: Where each PER_PAIR command writes the pairs it read (kept and dropped alike).
PER_PAIR_OUTPUTS = {
    "rules": ("kept.parquet",),
    "cds-score": ("scored.parquet",),
    "lexicon": ("scored.parquet",),
    "apply": ("kept.parquet",),
}


@pytest.mark.slow
@pytest.mark.parametrize("command", PER_PAIR)
def test_mid_file_damage_costs_a_per_pair_command_its_row_group_only(
    command, data, tmp_path, caplog, request
):
    model = str(request.getfixturevalue("cds_model")) if command == "cds-score" else "m"
    argv, _ = _cases(data["dir"], model)[command]
    bad = damaged_parquet(tmp_path / "damaged.parquet", pairs_table(DAMAGED_ROWS))
    argv = [str(bad) if a == "DAMAGED" else a for a in argv]
    out = tmp_path / "out"
    rc = _run(command, [*argv, "--output", str(out)])
    assert rc == 0, _errors(caplog)
    assert "row group 1 damaged" in caplog.text
    stats = json.loads((out / "stats.json").read_text())
    assert not check_balanced(stats), stats["counts"]
    c = stats["counts"]["pairs"]
    assert c["in"] == DAMAGED_ROWS and c["dropped"]["damaged_row_group"] == GROUP, c
    assert stats["counts"]["files"]["out"] == 1
    written = sum(pq.read_metadata(out / f).num_rows for f in PER_PAIR_OUTPUTS[command])
    assert written == c["out"] and c["out"] > 0
    # The pairs read are the first and last groups' (rows 0-99 and 200-299), none of the lost.
    ids = {
        int(s.rsplit(" ", 1)[1])
        for f in PER_PAIR_OUTPUTS[command]
        for s in pq.read_table(out / f, columns=["src"]).column("src").to_pylist()
    }
    assert ids and not ids & set(range(GROUP, 2 * GROUP))


@pytest.mark.parametrize("command", sorted(set(_cases(Path("."), "m")) - set(PER_PAIR)))
def test_mid_file_damaged_parquet_is_one_line_and_exit_2(
    command, data, tmp_path, caplog, capsys, request
):
    model = str(request.getfixturevalue("cds_model")) if command == "cds-score" else "m"
    argv, flag = _cases(data["dir"], model)[command]
    bad = damaged_parquet(tmp_path / "damaged.parquet", pairs_table(DAMAGED_ROWS))
    if "DAMAGED_DIR" in argv:
        (tmp_path / "mined" / "de-en").mkdir(parents=True)
        bad = bad.rename(tmp_path / "mined" / "de-en" / "mined.parquet")
        argv = [str(tmp_path / "mined") if a == "DAMAGED_DIR" else a for a in argv]
    argv = [str(bad) if a == "DAMAGED" else a for a in argv]
    out = tmp_path / "out"
    caplog.clear()
    rc = _run(command, [*argv, "--output", str(out)])
    err = capsys.readouterr().err
    errors = _errors(caplog)
    assert rc == 2, (errors, err)
    assert "Traceback" not in err + caplog.text
    assert len(errors) == 1 and "\n" not in errors[0], errors
    assert str(bad) in errors[0] and flag in errors[0], errors[0]
    assert not out.exists()  # claimed (or not yet), then released: nothing left


# --- a second writer -------------------------------------------------------------------------------


def _valid_argv(command: str, d: Path, model: str) -> list[str]:
    argv, _ = _cases(d, model)[command]
    path = {
        "cds-train": str(d / "noisy.tsv"),
        "calibrate": str(d / "scored.parquet"),
        "apply": str(d / "scored.parquet"),
        "export": str(d / "mined"),
    }.get(command)
    path = path or str(d / "scored.parquet")
    return [path if a in ("DAMAGED", "DAMAGED_DIR") else a for a in argv]


@pytest.mark.parametrize("command", sorted(_cases(Path("."), "m")))
def test_a_held_output_is_busy_and_untouched(command, data, tmp_path, caplog, request):
    """Another job's claim on the folder: exit 2 naming it, nothing written, claim kept."""
    model = str(request.getfixturevalue("cds_model")) if command == "cds-score" else "m"
    out = tmp_path / "out"
    out.mkdir()
    claim = json.dumps({"job_id": "other-job", "host": "elsewhere", "pid": 1})
    (out / "_CLAIM.json").write_text(claim)
    (out / "theirs.txt").write_text("the other job's file")
    caplog.clear()
    rc = _run(
        command, [*_valid_argv(command, data["dir"], model), "--output", str(out), "--overwrite"]
    )
    errors = _errors(caplog)
    assert rc == 2 and len(errors) == 1, errors
    assert "being written by another job" in errors[0] and "other-job" in errors[0]
    assert sorted(p.name for p in out.iterdir()) == ["_CLAIM.json", "theirs.txt"]
    assert (out / "_CLAIM.json").read_text() == claim


ROWS_RACE = 2000


@pytest.mark.slow
def test_two_rules_processes_into_one_folder(tmp_path):
    """The reported case: German and French pairs into one folder at once. One wins; the
    folder holds its rows and its stats.json, never a mix."""
    ins = {}
    # 2,000 pairs keep the winner on its claim for a second or more (the loser's interpreter
    # starts with it); 20,000 cost 8 s of rules on a loaded machine and proved nothing more.
    for lang, seed in (("de", 1), ("fr", 2)):
        ins[lang] = tmp_path / f"{lang}.parquet"
        pq.write_table(pairs_table(ROWS_RACE, seed, (lang, "en")), ins[lang])
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = {
        lang: subprocess.Popen(
            [
                sys.executable,
                "-m",
                "filters",
                "rules",
                "--pairs",
                str(p),
                "--src-lang",
                lang,
                "--trg-lang",
                "en",
                "--output",
                str(out),
                "--write-dropped",
                *RULES_FAST,
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for lang, p in ins.items()
    }
    res = {lang: (p.wait(timeout=300), p.stderr.read()) for lang, p in procs.items()}
    codes = sorted(rc for rc, _ in res.values())
    assert codes == [0, 2], res
    winner = next(lang for lang, (rc, _) in res.items() if rc == 0)
    loser_err = next(err for rc, err in res.values() if rc == 2)
    assert "Traceback" not in loser_err and str(out) in loser_err
    stats = json.loads((out / "stats.json").read_text())
    assert stats["src_lang"] == winner and stats["input"] == str(ins[winner])
    kept = pq.read_table(out / "kept.parquet")
    dropped = pq.read_table(out / "dropped.parquet")
    assert set(kept.column("src_lang").to_pylist()) <= {winner}
    assert kept.num_rows == stats["counts"]["pairs"]["out"]
    assert kept.num_rows + dropped.num_rows == stats["counts"]["pairs"]["in"] == ROWS_RACE
    assert sorted(p.name for p in out.iterdir()) == [
        "dropped.parquet",
        "dropped.tsv.gz",
        "kept.parquet",
        "kept.tsv.gz",
        "stats.json",
    ]


# --- --overwrite ------------------------------------------------------------------------------------


OVERWRITE_FILES = {
    "rules": {"kept.parquet", "kept.tsv.gz", "stats.json"},
    "cds-score": {"scored.parquet", "stats.json"},
    "calibrate": {"threshold.json", "calibration.png", "stats.json"},
    "apply": {"kept.parquet", "kept.tsv.gz", "corpus.de", "corpus.en", "stats.json"},
    "sample": {"sample.tsv", "sample.parquet", "source.json", "stats.json"},
}


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(OVERWRITE_FILES))
def test_overwrite_leaves_nothing_stale(command, data, tmp_path, request):
    """A folder with an earlier run's extra files (rules' dropped.*, a killed job's temporary
    folder) holds exactly this run's files afterwards; without --overwrite it is refused."""
    model = str(request.getfixturevalue("cds_model")) if command == "cds-score" else "m"
    argv = [*_valid_argv(command, data["dir"], model), "--output", str(tmp_path / "out")]
    if command == "calibrate":
        argv += [
            "--set",
            "min_labelled=20",
            "--set",
            "min_kept=5",
            "--bootstrap",
            "20",
        ]
    out = tmp_path / "out"
    out.mkdir()
    for stale in ("dropped.parquet", "labelled.parquet", "stats.json", "rejected.tsv.gz"):
        (out / stale).write_text("from an earlier run")
    (out / "_tmp-killed-job").mkdir()
    (out / "_tmp-killed-job" / "part.parquet").write_text("half")
    assert _run(command, argv) == 2  # not empty, no --overwrite: refused, untouched
    assert (out / "dropped.parquet").read_text() == "from an earlier run"
    assert _run(command, [*argv, "--overwrite"]) == 0
    assert {p.name for p in out.iterdir()} == OVERWRITE_FILES[command]
    stats = json.loads((out / "stats.json").read_text())
    assert not check_balanced(stats)


# --- pair-file layout -------------------------------------------------------------------------------


def test_a_stray_column_on_line_1_costs_one_line(tmp_path, caplog):
    rows = [("Der erste Satz ist hier.", "The first sentence is here.", "stray")]
    rows += [(f"Das ist der Satz Nummer {i}.", f"This is sentence number {i}.") for i in range(50)]
    pairs = _tsv(tmp_path / "pairs.tsv", rows)
    out = tmp_path / "out"
    assert (
        _run(
            "rules",
            [
                "--pairs",
                str(pairs),
                "--src-lang",
                "de",
                "--trg-lang",
                "en",
                "--output",
                str(out),
                *RULES_FAST,
            ],
        )
        == 0
    )
    stats = json.loads((out / "stats.json").read_text())
    assert stats["counts"]["lines"] == {"in": 51, "out": 50, "dropped": {"malformed": 1}}
    assert stats["counts"]["pairs"]["in"] == 50
    assert pq.read_table(out / "kept.parquet").num_rows == 50
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("1 of 51 data lines" in w and "line 1" in w for w in warned), warned


def test_a_file_whose_lines_mostly_do_not_fit_is_refused(tmp_path, caplog):
    rows = [("a", "b")] * 10 + [("a", "b", "c")] * 8 + [("a", "b", "c", "d")] * 7
    pairs = _tsv(tmp_path / "mixed.tsv", rows)
    out = tmp_path / "out"
    rc = _run(
        "rules",
        [
            "--pairs",
            str(pairs),
            "--src-lang",
            "de",
            "--trg-lang",
            "en",
            "--output",
            str(out),
            *RULES_FAST,
        ],
    )
    errors = _errors(caplog)
    assert rc == 2 and len(errors) == 1 and str(pairs) in errors[0] and "--pairs" in errors[0]
    assert "15 of 25 data lines" in errors[0]
    assert not out.exists()


@pytest.mark.parametrize("command", ["rules", "calibrate", "apply"])
def test_parquet_text_that_is_not_utf8_is_one_line(command, data, tmp_path, caplog):
    """pyarrow reads such a column without complaint and fails later with a nameless
    "Invalid UTF8 payload"; here it is one line naming the file, the flag and the column."""
    bad = tmp_path / "bad.parquet"
    src = pa.array([b"fine", b"\xff\xfe not utf-8"], pa.binary())
    pq.write_table(pa.table({"src": src, "trg": ["a", "b"], "cds_score": [0.1, 0.9]}), bad)
    argv = [str(bad) if a == "DAMAGED" else a for a in _cases(data["dir"], "m")[command][0]]
    flag = _cases(data["dir"], "m")[command][1]
    rc = _run(command, [*argv, "--output", str(tmp_path / "out")])
    errors = _errors(caplog)
    assert rc == 2 and len(errors) == 1, errors
    assert (
        str(bad) in errors[0]
        and flag in errors[0]
        and "'src'" in errors[0]
        and "UTF-8" in errors[0]
    )
    assert not (tmp_path / "out").exists()
