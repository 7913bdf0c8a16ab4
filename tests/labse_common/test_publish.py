"""labse_common.publish: a finished folder copied to the loopback S3 server (moto) or a local
folder, byte for byte, with _PUBLISHED.json written last; a dead endpoint, a missing bucket or
a server that answers HTML is one line naming the URL within seconds."""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import os
import random
import shlex
import socket
import threading
import time
from pathlib import Path

import pytest

from labse_common.errors import RemoteError, UsageError
from labse_common.publish import MANIFEST, check_destination, publish
from tests.support.quiet_http import QuietHTTPServer
from tests.support.scaleout_util import free_port, s3_args, s3_test_server

BUCKET = "published"
BIG = 9 << 20  # over the 8 MiB part size: a multipart upload of two parts


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    with s3_test_server(tmp_path_factory.mktemp("moto-logs"), BUCKET) as server:
        yield server


@pytest.fixture
def endpoint_env(monkeypatch):
    """``use(endpoint)``: this process's FileSystems options point at ``endpoint`` through
    ``$LABSE_BEAM_OPTIONS`` (what the stage runner sees); the previous options come back."""
    from apache_beam.io.filesystems import FileSystems

    from labse_common.filesystems import configure

    previous = FileSystems._pipeline_options

    def use(endpoint: str) -> None:
        monkeypatch.setenv("LABSE_BEAM_OPTIONS", shlex.join(s3_args(endpoint)))
        configure()

    yield use
    FileSystems.set_options(previous)


def make_folder(root: Path, seed: int = 0, big: bool = True) -> dict[str, bytes]:
    """A final bitext folder's shape: top-level files, a subfolder two deep, a large file."""
    rng = random.Random(seed)
    files = {
        "bitext.tsv.gz": rng.randbytes(3000),
        "bitext.de-en.de": b"Hallo Welt\n" * (seed + 1),
        "bitext.de-en.en": b"Hello world\n" * (seed + 1),
        "report.md": f"# report {seed}\n".encode(),
        "empty.txt": b"",
        "hf/README.md": b"---\nlicense: cc\n---\n",
        "hf/data/train-00000-of-00001.parquet": rng.randbytes(5000),
    }
    if big:
        files["bitext.parquet"] = os.urandom(BIG)
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


def download(client, prefix: str, bucket: str = BUCKET) -> dict[str, bytes]:
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            body = client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
            out[obj["Key"][len(prefix) :]] = body
    return out


def check_manifest(raw: bytes, files: dict[str, bytes], url: str) -> None:
    m = json.loads(raw)
    assert m["url"] == url and m["file_count"] == len(files)
    assert m["total_bytes"] == sum(map(len, files.values())) and m["published_at"]
    listed = {e["path"]: (e["bytes"], e["sha256"]) for e in m["files"]}
    assert listed == {k: (len(v), hashlib.sha256(v).hexdigest()) for k, v in files.items()}


def one_line(e: pytest.ExceptionInfo, *parts: str) -> str:
    msg = str(e.value)
    assert "\n" not in msg and all(p in msg for p in parts), msg
    return msg


@pytest.mark.slow
def test_round_trip_and_republish_through_s3(s3, endpoint_env, tmp_path):
    endpoint, client = s3
    endpoint_env(endpoint)
    url = f"s3://{BUCKET}/runs/final"
    files = make_folder(tmp_path / "a")
    check_destination(url)
    summary = publish(tmp_path / "a", url + "/")
    assert summary == {"files": len(files), "bytes": sum(map(len, files.values())), "url": url}
    got = download(client, "runs/final/")
    check_manifest(got.pop(MANIFEST), files, url)
    assert got == files
    assert not client.list_multipart_uploads(Bucket=BUCKET).get("Uploads")

    # Again with other files: changed ones replaced, gone ones removed, a foreign object kept.
    client.put_object(Bucket=BUCKET, Key="runs/final/notes/keep.txt", Body=b"not ours")
    files2 = make_folder(tmp_path / "b", seed=1, big=False)
    del files2["report.md"]
    (tmp_path / "b" / "report.md").unlink()
    (tmp_path / "b" / "hf" / "extra.json").write_bytes(b"{}")
    files2["hf/extra.json"] = b"{}"
    assert publish(tmp_path / "b", url, overwrite=True)["files"] == len(files2)
    got = download(client, "runs/final/")
    check_manifest(got.pop(MANIFEST), files2, url)
    assert got.pop("notes/keep.txt") == b"not ours"
    assert got == files2


@pytest.mark.slow
def test_aws_endpoint_url_selects_the_server(s3, monkeypatch, tmp_path):
    """Without Beam flags, boto3's own environment (AWS_ENDPOINT_URL and keys) applies."""
    from apache_beam.io.filesystems import FileSystems

    from labse_common.filesystems import configure

    endpoint, client = s3
    for k, v in {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("LABSE_BEAM_OPTIONS", raising=False)
    previous = FileSystems._pipeline_options
    try:
        configure([])
        files = make_folder(tmp_path / "f", big=False)
        client.create_bucket(Bucket="root")  # empty: the module's bucket holds other tests'
        publish(tmp_path / "f", "s3://root")  # the bucket's root
        got = download(client, "", bucket="root")
        assert json.loads(got.pop(MANIFEST))["url"] == "s3://root"
    finally:
        FileSystems.set_options(previous)
    assert got == files


@pytest.mark.slow
def test_dead_endpoint_and_missing_bucket_fail_fast(s3, endpoint_env):
    endpoint, _ = s3
    endpoint_env(f"http://127.0.0.1:{free_port()}")  # nothing listens there
    t0 = time.monotonic()
    with pytest.raises(RemoteError) as e:
        check_destination(f"s3://{BUCKET}/x", "--publish")
    assert time.monotonic() - t0 < 15
    one_line(e, "--publish", f"s3://{BUCKET}/x", "does not answer")

    endpoint_env(endpoint)
    t0 = time.monotonic()
    with pytest.raises(RemoteError) as e:
        check_destination("s3://no-such-bucket/out", "--publish")
    assert time.monotonic() - t0 < 15
    one_line(e, "--publish", "s3://no-such-bucket/out", "does not exist")


class DyingProxy:
    """A loopback TCP relay to ``port`` that dies after ``limit`` bytes from its clients: every
    open connection is cut and nothing listens any more (an endpoint gone mid-upload)."""

    def __init__(self, port: int, limit: int) -> None:
        self.port, self.limit, self.sent = port, limit, 0
        self.lock = threading.Lock()
        self.dead = threading.Event()
        self.socks: list[socket.socket] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.1)
        self.endpoint = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.dead.is_set():
            try:
                client, _ = self.listener.accept()
            except (TimeoutError, OSError):
                continue
            upstream = socket.create_connection(("127.0.0.1", self.port))
            with self.lock:
                self.socks += [client, upstream]
            for a, b, up in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(target=self._pump, args=(a, b, up), daemon=True).start()
        self.listener.close()

    def _pump(self, a: socket.socket, b: socket.socket, counted: bool) -> None:
        with contextlib.suppress(OSError):
            while data := a.recv(1 << 16):
                if counted:
                    with self.lock:
                        self.sent += len(data)
                    if self.sent > self.limit:
                        self.kill()
                        return
                b.sendall(data)
        with contextlib.suppress(OSError):
            b.shutdown(socket.SHUT_WR)

    def kill(self) -> None:
        self.dead.set()
        with self.lock:
            for s in self.socks:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()


@pytest.mark.slow
def test_endpoint_dying_mid_upload_leaves_no_manifest(s3, endpoint_env, tmp_path):
    endpoint, client = s3
    url = f"s3://{BUCKET}/dying"
    endpoint_env(endpoint)
    make_folder(tmp_path / "old", big=False)
    publish(tmp_path / "old", url)  # a complete publication, then a replacement that fails
    assert MANIFEST in download(client, "dying/")
    proxy = DyingProxy(int(endpoint.rsplit(":", 1)[1]), limit=1 << 20)
    endpoint_env(proxy.endpoint)
    make_folder(tmp_path / "new", seed=2)
    t0 = time.monotonic()
    try:
        with pytest.raises(RemoteError) as e:
            publish(tmp_path / "new", url, overwrite=True)
    finally:
        proxy.kill()
    assert time.monotonic() - t0 < 15 and proxy.sent > proxy.limit  # it died mid-upload
    one_line(e, "--publish", url, "bitext.parquet")
    assert MANIFEST not in download(client, "dying/")  # never marked complete

    # Still this project's (an interrupted publication): replaced only with overwrite, in full.
    endpoint_env(endpoint)
    with pytest.raises(UsageError) as e:
        publish(tmp_path / "new", url)
    one_line(e, "--publish", url, "interrupted publication", "--publish-overwrite")
    client.put_object(Bucket=BUCKET, Key="dying/user/keep.txt", Body=b"user's")
    new = make_folder(tmp_path / "new2", seed=3, big=False)
    publish(tmp_path / "new2", url, overwrite=True)
    got = download(client, "dying/")
    check_manifest(got.pop(MANIFEST), new, url)
    assert got == {**new, "user/keep.txt": b"user's"}  # the old and half-sent files gone


@pytest.mark.slow
def test_s3_destinations_holding_other_objects_are_refused(s3, endpoint_env, tmp_path):
    endpoint, client = s3
    endpoint_env(endpoint)
    make_folder(tmp_path / "a", big=False)
    users = {"theirs/bitext.tsv.gz": b"a user's own", "theirs/stats.json": b"{}"}
    for key, body in users.items():
        client.put_object(Bucket=BUCKET, Key=key, Body=body)
    for overwrite in (False, True):
        with pytest.raises(UsageError) as e:
            publish(tmp_path / "a", f"s3://{BUCKET}/theirs", overwrite=overwrite)
        one_line(e, "--publish", f"s3://{BUCKET}/theirs", "not empty")
    assert download(client, "theirs/") == {k[len("theirs/") :]: v for k, v in users.items()}
    # A second publication to the same prefix: refused without overwrite, nothing changed.
    url = f"s3://{BUCKET}/twice"
    publish(tmp_path / "a", url)
    before = download(client, "twice/")
    with pytest.raises(UsageError) as e:
        check_destination(url, "--publish")
    one_line(e, "--publish", url, "earlier publication", "--publish-overwrite")
    make_folder(tmp_path / "b", seed=1, big=False)
    with pytest.raises(UsageError):
        publish(tmp_path / "b", url)
    # With overwrite, a new file on a user's object is refused before anything changes.
    client.put_object(Bucket=BUCKET, Key="twice/extra.txt", Body=b"user's")
    (tmp_path / "b" / "extra.txt").write_bytes(b"ours")
    with pytest.raises(UsageError) as e:
        publish(tmp_path / "b", url, overwrite=True)
    one_line(e, "--publish", url, "would replace extra.txt")
    assert download(client, "twice/") == {**before, "extra.txt": b"user's"}


class HtmlHandler(http.server.BaseHTTPRequestHandler):
    """What a web server or captive portal at the endpoint address answers: HTML."""

    protocol_version = "HTTP/1.1"  # answers botocore's "Expect: 100-continue" at once
    status = 200
    page = b"<html><body><h1>Welcome to nginx!</h1></body></html>"

    def _answer(self, body: bool) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.send_response(self.status)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(self.page)))
        self.end_headers()
        if body:
            self.wfile.write(self.page)

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's names
        self._answer(False)

    def do_GET(self) -> None:  # noqa: N802
        self._answer(True)

    do_PUT = do_POST = do_DELETE = do_GET  # noqa: N815

    def log_message(self, *args) -> None:
        pass


@pytest.mark.slow
@pytest.mark.parametrize("status", [200, 503])
def test_html_answers_are_one_line(endpoint_env, tmp_path, status):
    handler = type("Handler", (HtmlHandler,), {"status": status})
    server = QuietHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        endpoint_env(f"http://127.0.0.1:{server.server_address[1]}")
        make_folder(tmp_path / "f", big=False)
        t0 = time.monotonic()
        with pytest.raises(RemoteError) as e:
            publish(tmp_path / "f", "s3://web/out")  # the preflight passes a 200 HEAD
        assert time.monotonic() - t0 < 15
        one_line(e, "--publish", "s3://web/out")
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("via", ["files", "beam"])
def test_local_round_trip_and_republish(tmp_path, monkeypatch, via):
    """A local destination; "beam": the same through Beam's FileSystems, as gs:// goes."""
    from labse_common import publish as module
    from labse_common.publish_targets import BeamTarget, local_path

    if via == "beam":

        def beam(url, flag, _options):  # Beam's local filesystem takes plain paths only
            return BeamTarget(str(local_path(url)), flag)

        monkeypatch.setattr(module, "open_target", beam)
    files = make_folder(tmp_path / "a", big=False)
    dest = tmp_path / "pub" / "deep" / "final"
    check_destination(str(dest))
    assert publish(tmp_path / "a", str(dest))["files"] == len(files)
    got = {p.relative_to(dest).as_posix(): p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    check_manifest(got.pop(MANIFEST), files, str(dest))
    assert got == files

    (dest / "mine.txt").write_bytes(b"kept")
    files2 = {"bitext.tsv.gz": b"new", "x/y.txt": b"y"}
    for rel, data in files2.items():
        (tmp_path / "b" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "b" / rel).write_bytes(data)
    publish(tmp_path / "b", f"file://{dest}", overwrite=True)
    got = {p.relative_to(dest).as_posix(): p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    check_manifest(got.pop(MANIFEST), files2, str(dest))
    assert got == {**files2, "mine.txt": b"kept"}
    if via == "files":
        assert not (dest / "hf").exists()  # the old publication's folders went with its files


def test_an_empty_folder_publishes_a_manifest_only(tmp_path):
    (tmp_path / "empty").mkdir()
    assert publish(tmp_path / "empty", str(tmp_path / "new" / "out"))["files"] == 0
    assert os.listdir(tmp_path / "new" / "out") == [MANIFEST]


def test_a_folder_is_not_published_into_itself(tmp_path):
    make_folder(tmp_path / "a", big=False)
    for dest, how in ((tmp_path / "a", "is"), (tmp_path / "a" / "hf" / "copy", "is inside")):
        with pytest.raises(UsageError) as e:
            publish(tmp_path / "a", str(dest), "--publish")
        one_line(e, "--publish", str(dest), f"{how} the folder being published")
    assert not (tmp_path / "a" / MANIFEST).exists()
    assert not (tmp_path / "a" / "hf" / "copy").exists()


def test_unusable_local_destinations(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError) as e:
        check_destination(str(tmp_path / "file"), "--publish")
    one_line(e, "--publish", "not a folder")
    with pytest.raises(UsageError) as e:
        check_destination(str(tmp_path / "file" / "sub"))
    one_line(e, "cannot create")
    with pytest.raises(UsageError) as e:
        check_destination("http://example.org/out")
    one_line(e, "s3://, gs:// or a local folder")
    with pytest.raises(UsageError) as e:
        publish(tmp_path / "missing", str(tmp_path / "out"))
    one_line(e, "is not a folder")


# -- a publication never replaces what it did not write ---------------------------------------


def snapshot(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


def users_folder(root: Path) -> dict[str, bytes]:
    """A folder of a user's own files, two of them named like a bitext folder's."""
    files = {
        "bitext.tsv.gz": b"the user's own bitext",
        "stats.json": b'{"mine": 1}',
        "a/b.txt": b"b",
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_folder_of_other_files_is_refused_and_left_as_it_was(tmp_path, overwrite):
    make_folder(tmp_path / "a", big=False)
    dest = tmp_path / "dest"
    mine = users_folder(dest)
    with pytest.raises(UsageError) as e:
        check_destination(str(dest), "--publish", overwrite=overwrite)
    one_line(e, "--publish", str(dest), "not empty", MANIFEST)
    with pytest.raises(UsageError) as e:
        publish(tmp_path / "a", str(dest), overwrite=overwrite)
    one_line(e, "--publish", str(dest), "not empty")
    assert snapshot(dest) == mine
    (tmp_path / "only-folders" / "sub").mkdir(parents=True)  # not ours either
    with pytest.raises(UsageError):
        publish(tmp_path / "a", str(tmp_path / "only-folders"))


def test_a_manifest_this_project_did_not_write_is_refused(tmp_path):
    make_folder(tmp_path / "a", big=False)
    for i, raw in enumerate(
        [
            b"not json",
            b'{"files": "x"}',
            b'{"format_version": 1, "files": [{"path": "../outside.txt"}]}',
            b"\xff\xfe",
        ]
    ):
        dest = tmp_path / f"dest{i}"
        mine = {**users_folder(dest), MANIFEST: raw}
        (dest / MANIFEST).write_bytes(raw)
        with pytest.raises(UsageError) as e:
            publish(tmp_path / "a", str(dest), overwrite=True)
        one_line(e, str(dest), f"its {MANIFEST} is not a publication manifest")
        assert snapshot(dest) == mine


@pytest.mark.parametrize("via", ["files", "beam"])
def test_a_second_publication_needs_overwrite(tmp_path, monkeypatch, via):
    from labse_common import publish as module
    from labse_common.publish_targets import BeamTarget, local_path

    if via == "beam":
        monkeypatch.setattr(
            module,
            "open_target",
            lambda url, flag, _o: BeamTarget(str(local_path(url)), flag),
        )
    make_folder(tmp_path / "a", big=False)
    make_folder(tmp_path / "b", seed=1, big=False)
    dest = tmp_path / "dest"
    publish(tmp_path / "a", str(dest))
    before = snapshot(dest)
    with pytest.raises(UsageError) as e:
        check_destination(str(dest), "--publish")
    one_line(e, "--publish", str(dest), "earlier publication", "--publish-overwrite")
    with pytest.raises(UsageError) as e:
        publish(tmp_path / "b", str(dest), "--publish")
    one_line(e, "--publish", str(dest), "--publish-overwrite")
    assert snapshot(dest) == before
    check_destination(str(dest), "--publish", overwrite=True)
    publish(tmp_path / "b", str(dest), overwrite=True)
    assert snapshot(dest)["bitext.tsv.gz"] == (tmp_path / "b" / "bitext.tsv.gz").read_bytes()


def test_overwrite_replaces_only_what_the_manifest_lists(tmp_path):
    old = make_folder(tmp_path / "a", big=False)
    dest = tmp_path / "dest"
    publish(tmp_path / "a", str(dest))
    (dest / "hf" / "notes.md").write_bytes(b"user's notes beside the published files")
    (dest / "extra.txt").write_bytes(b"user's")
    # The new folder has a file where the user put one of their own: refused, nothing changed.
    new = {"bitext.tsv.gz": b"new bitext", "extra.txt": b"ours now?", "hf/README.md": b"new"}
    for rel, data in new.items():
        (tmp_path / "b" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "b" / rel).write_bytes(data)
    before = snapshot(dest)
    with pytest.raises(UsageError) as e:
        publish(tmp_path / "b", str(dest), overwrite=True)
    one_line(e, str(dest), "would replace extra.txt", "did not write")
    assert snapshot(dest) == before
    # A folder a new file needs, where the user has a file: refused the same way.
    (tmp_path / "b" / "extra.txt").unlink()
    (tmp_path / "b" / "extra.txt" / "x").parent.mkdir()
    (tmp_path / "b" / "extra.txt" / "x").write_bytes(b"x")
    with pytest.raises(UsageError) as e:
        publish(tmp_path / "b", str(dest), overwrite=True)
    one_line(e, "would replace extra.txt")
    assert snapshot(dest) == before
    # Without the clash: the listed files replaced or removed, the user's kept.
    (tmp_path / "b" / "extra.txt" / "x").unlink()
    (tmp_path / "b" / "extra.txt").rmdir()
    del new["extra.txt"]
    publish(tmp_path / "b", str(dest), overwrite=True)
    got = snapshot(dest)
    check_manifest(got.pop(MANIFEST), new, str(dest))
    assert got == {**new, "hf/notes.md": before["hf/notes.md"], "extra.txt": b"user's"}
    assert set(old) - set(new) - {"hf/README.md"}  # the old files that went were listed ones


@pytest.mark.parametrize(
    "where",
    [
        "parent/run",
        "parent/run/bitext",
        "parent/run/not-yet/deep",
        "parent",
        "data",
        "data/pub",
        "data-link/pub",
        "link-into-run",
    ],
)
def test_protected_folders_are_refused_up_front(tmp_path, where):
    run, data = tmp_path / "parent" / "run", tmp_path / "data"
    (run / "bitext").mkdir(parents=True)
    data.mkdir()
    (tmp_path / "link-into-run").symlink_to(run / "bitext")  # real paths are compared
    (tmp_path / "data-link").symlink_to(data)
    dest = tmp_path / where
    protected = {"the run folder, --output": run, "the --data folder": data}
    with pytest.raises(UsageError) as e:
        check_destination(str(dest), "--publish", overwrite=True, protected=protected)
    msg = one_line(e, "--publish", str(dest), "publish to a folder outside it")
    assert ("--data" in msg) == where.startswith("data"), msg
    assert not (run / "not-yet").exists() and os.listdir(data) == []
