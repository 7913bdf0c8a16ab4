"""labse_common.s3_download on the loopback S3 server: one request for a small file, the same
bytes back for every way Beam's reader asks (whole, in small reads, after seeks), one stream for
a sequential reader, and Beam's errors for a missing, replaced or unreadable file."""

from __future__ import annotations

import io
import os
from collections import Counter

import pytest

from tests.support.scaleout_util import (
    BeamS3Wrapper,
    count_s3_calls,
    s3_args,
    s3_client,
    s3_test_server,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    with s3_test_server(tmp_path_factory.mktemp("moto-logs"), "downloads") as server:
        yield server


def _put(client, key: str, data: bytes) -> str:
    client.put_object(Bucket="downloads", Key=key, Body=data)
    return f"s3://downloads/{key}"


def _open(client, path: str, buffer: int = 16 << 20):
    """The file object Beam's ``S3IO.open`` builds, around our downloader."""
    from apache_beam.io.filesystemio import DownloaderStream

    from labse_common.s3_download import S3NoHeadDownloader

    d = S3NoHeadDownloader(BeamS3Wrapper(client), path)
    return d, io.BufferedReader(DownloaderStream(d), buffer_size=buffer)


@pytest.mark.parametrize("size", [0, 100, 64 << 10, 1 << 20])
def test_a_small_file_is_one_request(s3, size):  # Beam's stock reader: HeadObject + GetObject
    endpoint, _ = s3
    client = s3_client(endpoint)
    data = os.urandom(size)
    path = _put(client, f"small-{size}", data)
    seen = count_s3_calls(client)
    _, f = _open(client, path)
    assert f.read() == data
    assert seen == Counter({"GetObject": 1})


def test_a_large_file_reads_back_whole_in_every_pattern(s3):
    from labse_common.s3_download import FIRST_BYTES

    endpoint, _ = s3
    client = s3_client(endpoint)
    data = os.urandom(FIRST_BYTES + 3 * (8 << 20) + 4321)
    path = _put(client, "large", data)
    seen = count_s3_calls(client)
    _, f = _open(client, path)
    assert f.read() == data  # readall: 8 KB reads, all from the stream opened with the file
    assert seen == Counter({"GetObject": 1})
    _, f = _open(client, path, buffer=1 << 20)
    got = bytearray()
    while chunk := f.read(300_001):  # reads that straddle the first MiB's edge
        got += chunk
    assert bytes(got) == data
    _, f = _open(client, path)
    for pos, n in [
        (len(data) - 8, 8),
        (5, 100),
        (FIRST_BYTES - 3, 10),
        (FIRST_BYTES + (8 << 20) - 1, (8 << 20) + 2),
        (0, len(data)),
    ]:
        f.seek(pos)
        assert f.read(n) == data[pos : pos + n]


def test_a_sequential_reader_uses_one_stream_and_a_jump_one_more(s3):
    from labse_common.s3_download import FIRST_BYTES

    endpoint, _ = s3
    client = s3_client(endpoint)
    data = os.urandom(3 * FIRST_BYTES)
    path = _put(client, "stream", data)
    seen = count_s3_calls(client)
    d, _ = _open(client, path)
    tail = len(data) - 100  # a footer reader: one request for the tail
    assert d.get_range(tail, len(data)) == data[tail:]
    assert d.get_range(0, 1000) == data[:1000]  # the first MiB, kept from the open
    pos = 1000
    while pos < len(data):  # then the whole file in 8 KB reads: one stream more
        assert d.get_range(pos, pos + 8192) == data[pos : pos + 8192]
        pos += 8192
    assert seen == Counter({"GetObject": 3})  # the open, the tail, the rest


def test_a_missing_file_is_enoent_when_opened(s3):
    endpoint, _ = s3
    with pytest.raises(OSError) as e:
        _open(s3_client(endpoint), "s3://downloads/no-such-key")
    assert e.value.errno == 2


def test_a_file_replaced_while_read_fails_instead_of_mixing_versions(s3):
    from apache_beam.io.aws.clients.s3.messages import S3ClientError

    from labse_common.s3_download import FIRST_BYTES

    endpoint, _ = s3
    client = s3_client(endpoint)
    path = _put(client, "replaced", os.urandom(2 * FIRST_BYTES))
    d, _ = _open(client, path)
    _put(client, "replaced", os.urandom(2 * FIRST_BYTES))
    with pytest.raises(S3ClientError) as e:
        d.get_range(FIRST_BYTES + 10, FIRST_BYTES + 20)
    assert e.value.code == 412


def test_a_failed_read_is_retried_once_then_raises_one_line(s3, monkeypatch):
    from labse_common.errors import RemoteFailure
    from labse_common.s3_download import FIRST_BYTES

    endpoint, _ = s3
    client = s3_client(endpoint)
    data = os.urandom(3 * FIRST_BYTES)
    path = _put(client, "flaky", data)
    d, _ = _open(client, path)
    d2, _ = _open(client, path)
    real, failures = client.get_object, []

    def flaky(**kw):
        if len(failures) < budget:
            failures.append(kw["Range"])
            raise ConnectionError("connection reset while reading")
        return real(**kw)

    monkeypatch.setattr(client, "get_object", flaky)
    at = FIRST_BYTES + 100  # a jump past the open stream: a new request
    budget = 1  # one failure: retried, the bytes come back
    assert d.get_range(at, at + 10) == data[at : at + 10]
    assert failures == [f"bytes={at}-"]
    failures.clear()
    budget = 10  # every try fails: one line naming the object and the endpoint, not a short read
    with pytest.raises(RemoteFailure, match="reset") as e:
        d2.get_range(at, at + 10)
    assert path in str(e.value) and endpoint in str(e.value) and "GetObject" in str(e.value)


def test_beams_filesystem_reads_through_it(s3):
    from apache_beam.io.aws import s3io
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    from labse_common.filesystems import install_s3_client_cache
    from labse_common.s3_download import FIRST_BYTES, S3NoHeadDownloader

    endpoint, client = s3
    FileSystems.set_options(PipelineOptions(s3_args(endpoint)))
    assert install_s3_client_cache() and s3io.S3Downloader is S3NoHeadDownloader
    data = os.urandom(5 * FIRST_BYTES + 99)
    _put(client, "via-beam/f.bin", data)
    with FileSystems.open("s3://downloads/via-beam/f.bin") as f:
        assert f.read() == data
