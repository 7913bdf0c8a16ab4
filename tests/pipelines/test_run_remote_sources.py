"""Remote source files are fingerprinted: a ``sources.pairs`` glob on object storage enters the
``inputs`` stage's cache key by its listing (each object's name, size and time), so a replaced or
added remote pairs file reruns ``inputs``, and an unchanged one does not (loopback S3 server)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest

from labse_common import filesystems
from pipelines.run.corpus_stages import INPUTS
from pipelines.run.plan import _file_part, _sha

pytestmark = pytest.mark.slow  # starts a loopback S3 server (seconds)


@pytest.fixture
def s3(tmp_path):
    from tests.support.scaleout_util import s3_args, s3_test_server

    with s3_test_server(tmp_path / "moto", "data") as (endpoint, client):
        old = os.environ.get(filesystems.ENV)
        os.environ[filesystems.ENV] = shlex.join(s3_args(endpoint))
        filesystems.forget_configuration()
        try:
            yield client
        finally:
            if old is None:
                os.environ.pop(filesystems.ENV, None)
            else:
                os.environ[filesystems.ENV] = old
            filesystems.forget_configuration()


def _files_part(ctx) -> dict[str, str]:
    """The ``files`` part of the stage's cache key, as pipelines.run.plan makes it."""
    return {os.path.basename(f): _sha(_file_part(f, ctx)) for f in INPUTS.files(ctx)}


def test_a_changed_remote_pairs_file_changes_the_inputs_key(s3, tmp_path: Path):
    local = tmp_path / "eval.tsv"
    local.write_text("a\tb\n")
    sources = {"pairs": ["s3://data/pairs/*.tsv"], "eval": [str(local)], "text": []}
    ctx = SimpleNamespace(
        base=tmp_path,
        out=tmp_path / "run",
        remote=None,
        synthetic=False,
        demo=None,
        sources=sources,
    )
    s3.put_object(Bucket="data", Key="pairs/de-en.tsv", Body=b"Haus\thouse\n")
    first = _files_part(ctx)
    assert "*.tsv" in first and "eval.tsv" in first
    assert _files_part(ctx) == first  # the same listing, the same key

    s3.put_object(Bucket="data", Key="pairs/de-en.tsv", Body=b"Haus\thouse\nBaum\ttree\n")
    replaced = _files_part(ctx)
    assert replaced["*.tsv"] != first["*.tsv"] and replaced["eval.tsv"] == first["eval.tsv"]

    s3.put_object(Bucket="data", Key="pairs/fr-en.tsv", Body=b"maison\thouse\n")
    added = _files_part(ctx)
    assert added["*.tsv"] not in (first["*.tsv"], replaced["*.tsv"])
    listing = _file_part("s3://data/pairs/*.tsv", ctx)["files"]
    assert [(p, n) for p, n, _ in listing] == [
        ("s3://data/pairs/de-en.tsv", 21),
        ("s3://data/pairs/fr-en.tsv", 13),
    ]
