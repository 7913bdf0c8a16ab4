"""``python -m pipelines.mine --workdir`` that is a file: one line and exit 2, before Beam starts
(it was a traceback from ``os.makedirs`` inside the job)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from labse_common.errors import UsageError
from mining.bounded import check_workdir
from pipelines.mine import run


def test_a_workdir_that_is_a_file_is_one_line_and_exit_2(tmp_path: Path, caplog) -> None:
    emb = tmp_path / "x.npy"
    np.save(emb, np.eye(4, dtype=np.float32))
    file = tmp_path / "work"
    file.write_text("not a folder")
    rc = run(
        [
            "--src-emb",
            str(emb),
            "--trg-emb",
            str(emb),
            "--output",
            str(tmp_path / "out"),
            "--workdir",
            str(file),
        ]
    )
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert rc == 2 and errors == [f"--workdir {file}: {file} is a file, not a folder"]
    assert not (tmp_path / "out").exists()


def test_the_library_refuses_a_workdir_below_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    with pytest.raises(UsageError, match="is a file, not a folder"):
        check_workdir(str(tmp_path / "f" / "deeper"), "workdir")
    check_workdir(str(tmp_path / "new" / "deeper"), "workdir")  # a folder yet to be made is fine
