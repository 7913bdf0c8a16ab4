"""The runner's ``--publish`` never writes over what it did not write: a folder
of a user's files, the run folder, its ``bitext/``, ``--data`` and an earlier publication (without
``--publish-overwrite``) are refused before any stage runs, with one line and exit status 2, the
destination left byte for byte as it was; ``publish_bitext`` on a finished run folder replaces
only the files the earlier manifest lists and removes its staging folder however it ends.

The refusals run with ``--dry-run``: the destination is checked before the plan, the same place
as before the first stage of a real run. S3 destinations through the runner are in
tests/pipelines/test_run_own_data.py (a loopback moto server)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from labse_common.errors import UsageError
from labse_common.publish import MANIFEST, publish
from tests.support.paths import REPO

MARKER = "_PUBLISHING.json"  # a publication under way (labse_common.publish.MARKER)

# A run on a user's data folder (not the demo's synthetic sample), so that --data applies.
CONFIG = """extends: demo
sources:
  commoncrawl: ["crawl/*.warc.wet.gz"]
  wikipedia: []
  pairs: ["parallel/*.{src}-{trg}.tsv"]
  demo: null
  label_from: person
mining:
  pairs: [de-en]
"""


def snapshot(folder: Path) -> dict[str, bytes]:
    if not folder.exists():
        return {}
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


def write(root: Path, files: dict[str, bytes]) -> dict[str, bytes]:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    data, run = tmp_path / "data", tmp_path / "runs" / "de-en"
    write(data, {"crawl/a.warc.wet.gz": b"", "parallel/train.de-en.tsv": b"Hallo\tHello\n"})
    write(run, {"bitext/bitext.tsv.gz": b"an earlier run's bitext"})
    (tmp_path / "run.yaml").write_text(CONFIG)
    return {"data": data, "run": run, "config": tmp_path / "run.yaml", "tmp": tmp_path}


def argv(layout: dict[str, Path], *extra: str) -> list[str]:
    return [
        "--config",
        str(layout["config"]),
        "--data",
        str(layout["data"]),
        "--output",
        str(layout["run"]),
        "--dry-run",
        *extra,
    ]


def runner(layout: dict[str, Path], caplog, capsys, *extra: str) -> tuple[int, list[str], str]:
    """The runner's main in this process: its exit status, its error lines, its stdout."""
    from pipelines.run.cli import main

    caplog.clear()
    with caplog.at_level(logging.INFO):
        rc = main(argv(layout, *extra))
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    return rc, errors, capsys.readouterr().out


def earlier_publication(tmp: Path, dest: Path) -> None:
    write(tmp / "earlier", {"bitext.tsv.gz": b"published before", "hf/README.md": b"---\n"})
    publish(tmp / "earlier", str(dest))


@pytest.mark.parametrize(
    "case", ["users-folder", "run", "run/bitext", "data", "data/pub", "earlier-publication"]
)
def test_refused_before_any_stage_with_the_destination_as_it_was(layout, caplog, capsys, case):
    tmp = layout["tmp"]
    dest, words = {
        "users-folder": (tmp / "mine", ["not empty", "no earlier publication"]),
        "run": (layout["run"], ["is the run folder", "--output"]),
        "run/bitext": (layout["run"] / "bitext", ["is inside the run folder", "--output"]),
        "data": (layout["data"], ["is the --data folder"]),
        "data/pub": (layout["data"] / "pub", ["is inside the --data folder"]),
        "earlier-publication": (tmp / "pub", ["earlier publication", "--publish-overwrite"]),
    }[case]
    if case == "users-folder":
        write(dest, {"bitext.tsv.gz": b"the user's own", "stats.json": b"{}", "x/y.txt": b"y"})
    if case == "earlier-publication":
        earlier_publication(tmp, dest)
    before = {p: snapshot(p) for p in (dest, layout["run"], layout["data"])}
    rc, errors, out = runner(layout, caplog, capsys, "--publish", str(dest))
    assert rc == 2 and len(errors) == 1, errors
    assert str(dest) in errors[0] and all(w in errors[0] for w in words), errors[0]
    assert "\n" not in errors[0] and out == ""  # no plan: nothing went past the check
    assert {p: snapshot(p) for p in before} == before
    assert sorted(os.listdir(layout["run"])) == ["bitext"]  # no stage, no claim, no config


def test_publish_overwrite_lets_an_earlier_publication_be_replaced(layout, caplog, capsys):
    dest = layout["tmp"] / "pub"
    earlier_publication(layout["tmp"], dest)
    rc, errors, out = runner(layout, caplog, capsys, "--publish", str(dest), "--publish-overwrite")
    assert rc == 0 and not errors and "bitext" in out, errors
    rc, errors, _ = runner(layout, caplog, capsys, "--publish-overwrite")
    assert rc == 2 and errors == ["--publish-overwrite: needs --publish URL"], errors


def test_the_command_line_is_one_line_and_exit_2(layout):
    """The same refusal from ``python -m pipelines.run``: stderr is one line, no traceback."""
    dest = layout["tmp"] / "mine"
    write(dest, {"stats.json": b"{}"})
    env = {**os.environ, "PYTHONPATH": str(REPO), "AWS_EC2_METADATA_DISABLED": "true"}
    p = subprocess.run(
        [sys.executable, "-m", "pipelines.run", *argv(layout, "--publish", str(dest))],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and p.stdout == "", p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and f"--publish {dest}: is not empty" in lines[0], p.stderr
    assert (dest / "stats.json").read_bytes() == b"{}"


# -- publish_bitext: the run's own publication step -------------------------------------------


def finished_run(tmp: Path) -> tuple[object, Path]:
    from pipelines.run.declare import Context

    run = tmp / "run"
    write(
        run,
        {
            "bitext/bitext.tsv.gz": b"pairs v1",
            "bitext/stats.json": b'{"v": 1}',
            "bitext/hf/README.md": b"---\n",
            "report/report.html": b"<html>v1</html>",
        },
    )
    ctx = Context(out=run, base=tmp, synthetic=False, config_file=run / "_config.yaml", cfg={})
    return ctx, run


def test_publish_bitext_replaces_only_the_listed_files(tmp_path):
    from pipelines.run.loop import publish_bitext

    ctx, run = finished_run(tmp_path)
    dest = tmp_path / "pub"
    guard = {"the run folder, --output": run}
    publish_bitext(ctx, str(dest), protected=guard)
    got = snapshot(dest)
    assert got.pop(MANIFEST) and got == {
        "bitext.tsv.gz": b"pairs v1",
        "stats.json": b'{"v": 1}',
        "hf/README.md": b"---\n",
        "report/report.html": b"<html>v1</html>",
    }
    assert not (run / "_publish").exists()

    write(dest, {"notes.txt": b"the user's notes"})
    write(run, {"bitext/bitext.tsv.gz": b"pairs v2", "report/report.html": b"<html>v2</html>"})
    (run / "bitext" / "hf" / "README.md").unlink()
    before = snapshot(dest)
    with pytest.raises(UsageError, match="--publish-overwrite"):
        publish_bitext(ctx, str(dest), protected=guard)
    assert snapshot(dest) == before and not (run / "_publish").exists()

    publish_bitext(ctx, str(dest), overwrite=True, protected=guard)
    got = snapshot(dest)
    assert got.pop(MANIFEST) and got == {
        "bitext.tsv.gz": b"pairs v2",
        "stats.json": b'{"v": 1}',
        "report/report.html": b"<html>v2</html>",
        "notes.txt": b"the user's notes",
    }
    assert not (dest / "hf").exists() and not (run / "_publish").exists()


def test_the_staging_folder_goes_when_publishing_fails(tmp_path):
    from pipelines.run.loop import publish_bitext

    ctx, run = finished_run(tmp_path)
    # A report/ inside bitext/ (what publishing into bitext/ used to leave): one line, no
    # FileExistsError, and no _publish/ left for the next publication to trip over.
    write(run, {"bitext/report/report.html": b"stale", "_publish/junk": b"a killed runner's"})
    with pytest.raises(UsageError) as e:
        publish_bitext(ctx, str(tmp_path / "pub"))
    assert "\n" not in str(e.value) and str(run / "bitext" / "report") in str(e.value)
    assert not (run / "_publish").exists() and not (tmp_path / "pub").exists()
    (run / "bitext" / "report" / "report.html").unlink()
    (run / "bitext" / "report").rmdir()

    # A failure inside the publication (a new file on a user's file): the same.
    dest = tmp_path / "pub"
    earlier_publication(tmp_path, dest)
    write(dest, {"stats.json": b"the user's stats"})
    before = snapshot(dest)
    with pytest.raises(UsageError, match="would replace stats.json"):
        publish_bitext(ctx, str(dest), overwrite=True)
    assert snapshot(dest) == before and not (run / "_publish").exists()
    assert MARKER not in before
