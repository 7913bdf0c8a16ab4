"""One pair reader: only labse_common/pair_files.py opens pair files (TSV, Parquet, Moses).

Sources, filters and training once read pair files three ways (labse_common/sources.py,
filters/bitext/pair_io.py, labse_model/stream.py), each with its own gzip, UTF-8 and Parquet
handling. Now they call :mod:`labse_common.pair_files`; this test keeps it so.
"""

from __future__ import annotations

import ast
import gzip
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("labse_common", "labse_model", "mining", "filters", "pipelines")
THE_READER = "labse_common/pair_files.py"
# Modules that read bytes of data files with these calls, and why they are not pair readers.
ALLOWED = {
    THE_READER: "the one pair reader",
    "filters/bitext/label_sheet.py": "the labelling sheet's reader (src, trg, label: its own format)",
}


def _call_name(node: ast.Call) -> tuple[str | None, str | None]:
    f = node.func
    if isinstance(f, ast.Attribute):
        base = f.value.id if isinstance(f.value, ast.Name) else None
        return base, f.attr
    if isinstance(f, ast.Name):
        return None, f.id
    return None, None


def _mode(node: ast.Call, default: str) -> str:
    if len(node.args) > 1 and isinstance(node.args[1], ast.Constant):
        return str(node.args[1].value)
    for k in node.keywords:
        if k.arg == "mode" and isinstance(k.value, ast.Constant):
            return str(k.value.value)
    return default


_WORDS = (
    "GzipFile",
    "gzip.open",
    "zip_longest",
    "pq.",
    "open_read",
    '"rb"',
    "iter_parquet",
    "read_row_group",
)


def reading_calls(tree: ast.AST) -> set[str]:
    """The calls that read a data file's lines or rows: gzip opened for reading, two files
    zipped line by line (Moses), a Parquet file opened or read whole, bytes opened raw."""
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        base, name = _call_name(node)
        if name == "GzipFile" and "w" not in _mode(node, "rb") and "a" not in _mode(node, "rb"):
            found.add("gzip.GzipFile")
        elif base == "gzip" and name == "open" and "r" in _mode(node, "rb"):
            found.add("gzip.open")
        elif name == "zip_longest":
            found.add("zip_longest")
        elif base == "pq" and name in ("ParquetFile", "read_table"):
            found.add(f"pq.{name}")
        elif name == "open_read":
            found.add("filesystems.open_read")
        elif base is None and name == "open" and _mode(node, "r") == "rb":
            found.add('open(..., "rb")')
        elif name in ("iter_parquet_counted", "iter_parquet_batches", "read_row_group_surviving"):
            found.add(name)
    return found


def handles_pairs(tree: ast.AST) -> bool:
    """A module that names both pair columns, ``"src"`` and ``"trg"``, handles pairs."""
    names = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)}
    return {"src", "trg"} <= names


def pair_readers(root: Path) -> dict[str, list[str]]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            if not any(word in text for word in _WORDS):  # parse only the modules that may read
                continue
            tree = ast.parse(text)
            calls = reading_calls(tree)
            if calls and handles_pairs(tree):
                out[path.relative_to(root).as_posix()] = sorted(calls)
    return out


def test_only_the_reader_opens_pair_files():
    others = {p: c for p, c in pair_readers(ROOT).items() if p not in ALLOWED}
    assert not others, (
        "modules that handle pairs and read data files themselves (use labse_common.pair_files): "
        f"{others}"
    )
    found = pair_readers(ROOT)
    assert THE_READER in found  # the check still sees the reader's own calls
    # An exception that no longer reads anything is a stale entry: the list says only what is true.
    stale = sorted(set(ALLOWED) - set(found))
    assert not stale, f"ALLOWED names modules the scan no longer flags: {stale}"


# --- the reader's behaviour --------------------------------------------------------------------

PAIRS = [("Guten Morgen", "Bonjour"), ("Danke schön", "Merci"), ("Wie geht's?", "Ça va ?")]


def _forms(tmp: Path):
    from labse_common.pair_files import PairFile

    tsv = tmp / "de-fr.tsv"
    tsv.write_text("src\ttrg\n" + "".join(f"{s}\t{t}\n" for s, t in PAIRS), encoding="utf-8")
    gz = tmp / "de-fr.tsv.gz"
    gz.write_bytes(gzip.compress(tsv.read_bytes()))
    par = tmp / "de-fr.parquet"
    pq.write_table(pa.table({"src": [s for s, _ in PAIRS], "trg": [t for _, t in PAIRS]}), par)
    de, fr = tmp / "train.de-fr.de", tmp / "train.de-fr.fr"
    de.write_text("".join(s + "\n" for s, _ in PAIRS), encoding="utf-8")
    fr.write_text("".join(t + "\n" for _, t in PAIRS), encoding="utf-8")
    return [
        PairFile("de", "fr", "tsv", (str(tsv),), "x"),
        PairFile("de", "fr", "tsv", (str(gz),), "x"),
        PairFile("de", "fr", "parquet", (str(par),), "x"),
        PairFile("de", "fr", "moses", (str(de), str(fr)), "x"),
    ]


def test_tsv_parquet_and_moses_forms_give_the_same_pairs(tmp_path):
    from labse_common.pair_files import read_pairs_file
    from labse_common.stats import StageCounter, check_balanced

    for pf in _forms(tmp_path):
        counter = StageCounter()
        assert list(read_pairs_file(pf, counter)) == PAIRS, pf
        assert not check_balanced(counter.to_report("t"))
        assert counter.counts["pairs/out"] == 3


def test_damage_is_counted_by_reason_and_the_readable_part_read(tmp_path):
    from labse_common.pair_files import surviving_lines, text_lines
    from labse_common.stats import StageCounter, check_balanced

    good = "".join(f"{s}\t{t}\n" for s, t in PAIRS).encode()
    data = good + b"bad \xff\tbyte\n\n" + good * 500
    cut = tmp_path / "cut.tsv.gz"
    cut.write_bytes(gzip.compress(data)[:-30])  # the gzip's tail (and its last line) lost
    counter = StageCounter()
    got = [text for _, text in surviving_lines(str(cut), counter, "lines")]
    counter.add_out("lines", len(got))  # the caller counts what it keeps
    assert got[:3] == [f"{s}\t{t}" for s, t in PAIRS]
    assert 1000 < len(got) < 3 + 1500  # what was readable before the cut
    counts = counter.counts
    assert counts["lines/dropped/bad_utf8"] == 1 and counts["lines/dropped/blank"] == 1
    assert counts["lines/event/truncated_gzip"] == 1
    assert not check_balanced(counter.to_report("t"))
    # Training's reading of the same bytes: the bad byte replaced, the cut raised after the
    # readable lines (the scan counts it).
    lines = []
    with pytest.raises((EOFError, OSError)):
        lines.extend(line for line, _ in text_lines(str(cut)))
    assert "bad \ufffd\tbyte\n" in lines


def test_an_empty_file_gives_no_pair_and_a_damaged_parquet_is_named(tmp_path):
    from labse_common.errors import InputError
    from labse_common.pair_files import PairFile, read_pairs_file
    from labse_common.stats import StageCounter

    empty = tmp_path / "de-fr.tsv"
    empty.write_bytes(b"")
    counter = StageCounter()
    assert list(read_pairs_file(PairFile("de", "fr", "tsv", (str(empty),), "x"), counter)) == []
    bad = tmp_path / "de-fr.parquet"
    bad.write_bytes(b"PAR1 not a table")
    with pytest.raises(InputError, match="de-fr.parquet"):
        list(read_pairs_file(PairFile("de", "fr", "parquet", (str(bad),), "x"), counter))
