"""One shard-record mechanism (labse_common.resume_shards.Shards) for a local folder and an
object-store prefix alike: the same records, a finished shard kept, a half-written or damaged
one done again, another fingerprint starting afresh (loopback S3 server)."""

from __future__ import annotations

import os
import shlex

import pytest

from labse_common import filesystems
from labse_common.resume_shards import Shards, partial_of

pytestmark = pytest.mark.slow  # starts a loopback S3 server (seconds)


@pytest.fixture(scope="module")
def bucket(tmp_path_factory):
    from tests.support.scaleout_util import s3_args, s3_test_server

    with s3_test_server(tmp_path_factory.mktemp("moto"), "jobs") as (endpoint, client):
        old = os.environ.get(filesystems.ENV)
        os.environ[filesystems.ENV] = shlex.join(s3_args(endpoint))
        filesystems.forget_configuration()
        try:
            yield "s3://jobs"
        finally:
            if old is None:
                os.environ.pop(filesystems.ENV, None)
            else:
                os.environ[filesystems.ENV] = old
            filesystems.forget_configuration()


def _put(path: str, data: bytes) -> None:
    if filesystems.is_remote(path):
        with filesystems.create(path) as f:
            f.write(data)
    else:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)


def _has(path: str) -> bool:
    return filesystems.exists(path) if filesystems.is_remote(path) else os.path.exists(path)


@pytest.mark.parametrize("where", ["local", "s3"])
def test_the_same_shard_records_locally_and_on_object_storage(where, bucket, tmp_path):
    out = str(tmp_path / "out") if where == "local" else f"{bucket}/out-{tmp_path.name}"
    partial = partial_of(out)
    first = Shards(partial, "job")
    assert first.prepare("fp1") == 0
    for name in ("a", "b"):
        folder = first.begin(name)
        _put(filesystems.join(folder, "rows", "part-0.bin"), name.encode() * 100)
        first.end(name)
    _put(filesystems.join(first.begin("c"), "part-0.bin"), b"half")  # killed before its end
    assert first.written == 2

    again = Shards(partial, "job")
    assert again.prepare("fp1") == 2  # the same job: its records kept
    assert again.finished("a") and again.resumed == 1
    _put(filesystems.join(again.path("b"), "rows", "part-0.bin"), b"damaged")
    assert not again.finished("b")  # damaged since: done again, its files gone
    assert not _has(filesystems.join(again.path("b"), "rows", "part-0.bin"))
    assert not again.finished("c")  # half-written: never reused
    assert not _has(filesystems.join(again.path("c"), "part-0.bin"))
    assert again.resumed == 1 and again.any_finished()

    other = Shards(partial, "job")
    assert other.prepare("fp2") == 0  # other inputs or settings: afresh
    assert not other.finished("a") and not other.any_finished()
    other.remove()
    assert not _has(filesystems.join(partial, "_RESUME.json"))
