"""``labse_model encode`` outputs are claimed like every other output.

* a ``.npy`` has its own ``X.stats.json`` (two in a folder never share one stats.json);
* two writers to one ``.npy``: exactly one wins, the other exits 2; an existing one needs
  ``--overwrite``;
* ``--max-seq-length`` below 3 is one line and exit 2 (encode and the Beam job's driver);
* a file-size limit while writing, or a full disk on a Beam worker, is one line naming the
  output, exit 2, the old output intact.
"""

from __future__ import annotations

import errno
import os
import resource
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from labse_common.stats import check_balanced, read_report  # noqa: E402
from labse_model.__main__ import main  # noqa: E402
from labse_model.tiny import make_tiny_checkpoint  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
LINES = [f"sentence {i} about topic {i % 5}" for i in range(40)]


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    return make_tiny_checkpoint(str(tmp_path_factory.mktemp("tiny")), LINES, hidden=32, layers=1)


@pytest.fixture
def text(tmp_path) -> str:
    p = tmp_path / "in.txt"
    p.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return str(p)


def _encode(tiny: str, inp: str, out: Path, *extra: str) -> int:
    return main(
        ["encode", "--model", tiny, "--input", inp, "--output", str(out), "--no-progress", *extra]
    )


def test_each_npy_has_its_own_stats(tiny, text, tmp_path):
    half = tmp_path / "half.txt"
    half.write_text("\n".join(LINES[:10]) + "\n")
    assert _encode(tiny, text, tmp_path / "emb" / "a.npy") == 0
    assert _encode(tiny, str(half), tmp_path / "emb" / "b.npy") == 0
    assert sorted(os.listdir(tmp_path / "emb")) == [
        "a.npy",
        "a.stats.json",
        "b.npy",
        "b.stats.json",
    ]
    for name, rows in (("a", len(LINES)), ("b", 10)):
        report = read_report(str(tmp_path / "emb" / f"{name}.stats.json"))
        assert check_balanced(report) == [] and report["counts"]["sentences"]["out"] == rows
        assert report["outputs"] == [str(tmp_path / "emb" / f"{name}.npy")]
        assert np.load(tmp_path / "emb" / f"{name}.npy").shape == (rows, 32)


def test_two_writers_to_one_npy_one_wins(tiny, text, tmp_path, caplog):
    out = tmp_path / "x.npy"
    with ThreadPoolExecutor(2) as pool:
        codes = sorted(pool.map(lambda _: _encode(tiny, text, out), range(2)))
    assert codes == [0, 2]  # the loser: busy (it ran alongside) or not empty (it came after)
    assert "being written by another job" in caplog.text or "--overwrite" in caplog.text
    assert np.load(out).shape == (len(LINES), 32)
    assert sorted(os.listdir(tmp_path)) == ["in.txt", "x.npy", "x.stats.json"]
    # While another job holds the claim even --overwrite is refused; the file is untouched.
    before = out.read_bytes()
    claim = (
        tmp_path / "x._CLAIM.json"
    )  # what a file claim (claim_output files=) holds while it writes
    claim.write_text("{}")
    assert _encode(tiny, text, out, "--overwrite") == 2
    claim.unlink()
    assert out.read_bytes() == before
    assert _encode(tiny, text, out) == 2 and "--overwrite" in caplog.text
    assert _encode(tiny, text, out, "--overwrite") == 0


@pytest.mark.parametrize("n", ["1", "2"])
def test_a_max_seq_length_too_short_is_one_line(tiny, text, tmp_path, caplog, n):
    for out in (tmp_path / "s", tmp_path / "x.npy"):
        caplog.clear()
        assert _encode(tiny, text, out, "--max-seq-length", n) == 2
        errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
        assert errors == [
            f"--max-seq-length {n}: must be >= 3 (a sentence needs [CLS] and "
            "[SEP] plus at least one token)"
        ]
        assert not out.exists()


def test_the_beam_job_refuses_a_too_short_max_seq_length(tiny, text, tmp_path, caplog):
    from pipelines.embed import run

    assert (
        run(
            [
                "--input",
                text,
                "--model",
                tiny,
                "--output",
                str(tmp_path / "s"),
                "--max-seq-length",
                "1",
            ]
        )
        == 2
    )
    assert "--max-seq-length 1: must be >= 3" in caplog.text and "Traceback" not in caplog.text
    assert not (tmp_path / "s").exists()


def _limit_file_size() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write raises EFBIG instead of a kill
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 15, 1 << 15))


@pytest.mark.slow
def test_a_file_size_limit_is_one_line_and_the_old_output_stays(tiny, tmp_path):
    """The .npy path (a file claim); a store folder's (a folder claim) is
    tests/labse_common/test_output_commit.py::test_a_file_size_limit_is_exit_2_and_the_old_output_stays."""
    inp = tmp_path / "big.txt"  # 1000 rows x 32 float32 = 128 KB > the 32 KB limit
    inp.write_text("\n".join(LINES * 25) + "\n")
    out = tmp_path / "x.npy"
    small = tmp_path / "small.txt"
    small.write_text("\n".join(LINES[:3]) + "\n")
    assert _encode(tiny, str(small), out) == 0
    before = {p: p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "labse_model",
            "encode",
            "--model",
            tiny,
            "--input",
            str(inp),
            "--output",
            str(out),
            "--no-progress",
            "--overwrite",
            "--device",
            "cpu",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_limit_file_size,
        cwd=ROOT,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "PYTHONDONTWRITEBYTECODE": "1",
            "OMP_NUM_THREADS": "1",
        },
    )
    assert r.returncode == 2, r.stderr[-3000:]
    assert "Traceback" not in r.stderr and "file too large" in r.stderr, r.stderr[-3000:]
    line = [x for x in r.stderr.splitlines() if "file too large" in x]
    assert len(line) == 1 and repr(str(out)) in line[0]
    after = {p: p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()}
    assert after == before


def test_a_full_disk_on_a_beam_worker_is_one_line(tiny, text, tmp_path, caplog, monkeypatch):
    from labse_common import embedding_store
    from labse_model.embed_store import embed_to_store
    from pipelines.embed import run

    out = tmp_path / "s"
    embed_to_store(tiny, text, str(out))
    before = {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    # The in-memory runner runs the workers in this process: their shard writer fails.
    monkeypatch.setattr(embedding_store, "write_pieces", full)
    assert (
        run(
            [
                "--input",
                text,
                "--model",
                tiny,
                "--output",
                str(out),
                "--overwrite",
                "--direct_running_mode",
                "in_memory",
                "--direct_num_workers",
                "1",
            ]
        )
        == 2
    )
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert errors[-1] == (
        f"output {str(out)!r}: no space left on the device while writing it; "
        "nothing was committed and the previous output is unchanged"
    )
    assert {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} == before


@pytest.mark.parametrize("values", [[None, None, None], ["", "  ", None]], ids=["null", "blank"])
def test_a_column_with_no_text_is_exit_2_not_a_store_of_zero_vectors(tiny, tmp_path, values):
    """Every value null or blank: each row would be a zero vector, a store that mines nothing
    (it was written with exit 0). The store path, the .npy path and the Beam job's pre-claim
    check all refuse it in one line naming the input."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from labse_common.errors import InputError
    from labse_model.embed_store import check_readable

    inp = tmp_path / "nulls.parquet"
    pq.write_table(pa.table({"text": pa.array(values, pa.string())}), inp)
    for out in (tmp_path / "store", tmp_path / "v.npy"):
        assert _encode(tiny, str(inp), out) == 2
        assert not out.exists()
    with pytest.raises(InputError, match="no text to embed: every row is null or blank"):
        check_readable([str(inp)])
    pq.write_table(pa.table({"text": pa.array([*values, "one sentence"], pa.string())}), inp)
    check_readable([str(inp)])  # one row of text is enough
    assert _encode(tiny, str(inp), tmp_path / "store") == 0
