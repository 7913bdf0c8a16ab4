"""The one reader of the labelling TSV (:mod:`filters.bitext.label_sheet`), through every command
that reads labels with it: a line break left inside a cell by another tool and a cell longer than
csv's 128 KiB field limit are read as the pair text they are, never a ``csv.Error`` traceback.
``python -m filters label`` start-up is in ``test_label_page.py``; here
``filters combine --labels`` and the runner's labels stage, plus the runner's rewrite of the
person's labels file through a symbolic link.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from filters.bitext import cli_combine
from filters.bitext.label_match import write_rows
from filters.bitext.label_sheet import read_sheet
from filters.bitext.sample import read_labels
from labse_common.errors import InputError

#: Longer than csv's default field_size_limit (131072 characters).
LONG = "Ein sehr langer Satz " + "x" * 200_000
#: A mined text with a carriage return in it, and the cell as the writer flattens it.
CR_TEXT, CR_CELL = "Zeile eins\rZeile zwei", "Zeile eins Zeile zwei"


def _write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8"))  # bytes: no newline translation of the test's text
    return path


def test_a_lone_cr_in_a_cell_is_the_space_the_writer_would_have_written(tmp_path):
    # CRLF line ends (a Windows editor's save) around it stay line ends.
    f = _write(tmp_path / "s.tsv", f"src\ttrg\tlabel\r\n{CR_TEXT}\thello\tGOOD\r\nb\tc\tBAD\r\n")
    sheet = read_sheet(f)
    assert sheet.rows == [[CR_CELL, "hello", "GOOD"], ["b", "c", "BAD"]]
    assert sheet.labels == ["GOOD", "BAD"] and sheet.lines == [2, 3]


def test_a_cell_longer_than_csvs_limit_is_read_whole(tmp_path):
    f = _write(tmp_path / "s.tsv", f"src\ttrg\tlabel\n{LONG}\thello\tgood\n")
    sheet = read_sheet(f)
    assert sheet.rows[0][0] == LONG and sheet.labels == ["GOOD"]


def test_cr_only_line_ends_are_line_ends(tmp_path):
    # A file with no LF at all: a classic Mac spreadsheet's export, one row per CR.
    text = "\r".join(["src\ttrg\tlabel", "a\tb\tGOOD", "", "c\td\tBAD"]) + "\r"
    sheet = read_sheet(_write(tmp_path / "s.tsv", "\ufeff" + text))
    assert sheet.bom and sheet.rows == [["a", "b", "GOOD"], ["c", "d", "BAD"]]
    assert sheet.lines == [2, 4]


def test_a_row_still_named_by_its_line_when_wrong(tmp_path):
    f = _write(tmp_path / "s.tsv", f"src\ttrg\tlabel\r\n{LONG}\tb\tGOOD\r\nc\td\r\n")
    with pytest.raises(InputError) as e:
        read_sheet(f, "--labels")
    assert str(e.value) == f"--labels {f}: line 3: 2 fields, the header has 3"


# --- filters combine --labels --------------------------------------------------------------------


def _pairs(n: int = 60) -> pa.Table:
    """Mined pairs whose margin separates GOOD from BAD; row 0 has a CR, row 1 a long source."""
    src = [CR_TEXT, LONG] + [f"Quelle {i}" for i in range(2, n)]
    return pa.table(
        {
            "src": src,
            "trg": [f"target {i}" for i in range(n)],
            "margin": [1.0 + (0.3 if i % 2 == 0 else 0.0) + i / 1000 for i in range(n)],
        }
    )


@pytest.mark.slow  # about 2 s: combine's imports (the calibration plot's matplotlib)
def test_combine_reads_labels_with_a_cr_and_a_long_cell(tmp_path, caplog):
    table = _pairs()
    pairs = tmp_path / "pairs.parquet"
    pq.write_table(table, pairs)
    # The sample as another tool wrote it: the CR left raw in its cell.
    rows = [
        f"{i}\t{s}\t{t}\t{'GOOD' if i % 2 == 0 else 'BAD'}\n"
        for i, (s, t) in enumerate(zip(table["src"].to_pylist(), table["trg"].to_pylist()))
    ]
    labels = _write(tmp_path / "sample.tsv", "sample_id\tsrc\ttrg\tlabel\n" + "".join(rows))
    out = tmp_path / "combined"
    argv = ["--pairs", str(pairs), "--labels", str(labels), "--output", str(out)]
    flags = ["--features", "margin", "--set", "bootstrap=10", "--set", "per_pair=false"]
    rc = cli_combine.main([*argv, *flags, "--log-level", "WARNING"])
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert rc == 0, errors
    counts = json.loads((out / "stats.json").read_text())["counts"]["labelled_pairs"]
    assert counts["in"] == counts["out"] == 60
    got, blank = read_labels(labels)
    assert blank == 0 and got["src"].to_pylist()[:2] == [CR_CELL, LONG]


# --- the runner's labels stage ------------------------------------------------------------------


def _runner_inputs(tmp_path: Path, person: Path, hostile: bool = True) -> list[str]:
    """The labels stage's arguments: a 4-pair sample of 4 candidates, and the person's file
    with all four labelled (``hostile``: a raw CR in one cell, a long cell in another)."""
    src = [CR_TEXT, LONG] if hostile else ["Quelle 0", "Quelle 1"]
    src += ["Quelle 2", "Quelle 3"]
    trg = ["target 0", "target 1", "target 2", "target 3"]
    sample = pa.table({"sample_id": [0, 1, 2, 3], "src": src, "trg": trg})
    pq.write_table(sample, tmp_path / "sample.parquet")
    pq.write_table(sample.select(["src", "trg"]), tmp_path / "candidates.parquet")
    labs = ["GOOD", "BAD", "GOOD", "BAD"]
    body = "".join(f"{s}\t{t}\t{lab}\n" for s, t, lab in zip(src, trg, labs))
    _write(person, "src\ttrg\tlabel\n" + body)
    return [
        "--log-level",
        "WARNING",
        "labels",
        "--sample",
        str(tmp_path / "sample.parquet"),
        "--candidates",
        str(tmp_path / "candidates.parquet"),
        "--file",
        str(person),
        "--output",
        str(tmp_path / "labels_out"),
        "--min-labelled",
        "100",  # more than there are: the stage says what it read and stops (exit 3)
    ]


def test_runner_labels_stage_reads_a_cr_and_a_long_cell(tmp_path, capfd):
    from pipelines import e2e_tasks

    person = tmp_path / "labels.tsv"
    rc = e2e_tasks.main(_runner_inputs(tmp_path, person))
    err = capfd.readouterr().err
    assert rc == 3, err
    assert "Traceback" not in err and "4 of the 4 sampled pairs" in err, err
    assert "4 labels match mined pairs (2 GOOD, 2 BAD)" in err, err
    # The file it rewrote holds the flattened CR and the whole long cell, and reads again.
    sheet = read_sheet(person)
    col = sheet.header.index("src")
    assert [r[col] for r in sheet.rows] == [CR_CELL, LONG, "Quelle 2", "Quelle 3"]
    assert sheet.labels == ["GOOD", "BAD", "GOOD", "BAD"]


def test_runner_rewrites_a_linked_labels_file_through_the_link(tmp_path, capfd):
    from pipelines import e2e_tasks

    real = tmp_path / "kept" / "my_labels.tsv"
    real.parent.mkdir()
    link = tmp_path / "labels.tsv"
    args = _runner_inputs(tmp_path, real, hostile=False)
    link.symlink_to(real)
    args[args.index("--file") + 1] = str(link)
    assert e2e_tasks.main(args) == 3, capfd.readouterr().err
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text(encoding="utf-8").startswith("sample_id\t")  # rewritten by the stage
    assert [p.name for p in real.parent.iterdir()] == ["my_labels.tsv"]  # no temporary left


def test_write_rows_through_a_link_keeps_the_link_and_the_mode(tmp_path):
    real = tmp_path / "real.tsv"
    _write(real, "src\ttrg\tlabel\n")
    real.chmod(0o640)
    link = tmp_path / "link.tsv"
    link.symlink_to(real.name)  # a relative link, as `ln -s real.tsv link.tsv` makes
    assert write_rows(link, ["src", "trg", "label"], [{"src": "a", "trg": "b", "label": "GOOD"}])
    assert link.is_symlink() and real.read_text() == "src\ttrg\tlabel\na\tb\tGOOD\n"
    assert real.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.tsv", "real.tsv"]
