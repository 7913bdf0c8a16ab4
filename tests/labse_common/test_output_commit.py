"""The output claim's commit is a rename-swap, and claims nest safely (labse_common/output_dir.py).

* a failure at any step of a commit with ``--overwrite`` leaves the old output as it was, in a
  local folder (``os.replace`` fails at call N) and on S3 (the copy fails at call N);
* a writer into a folder below another live job's claimed output is refused, and so is a job
  with ``--overwrite`` whose output holds another live job's claim below it;
* a full disk or a file-size limit while writing is one line naming the output, exit 2, the old
  output intact.
"""

from __future__ import annotations

import errno
import json
import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from labse_common import output_dir as od
from labse_common.cli import run_main
from labse_common.output_dir import (
    CLAIM,
    OutputBusy,
    OutputDir,
    OutputError,
    claim_output,
)

ROOT = Path(__file__).resolve().parents[2]
OLD = {"a.txt": "old a", "b/c.txt": "old c", "stats.json": '{"old": 1}'}
NEW = {"a.txt": "new a", "d/e.txt": "new e"}


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def _fail_on_call(n: int, real):
    """``real`` that raises on its n-th call only (a transient fault; undoing then works)."""
    calls = {"n": 0}

    def fake(*a, **k):
        calls["n"] += 1
        if calls["n"] == n:
            raise OSError(errno.EIO, "injected fault")
        return real(*a, **k)

    return fake


def _old_output(out: Path) -> None:
    with OutputDir(out).open() as o:
        _write(Path(o.tmp), OLD)


@pytest.mark.parametrize("n", range(1, 6))  # 3 old entries aside + 2 new ones in: 5 renames
def test_a_failed_local_commit_leaves_the_old_output(tmp_path, monkeypatch, n):
    out = tmp_path / "o"
    _old_output(out)
    monkeypatch.setattr(os, "replace", _fail_on_call(n, os.replace))
    with pytest.raises(OSError, match="injected"), OutputDir(out, overwrite=True).open() as o:
        _write(Path(o.tmp), NEW)
    monkeypatch.undo()
    assert _tree(out) == OLD and sorted(os.listdir(out)) == ["a.txt", "b", "stats.json"]
    with OutputDir(out, overwrite=True).open() as o:  # the claim was released; a retry works
        _write(Path(o.tmp), NEW)
    assert _tree(out) == NEW and sorted(os.listdir(out)) == ["a.txt", "d"]


@pytest.mark.parametrize("n", [1, 2, 3])  # the old npy aside, the new npy in, the stats in
def test_a_failed_file_commit_leaves_the_old_file(tmp_path, monkeypatch, n):
    path = str(tmp_path / "x")
    with claim_output(path, files=(".npy", ".stats.json")) as o:
        Path(o.path + ".npy").write_text("old npy")
    monkeypatch.setattr(os, "replace", _fail_on_call(n, os.replace))
    with pytest.raises(OSError, match="injected"):
        with claim_output(path, True, files=(".npy", ".stats.json")) as o:
            Path(o.path + ".npy").write_text("new npy")
            Path(o.path + ".stats.json").write_text("{}")
    monkeypatch.undo()
    assert _tree(tmp_path) == {"x.npy": "old npy"}


def test_a_writer_below_a_claimed_output_is_refused(tmp_path):
    out = tmp_path / "o"
    held = OutputDir(out).claim()
    try:
        for target in (out / "sub", out / "sub" / "deeper"):
            with pytest.raises(OutputBusy, match="inside"):
                OutputDir(target).claim()
        with (
            pytest.raises(OutputBusy, match="inside"),
            claim_output(str(out / "x.npy"), files=("",)),
        ):
            pass
        with pytest.raises(OutputBusy), claim_output(out / "run", resumable=True):
            pass
        # Through the command foundation: one line, exit 2.
        assert run_main(lambda: OutputDir(out / "sub").claim()) == 2
        assert not (out / "sub").exists() and not (out / "x.npy._CLAIM.json").exists()
    finally:
        held.release()
    with OutputDir(out / "sub").open() as o:  # released: now it may
        _write(Path(o.tmp), {"f": "x"})


def test_overwrite_refuses_an_output_holding_a_live_claim_below(tmp_path):
    out = tmp_path / "o"
    _old_output(out)
    inner = OutputDir(out / "b", overwrite=True).claim()  # a live job below
    try:
        with pytest.raises(OutputBusy, match="another job"):
            OutputDir(out, overwrite=True).claim()
    finally:
        inner.release()
    assert _tree(out) == OLD
    # One that appears while the job runs (an unlocked claim naming a live process) stops the
    # commit: the old output and the other job's folder are left as they are.
    with pytest.raises(OutputBusy), OutputDir(out, overwrite=True).open() as o:
        _write(Path(o.tmp), NEW)
        (out / "b" / CLAIM).write_text(
            json.dumps({"job_id": "j", "host": socket.gethostname(), "pid": os.getpid()})
        )
    assert {k: v for k, v in _tree(out).items() if not k.endswith(CLAIM)} == OLD


def test_nested_writers_that_delete_nothing_are_accepted(tmp_path):
    # The stage runner's claim deletes nothing: its stages claim their folders inside it.
    with claim_output(tmp_path / "run", resumable=True):
        with OutputDir(tmp_path / "run" / "stage").open() as o:
            _write(Path(o.tmp), {"f": "x"})
        with claim_output(str(tmp_path / "run" / "concat.parquet"), files=("",)) as c:
            Path(c.path).write_text("x")
    # A job writes inside its own temporary folder.
    with OutputDir(tmp_path / "o").open() as o:
        with OutputDir(Path(o.tmp) / "inner").open() as inner:
            _write(Path(inner.tmp), {"f": "y"})
    assert _tree(tmp_path / "o") == {"inner/f": "y"}
    # A claim left by a killed job (its process gone, nobody holds its lock) blocks nothing.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / CLAIM).write_text(
        json.dumps({"job_id": "k", "host": socket.gethostname(), "pid": dead.pid})
    )
    with OutputDir(tmp_path / "p" / "q").open() as o:
        _write(Path(o.tmp), {"f": "z"})


def test_a_full_disk_is_one_line_naming_the_output(tmp_path, caplog):
    out = tmp_path / "o"
    _old_output(out)

    def body() -> None:
        with OutputDir(out, overwrite=True).open():
            raise OSError(errno.ENOSPC, "No space left on device")

    assert run_main(body) == 2
    assert f"output {str(out)!r}: no space left" in caplog.text and "Traceback" not in caplog.text
    assert _tree(out) == OLD


CHILD = """
import resource, signal, sys
from pathlib import Path
from labse_common.cli import run_main
from labse_common.logs import setup_logging
from labse_common.output_dir import OutputDir, claim_output

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write raises EFBIG instead of killing us
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, 1 << 16))
setup_logging("INFO")
out = sys.argv[1]

def folder():
    with OutputDir(out, overwrite=True).open() as o:
        with open(Path(o.tmp) / "big.bin", "wb") as f:
            f.write(b"x" * (1 << 20))

def file():
    with claim_output(out + "/x", True, files=(".npy",)) as o:
        Path(o.path + ".npy").write_bytes(b"y" * (1 << 20))

sys.exit(run_main(folder if sys.argv[2] == "folder" else file))
"""


@pytest.mark.parametrize("what", ["folder", "file"])
def test_a_file_size_limit_is_exit_2_and_the_old_output_stays(tmp_path, what):
    out = tmp_path / "o"
    _old_output(out)
    if what == "file":
        (out / "x.npy").write_text("old npy")
    before = _tree(out)
    r = subprocess.run(
        [sys.executable, "-c", CHILD, str(out), what],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "file too large" in r.stderr and str(out) in r.stderr
    assert _tree(out) == before


# --- object stores ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    from tests.support.scaleout_util import s3_test_server

    with s3_test_server(tmp_path_factory.mktemp("moto-logs"), "commits") as server:
        yield server


@pytest.fixture
def s3_fs(s3, monkeypatch):
    """FileSystems of this process pointed at the loopback server; restored after."""
    from apache_beam.io.filesystems import FileSystems

    from labse_common.filesystems import configure
    from tests.support.scaleout_util import s3_args

    previous = FileSystems._pipeline_options
    monkeypatch.setenv("LABSE_BEAM_OPTIONS", shlex.join(s3_args(s3[0])))
    configure()
    yield s3[1]
    FileSystems.set_options(previous)


def _objects(client, prefix: str) -> dict[str, str]:
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket="commits", Prefix=prefix):
        for o in page.get("Contents", []):
            body = client.get_object(Bucket="commits", Key=o["Key"])["Body"].read()
            out[o["Key"][len(prefix) :]] = body.decode()
    return out


def _put(o: OutputDir, files: dict[str, str]) -> None:
    from labse_common import filesystems

    for rel, text in files.items():
        with filesystems.create(od.join(o.tmp, rel)) as f:
            f.write(text.encode())


@pytest.mark.parametrize("n", [1, 2, 3])  # a.txt saved aside, then the two new objects copied
def test_a_failed_s3_commit_leaves_the_old_output(s3_fs, monkeypatch, n):
    from labse_common import filesystems

    out = f"s3://commits/run{n}"
    with OutputDir(out).open() as o:
        _put(o, OLD)
    cls = type(filesystems.filesystem(out))
    monkeypatch.setattr(cls, "copy", _fail_on_call(n, cls.copy))
    with pytest.raises(OSError, match="injected"), OutputDir(out, overwrite=True).open() as o:
        _put(o, NEW)
    monkeypatch.undo()
    assert _objects(s3_fs, f"run{n}/") == OLD  # nothing deleted, nothing replaced, no leftovers
    with OutputDir(out, overwrite=True).open() as o:
        _put(o, NEW)
    assert _objects(s3_fs, f"run{n}/") == NEW


def test_full_error_names_only_the_machine_limits():
    assert isinstance(od.full_error("o", OSError(errno.EFBIG, "x")), OutputError)
    assert od.full_error("o", OSError(errno.EIO, "x")) is None


def test_a_clean_up_that_fails_does_not_hide_the_error_that_aborted(
    tmp_path: Path, monkeypatch, caplog
):
    """On a dead server the clean-up of the temporary files fails too; the job's own error is
    the one raised, the clean-up's is a warning, and the claim is released."""

    def broken(*args, **kwargs):
        raise OSError("the server went away")

    monkeypatch.setattr(od.shutil, "rmtree", broken)
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="the job's own failure"):
        with OutputDir(str(out)).open() as o:
            Path(o.tmp, "x.txt").write_text("partial")
            raise ValueError("the job's own failure")
    assert not (out / CLAIM).exists()
    assert any("could not remove the temporary files" in r.getMessage() for r in caplog.records)
