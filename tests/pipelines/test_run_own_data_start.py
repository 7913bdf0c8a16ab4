"""configs/own-data.yaml as a user starts with it: it plans on a folder of WET
files only, of WARC files only or of Wikipedia dumps only (a glob that matches nothing is skipped
while another glob of the text to mine matches); a folder where none matches is one line, exit 2;
a run that trains the demo's small shape says so in one WARNING line, and model.init takes the
released LaBSE in either layout (the plain folder, or the Hugging Face cache folder)."""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.hf_cache import COMMIT, as_hf_cache
from tests.support.paths import REPO as ROOT

OWN = str(ROOT / "configs" / "own-data.yaml")
SHAPES = {
    "wet-only": ("crawl/CC-MAIN-1.warc.wet.gz", {"commoncrawl": "run", "wikipedia": "off"}),
    "warc-only": ("crawl/CC-MAIN-1.warc.gz", {"commoncrawl": "run", "wikipedia": "off"}),
    "dump-only": (
        "dumps/dewiki-20240101-pages-articles1.xml.bz2",
        {"commoncrawl": "off", "wikipedia": "run"},
    ),
}


@pytest.fixture
def cli(forked_commands) -> Callable[..., subprocess.CompletedProcess]:
    return functools.partial(forked_commands.run, "pipelines.run")


def _folder(root: Path, download: str | None) -> Path:
    """A user's folder: one download shape (dry-run: the file is listed, never read) and a TSV
    of training pairs."""
    (root / "parallel").mkdir(parents=True)
    (root / "parallel" / "train.de-en.tsv").write_text("Hallo\tHello\n", encoding="utf-8")
    if download:
        (root / download).parent.mkdir(parents=True)
        (root / download).write_bytes(b"")
    return root


def _plan(stdout: str) -> dict[str, str]:
    return {row.split()[0]: row.split()[1] for row in stdout.splitlines() if row.strip()}


def _dry_run(cli, data: Path, out: Path, *sets: str) -> subprocess.CompletedProcess:
    args = [a for s in sets for a in ("--set", s)]
    return cli("--config", OWN, "--data", str(data), "--output", str(out), "--dry-run", *args)


@pytest.mark.parametrize("shape", list(SHAPES))
def test_own_data_plans_on_a_folder_of_one_download_shape(cli, tmp_path, shape):
    download, stages = SHAPES[shape]
    p = _dry_run(cli, _folder(tmp_path / "data", download), tmp_path / "run")
    assert p.returncode == 0, p.stderr
    plan = _plan(p.stdout)
    assert {k: plan[k] for k in stages} == stages, p.stdout
    assert plan["inputs"] == "run" and "Traceback" not in p.stderr
    assert not (tmp_path / "run").exists()


def test_a_folder_where_no_glob_of_the_text_to_mine_matches_is_one_line_exit_2(cli, tmp_path):
    data = _folder(tmp_path / "data", None)
    p = _dry_run(cli, data, tmp_path / "run")
    assert p.returncode == 2, (p.stdout, p.stderr)
    (line,) = [ln for ln in p.stderr.splitlines() if "ERROR" in ln]
    for glob in ("crawl/*.warc.wet.gz", "crawl/*.warc.gz", "dumps/*-pages-articles*.xml.bz2"):
        assert str(data / glob) in line, line
    assert "Traceback" not in p.stderr


def _shape_warnings(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if "WARNING" in ln and "demo's small" in ln]


def test_a_users_run_without_model_init_warns_once_that_it_trains_the_demo_shape(cli, tmp_path):
    data = _folder(tmp_path / "data", SHAPES["wet-only"][0])
    p = _dry_run(cli, data, tmp_path / "run")
    assert p.returncode == 0, p.stderr
    (line,) = _shape_warnings(p.stderr)
    assert "hidden_size 128" in line and "model.init" in line, line
    wide = _dry_run(
        cli, data, tmp_path / "run", "model.hidden_size=768", "model.num_attention_heads=12"
    )
    assert wide.returncode == 0 and _shape_warnings(wide.stderr) == [], wide.stderr
    demo = cli("--output", str(tmp_path / "demo"), "--dry-run")  # the demo's own sources
    assert demo.returncode == 0 and _shape_warnings(demo.stderr) == [], demo.stderr


@pytest.fixture(scope="module")
def labse_dirs(tmp_path_factory) -> tuple[Path, Path]:
    """A small random encoder in LaBSE's layout (labse_model.tiny), as a plain folder and as the
    Hugging Face cache folder of sentence-transformers/LaBSE."""
    from labse_model.tiny import make_tiny_checkpoint

    root = tmp_path_factory.mktemp("labse")
    plain = Path(make_tiny_checkpoint(str(root / "LaBSE"), hidden=32, layers=1))
    return plain, as_hf_cache(plain, root / "hub")


@pytest.mark.slow
def test_model_init_takes_the_hf_cache_folder_as_its_snapshot(cli, tmp_path, labse_dirs):
    _, repo = labse_dirs
    data = _folder(tmp_path / "data", SHAPES["wet-only"][0])
    for init in (repo, repo.parent):  # models--sentence-transformers--LaBSE, or the hub cache
        p = _dry_run(cli, data, tmp_path / "run", f"model.init={init}")
        assert p.returncode == 0, p.stderr
        plan = p.stdout.splitlines()
        (vocab,) = [row for row in plan if row.split()[0] == "vocab"]
        assert vocab.split()[1] == "off" and str(repo / "snapshots" / COMMIT) in vocab, vocab
        assert _shape_warnings(p.stderr) == []


@pytest.mark.slow
def test_the_encoder_loads_from_the_snapshot_as_from_the_plain_folder(labse_dirs):
    import numpy as np

    from labse_common.model_init import resolve_init
    from labse_model.encode import Encoder

    plain, repo = labse_dirs
    sentences = ["Hallo Welt.", "Hello world."]
    want = Encoder.from_pretrained(str(plain), device="cpu").encode(sentences)
    got = Encoder.from_pretrained(str(resolve_init(repo)), device="cpu").encode(sentences)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
