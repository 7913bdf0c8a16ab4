"""Messages name the committed output, not the temporary folder the commit removes:
a corpus job that skipped bad input points at OUTPUT/stats.json, not OUTPUT/_tmp-<job>/...."""

from __future__ import annotations

import os

import pytest

from pipelines import commoncrawl
from tests.support.corpus_fixtures import make_bad_cc_inputs

BEAM = ["--direct_running_mode", "in_memory", "--direct_num_workers", "1"]


@pytest.mark.slow
def test_the_bad_input_warning_names_the_committed_stats(tmp_path, caplog):
    files = make_bad_cc_inputs(tmp_path / "in")
    out = tmp_path / "cc"
    argv = [
        "--input",
        str(files["good"]),
        "--input",
        str(files["empty"]),
        "--output",
        str(out),
        *BEAM,
    ]
    assert commoncrawl.main(argv) == 0
    warning = [r.getMessage() for r in caplog.records if "bad input was skipped" in r.getMessage()]
    assert len(warning) == 1 and "_tmp-" not in warning[0], warning
    assert f"(see {os.path.join(out, 'stats.json')})" in warning[0]
    assert (out / "stats.json").exists()
