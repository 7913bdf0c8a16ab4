"""labse_common.s3_upload on the loopback S3 server: one request per small file, parallel parts
for a large one, the same bytes back, and failures that leave no multipart upload behind."""

from __future__ import annotations

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
    with s3_test_server(tmp_path_factory.mktemp("moto-logs"), "uploads") as server:
        yield server


def _upload(client, key: str, data: bytes, write: int = 128 << 10) -> None:
    from labse_common.s3_upload import S3ParallelUploader

    up = S3ParallelUploader(BeamS3Wrapper(client), f"s3://uploads/{key}")
    for i in range(0, len(data), write):  # as Beam's BufferedWriter hands it over
        up.put(memoryview(data[i : i + write]))
    up.finish()


@pytest.mark.parametrize("size", [0, 100, 64 << 10])
def test_a_file_below_one_part_is_one_request(s3, size):
    endpoint, _ = s3
    client = s3_client(endpoint)
    seen = count_s3_calls(client)
    data = os.urandom(size)
    _upload(client, f"small-{size}", data)
    assert seen == Counter({"PutObject": 1})
    assert client.get_object(Bucket="uploads", Key=f"small-{size}")["Body"].read() == data


def test_a_large_file_goes_in_parallel_parts_and_comes_back_whole(s3):
    from labse_common.s3_upload import PART_BYTES

    endpoint, _ = s3
    client = s3_client(endpoint)
    seen = count_s3_calls(client)
    data = os.urandom(3 * PART_BYTES + 12345)  # 3 full parts and a short last one
    _upload(client, "large", data)
    assert seen == Counter(
        {"CreateMultipartUpload": 1, "UploadPart": 4, "CompleteMultipartUpload": 1}
    )
    assert client.get_object(Bucket="uploads", Key="large")["Body"].read() == data
    assert not client.list_multipart_uploads(Bucket="uploads").get("Uploads")


def test_a_failed_part_aborts_the_upload_and_raises_one_line(s3, monkeypatch):
    from labse_common.errors import RemoteFailure
    from labse_common.s3_upload import PART_BYTES

    endpoint, _ = s3
    client = s3_client(endpoint)
    real = client.upload_part

    def flaky(**kw):
        if kw["PartNumber"] == 2:
            raise ConnectionError("connection reset while sending part 2")
        return real(**kw)

    monkeypatch.setattr(client, "upload_part", flaky)
    with pytest.raises(RemoteFailure, match="part 2") as e:
        _upload(client, "broken", os.urandom(2 * PART_BYTES + 10))
    # One line naming the operation, the object and the endpoint; not retried by Beam again.
    assert str(e.value).startswith("UploadPart 2 of s3://uploads/broken: S3 endpoint " + endpoint)
    assert not client.list_multipart_uploads(Bucket="uploads").get("Uploads")
    assert "Contents" not in client.list_objects_v2(Bucket="uploads", Prefix="broken")


def test_a_failed_start_never_leaves_a_shorter_file(s3, monkeypatch):
    """The first full part is taken from the buffer before the upload starts; when the start
    fails, closing must fail as well, not send the rest as a truncated object."""
    from labse_common.errors import RemoteFailure
    from labse_common.s3_upload import PART_BYTES, S3ParallelUploader

    endpoint, _ = s3
    client = s3_client(endpoint)

    def refused(**kw):
        raise ConnectionError("connection refused")

    monkeypatch.setattr(client, "create_multipart_upload", refused)
    up = S3ParallelUploader(BeamS3Wrapper(client), "s3://uploads/cut")
    with pytest.raises(RemoteFailure, match="refused"):
        up.put(memoryview(os.urandom(PART_BYTES + 100)))
    with pytest.raises(RemoteFailure, match="refused"):
        up.put(memoryview(b"more"))
    with pytest.raises(RemoteFailure, match="refused"):
        up.finish()
    assert "Contents" not in client.list_objects_v2(Bucket="uploads", Prefix="cut")


def test_a_missing_bucket_is_beams_404(s3):
    from apache_beam.io.aws.clients.s3.messages import S3ClientError

    from labse_common.s3_upload import S3ParallelUploader

    endpoint, _ = s3

    up = S3ParallelUploader(BeamS3Wrapper(s3_client(endpoint)), "s3://no-such-bucket/k")
    up.put(memoryview(b"abc"))
    with pytest.raises(S3ClientError) as e:
        up.finish()
    assert e.value.code == 404


def test_beams_filesystem_writes_through_it(s3, tmp_path):
    from apache_beam.io.aws import s3io
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    from labse_common.filesystems import install_s3_client_cache
    from labse_common.s3_upload import PART_BYTES, S3ParallelUploader

    endpoint, client = s3
    FileSystems.set_options(PipelineOptions(s3_args(endpoint)))
    assert install_s3_client_cache() and s3io.S3Uploader is S3ParallelUploader
    data = os.urandom(PART_BYTES + 777)
    with FileSystems.create("s3://uploads/via-beam/f.bin") as f:
        f.write(data)
    with FileSystems.open("s3://uploads/via-beam/f.bin") as f:
        assert f.read() == data
