"""An interrupted commit always recovers (labse_common/commit_journal.py).

A child process replaces an old output with ``--overwrite`` and is stopped by SIGINT, SIGTERM or
SIGKILL right after each step of the swap (``LABSE_COMMIT_FAULT``: the journal written, every
move, the journal marked done, the clean-up). After the next job that claims the output (a job
that then fails, or the same command rerun) the output reads back whole: exactly the old files
or exactly the new ones, with no ``_tmp-``/``_old-`` folder or journal left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from labse_common.cli import run_main
from labse_common.commit_journal import JOURNAL
from labse_common.output_dir import CLAIM, OutputDir, OutputError, claim_output
from tests.labse_common import test_output_commit as commits
from tests.support.paths import REPO as ROOT

OLD = {"a.txt": "old a", "b/c.txt": "old c", "stats.json": '{"old": 1}'}
NEW = {"a.txt": "new a", "d/e.txt": "new e"}
OLD_FILES = {"x.npy": "old npy", "x.stats.json": "old stats"}
NEW_FILES = {"x.npy": "new npy", "x.stats.json": "new stats"}

CHILD = """
import json, signal, sys
from pathlib import Path
from labse_common.output_dir import claim_output

# Ctrl-C as in a terminal, also when the tests run in the background (SIGINT ignored there).
signal.signal(signal.SIGINT, signal.default_int_handler)

out, kind, files = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
if kind == "folder":
    with claim_output(out, True) as o:
        for rel, text in files.items():
            (Path(o.path) / rel).parent.mkdir(parents=True, exist_ok=True)
            (Path(o.path) / rel).write_text(text)
else:
    with claim_output(out + "/x", True, files=(".npy", ".stats.json")) as o:
        for rel, text in files.items():
            Path(o.path + rel[1:]).write_text(text)
"""


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def _child(out: Path, kind: str, files: dict, fault: str | None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("LABSE_COMMIT_FAULT", None)
    if fault:
        env["LABSE_COMMIT_FAULT"] = fault
    return subprocess.run(
        [sys.executable, "-c", CHILD, str(out), kind, json.dumps(files)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=env,
    )


# Folder: 3 old entries aside + 2 new ones in = 5 moves; files: 2 aside + 2 in = 4.
POINTS = {
    "folder": ["journal:1"] + [f"move:{i}" for i in range(1, 6)] + ["done:1", "clean:1"],
    "files": ["journal:1"] + [f"move:{i}" for i in range(1, 5)] + ["done:1", "clean:1"],
}
CASES = [
    (kind, point, sig)
    for kind, points in POINTS.items()
    for point in points
    for sig in ("INT", "TERM", "KILL")
]


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "point", "sig"), CASES)
def test_a_commit_stopped_at_any_step_leaves_old_or_new_whole(tmp_path, kind, point, sig):
    out = tmp_path / "o"
    old, new = (OLD, NEW) if kind == "folder" else (OLD_FILES, NEW_FILES)
    assert _child(out, kind, old, None).returncode == 0
    assert _tree(out) == old

    r = _child(out, kind, new, f"{point}:{sig}")
    if sig == "KILL":
        assert r.returncode == -signal.SIGKILL, r.stderr
    elif sig == "TERM":
        assert r.returncode == -signal.SIGTERM, r.stderr
    else:  # Ctrl-C: KeyboardInterrupt unwinds the commit in the process itself
        assert r.returncode == -signal.SIGINT and "KeyboardInterrupt" in r.stderr, r.stderr

    # The next job that claims the output (and fails: it commits nothing) repairs it.
    target = out if kind == "folder" else out / "x"
    od = OutputDir(
        target, overwrite=True, files=None if kind == "folder" else (".npy", ".stats.json")
    )
    od.claim()
    od.abort()
    got = _tree(out)
    assert got in (old, new), (got, r.stderr)
    assert not [n for n in os.listdir(out) if n.startswith(("_tmp-", "_old-", "_COMMIT", CLAIM))]
    if sig == "INT" and not point.startswith("clean"):
        assert got == old  # a commit that failed in the process puts the old output back

    # The same command rerun finishes the job.
    assert _child(out, kind, new, None).returncode == 0
    assert _tree(out) == new


@pytest.mark.parametrize("sig", ["TERM", "KILL"])
def test_the_same_command_rerun_recovers_a_killed_commit(tmp_path, sig):
    out = tmp_path / "o"
    assert _child(out, "folder", OLD, None).returncode == 0
    r = _child(out, "folder", NEW, f"move:3:{sig}")  # two old entries aside, one still in place
    assert r.returncode < 0
    assert (out / JOURNAL).exists() and (out / CLAIM).exists()  # what the kill left
    assert _child(out, "folder", NEW, None).returncode == 0
    assert _tree(out) == NEW
    assert sorted(os.listdir(out)) == ["a.txt", "d"]


def test_a_job_without_overwrite_gets_the_old_output_back_and_refuses(tmp_path, caplog):
    """The next job need not be the same command: one without --overwrite rolls the killed
    commit back, then refuses the non-empty output with one line (exit 2)."""
    out = tmp_path / "o"
    assert _child(out, "folder", OLD, None).returncode == 0
    assert _child(out, "folder", NEW, "move:4:KILL").returncode < 0  # all old aside, one new in

    def body() -> int:
        with claim_output(out):
            pass
        return 0

    assert run_main(body) == 2
    assert "is not empty" in caplog.text and "Traceback" not in caplog.text
    assert _tree(out) == OLD
    assert sorted(os.listdir(out)) == ["a.txt", "b", "stats.json"]


def test_an_aside_folder_without_a_journal_is_never_deleted(tmp_path, caplog):
    """An older version's interrupted commit left ``_old-<job>`` with no journal: it holds the
    only copy of part of the previous output, so a job with --overwrite refuses (one line)
    instead of deleting it with the rest."""
    out = tmp_path / "o"
    assert _child(out, "folder", OLD, None).returncode == 0
    aside = out / "_old-20261128T120000-4242-abcdef"
    aside.mkdir()
    os.replace(out / "a.txt", aside / "a.txt")

    def body() -> int:
        with claim_output(out, True) as o:
            (Path(o.path) / "n.txt").write_text("n")
        return 0

    assert run_main(body) == 2
    assert "_old-20261128T120000-4242-abcdef" in caplog.text and "Traceback" not in caplog.text
    assert (aside / "a.txt").read_text() == "old a"


def test_a_journal_that_cannot_be_read_is_one_line(tmp_path, caplog):
    out = tmp_path / "o"
    assert _child(out, "folder", OLD, None).returncode == 0
    (out / JOURNAL).write_text("{not json")

    def body() -> int:
        with claim_output(out, True):
            pass
        return 0

    assert run_main(body) == 2
    assert "journal" in caplog.text and "Traceback" not in caplog.text
    assert {k: v for k, v in _tree(out).items() if k != JOURNAL} == OLD


def test_stale_temporary_folders_of_killed_jobs_are_removed(tmp_path):
    out = tmp_path / "o"
    assert _child(out, "folder", OLD, None).returncode == 0
    stale = out / "_tmp-20261128T120000-4242-abcdef"
    stale.mkdir()
    (stale / "half.parquet").write_text("half")
    with pytest.raises(OutputError, match="not empty"):  # the old output is still there
        with claim_output(out):
            pass
    assert not stale.exists() and _tree(out) == OLD


# --- object stores: the same rule ------------------------------------------------------------

REMOTE_CHILD = """
import json, sys
from labse_common import filesystems
from labse_common.filesystems import configure, join
from labse_common.output_dir import claim_output

configure()
out, files = sys.argv[1], json.loads(sys.argv[2])
with claim_output(out, True) as o:
    for rel, text in files.items():
        with filesystems.create(join(o.path, rel)) as f:
            f.write(text.encode())
"""


def _remote_child(s3, out: str, files: dict, fault: str | None) -> int:
    import shlex

    from tests.support.scaleout_util import s3_args

    env = {**os.environ, "PYTHONPATH": str(ROOT), "AWS_EC2_METADATA_DISABLED": "true"}
    env["LABSE_BEAM_OPTIONS"] = shlex.join(s3_args(s3[0]))
    env.pop("LABSE_COMMIT_FAULT", None)
    if fault:
        env["LABSE_COMMIT_FAULT"] = fault
    cmd = [sys.executable, "-c", REMOTE_CHILD, out, json.dumps(files)]
    return subprocess.run(cmd, capture_output=True, timeout=120, cwd=ROOT, env=env).returncode


# The S3 server, FileSystems pointed at it and the object listing of the rename-swap tests.
s3, s3_fs, _objects = commits.s3, commits.s3_fs, commits._objects

# One old name replaced (saved aside: 1 copy), then 2 new objects copied in: 3 copies.
REMOTE_POINTS = ["journal:1", "move:1", "move:2", "move:3", "done:1", "clean:1"]


def _remote_commit(out: str, files: dict) -> None:
    from labse_common import filesystems
    from labse_common.filesystems import join

    with claim_output(out, True) as o:
        for rel, text in files.items():
            with filesystems.create(join(o.path, rel)) as f:
                f.write(text.encode())


@pytest.mark.slow
@pytest.mark.parametrize("point", REMOTE_POINTS)
def test_a_killed_s3_commit_leaves_old_or_new_whole(s3, s3_fs, point):
    out = f"s3://commits/journal-{point.replace(':', '')}"
    prefix = out[len("s3://commits/") :] + "/"
    _remote_commit(out, OLD)
    assert _objects(s3_fs, prefix) == OLD
    assert _remote_child(s3, out, NEW, f"{point}:KILL") == -signal.SIGKILL
    # An object store's claim cannot be judged stale: a person deletes it (the message says
    # so); the next job then finishes the killed commit before anything else.
    s3_fs.delete_object(Bucket="commits", Key=prefix + CLAIM)
    od = OutputDir(out, overwrite=True)
    od.claim()
    od.abort()
    got = _objects(s3_fs, prefix)
    assert got in (OLD, NEW), got
    _remote_commit(out, NEW)
    assert _objects(s3_fs, prefix) == NEW
