"""labse_common.forked_main's child starts as ``python -m`` would: environment-derived state of
the parent does not leak into it.

Found by the two-node tests: the test process had configured Beam's ``FileSystems`` from its own
environment (no ``$LABSE_BEAM_OPTIONS``), so the forked launchers saw no S3 endpoint or
credentials although their environment named them."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import pytest

from tests.support.paths import REPO

pytest.importorskip("apache_beam")

OPTIONS = "--s3_endpoint_url http://127.0.0.1:9 --s3_access_key_id k --s3_secret_access_key s"


def test_a_forked_child_reads_beam_options_from_its_own_environment(tmp_path: Path, monkeypatch):
    from labse_common import filesystems as lfs
    from labse_common.forked_main import child_main

    monkeypatch.delenv(lfs.ENV, raising=False)
    lfs.forget_configuration()
    try:
        lfs.filesystems()  # configured here, from an environment without S3 options
        out, status = tmp_path / "out", tmp_path / "rc"
        env = {**os.environ, lfs.ENV: OPTIONS}
        proc = multiprocessing.get_context("fork").Process(
            target=child_main,
            args=("tests.support.print_s3_options", [], env, str(REPO), str(out)),
            kwargs={"status": str(status), "status_format": "rc"},
        )
        proc.start()
        proc.join(60)
        assert status.read_text() == "0", out.read_text()
        seen = json.loads(out.read_text().strip().splitlines()[-1])
        assert seen["s3_endpoint_url"] == "http://127.0.0.1:9" and seen["s3_access_key_id"] == "k"
    finally:
        lfs.forget_configuration()  # later tests configure from their own environment
