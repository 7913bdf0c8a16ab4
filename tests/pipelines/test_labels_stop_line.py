"""The runner's labels stop line (exit 3) says how to label: for a local run folder the page or
any editor; for a run folder on object storage the page, named with the file's URL, is the
safe way (an editor needs the file downloaded, edited and uploaded back)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from labse_common.cli import EXIT_NEEDS_LABELS
from pipelines.run.execute import StageFailed
from pipelines.run.loop import _stop_status


def _stop(tmp_path: Path, remote: str | None, capsys) -> str:
    out = tmp_path / "scratch"
    out.mkdir()
    line = (
        f"labels needed: 0 of the 300 sampled pairs in {out}/labels.tsv are labelled and 0 "
        "labels match mined pairs (0 GOOD, 0 BAD); the filter needs at least 30, with 5 of "
        f"each: label them with `python -m filters label {out}/labels.tsv` (or fill its label "
        "column with GOOD or BAD in any editor)"
    )
    ctx = SimpleNamespace(out=out, remote=remote, folder=None)
    plan = SimpleNamespace(stage=SimpleNamespace(name="labels"))
    failed = StageFailed("labels", EXIT_NEEDS_LABELS, out / "labels.log", ["x", line])
    assert _stop_status(ctx, plan, failed, {}) == EXIT_NEEDS_LABELS
    (err,) = capsys.readouterr().err.splitlines()
    return err


def test_a_local_labels_file_may_be_filled_in_any_editor(tmp_path, capsys):
    err = _stop(tmp_path, None, capsys)
    assert f"python -m filters label {tmp_path}/scratch/labels.tsv" in err
    assert "in any editor" in err


def test_a_remote_labels_file_is_labelled_on_the_page(tmp_path, capsys):
    err = _stop(tmp_path, "s3://runs/own/", capsys)
    assert "python -m filters label s3://runs/own/labels.tsv" in err
    assert "in any editor" not in err and str(tmp_path) not in err
    assert "the page is the safe way" in err
    assert "download the file" in err and "upload it back to the same URL" in err
