"""The README's install without the Makefile, as a user does it: a fresh venv
(``python -m venv``, nothing shared with the test's), ``pip install torch==2.13.0``, then the
project's wheel with its declared dependencies from the package index, no extra. A corpus job
and the runner's dry run then work, and a command that needs an optional part (S3, GCS, Dask)
stops with one line naming the extra to install, exit 2.

Before, every Beam job died with ``ModuleNotFoundError: No module named 'botocore'``: boto3 was
only in the ``dev`` extra and Beam's S3 client was patched on every Beam path. The install takes
about 100 s here (torch comes from a local wheel; the rest from the index or pip's cache).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.corpus_fixtures import good_wet_payload, write_wet
from tests.support.corpus_util import read_rows, read_stats
from tests.support.paths import REPO

pytestmark = pytest.mark.slow  # builds the wheel and pip-installs it with its dependencies

PACKAGES = ("pipelines", "filters", "labse_model", "mining", "labse_common", "configs")
OPTIONAL = ("boto3", "botocore", "google.cloud.storage", "dask", "distributed")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.pop("VIRTUAL_ENV", None)
    env.pop("LABSE_BEAM_OPTIONS", None)
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", AWS_EC2_METADATA_DISABLED="true")
    return env


def _run(cmd: list, ok: bool = True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, env=_env(), timeout=600, **kw
    )
    if ok:
        assert proc.returncode == 0, (cmd, proc.stdout[-3000:], proc.stderr[-3000:])
    return proc


@pytest.fixture(scope="module")
def venv_python(tmp_path_factory) -> Path:
    """A fresh venv holding torch and the project's wheel, installed the README's way."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for pkg in PACKAGES:
        shutil.copytree(REPO / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    dist = tmp_path_factory.mktemp("dist")
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    _run([*pip_wheel, "-q", "-w", dist, src])
    (wheel,) = dist.glob("labse_pipeline-*.whl")
    env_dir = tmp_path_factory.mktemp("plain") / "venv"
    _run([sys.executable, "-m", "venv", env_dir])
    py = env_dir / "bin" / "python"
    _run([py, "-m", "pip", "install", "-q", "torch==2.13.0"])
    _run([py, "-m", "pip", "install", "-q", wheel])
    return py


def test_the_plain_install_has_no_optional_part(venv_python):
    """The point of the test: nothing optional is there (else the checks below prove nothing)."""
    code = (
        "import importlib.util as u\n"
        "def has(m):\n"
        "    try:\n"
        "        return u.find_spec(m) is not None\n"
        "    except ImportError:\n"
        "        return False\n"
        f"print([m for m in {OPTIONAL!r} if has(m)])"
    )
    assert _run([venv_python, "-c", code]).stdout.strip() == "[]"


def test_a_corpus_job_runs_after_the_plain_install(venv_python, tmp_path):
    wet = write_wet(tmp_path / "tiny.warc.wet.gz", [("http://a.example/1", good_wet_payload())])
    out = tmp_path / "out"
    cmd = [venv_python, "-m", "pipelines.commoncrawl", "--input", wet, "--output", out]
    proc = _run([*cmd, "--direct_num_workers", "1"], cwd=tmp_path)
    stats = read_stats(out)
    assert stats["counts"]["sentences"]["out"] > 0, (stats, proc.stderr[-2000:])
    assert {r["lang"] for r in read_rows(out)} >= {"en"}


def test_the_runners_dry_run_works_after_the_plain_install(venv_python, tmp_path):
    cmd = [venv_python, "-m", "pipelines.run", "--config", "demo", "--dry-run"]
    proc = _run([*cmd, "--output", tmp_path / "run"], cwd=tmp_path)
    assert "mine" in proc.stdout + proc.stderr, proc.stdout[-2000:]


@pytest.mark.parametrize(
    "args,extra",
    [
        (["--output", "s3://bucket/out"], "s3"),
        (["--output", "gs://bucket/out"], "gcs"),
        (["--input", "s3://bucket/crawl/*.warc.wet.gz", "--output", "OUT"], "s3"),
        (["--output", "OUT", "--runner", "DaskRunner"], "dask"),
    ],
)
def test_a_missing_optional_part_is_one_line_naming_its_extra(venv_python, tmp_path, args, extra):
    wet = write_wet(tmp_path / "tiny.warc.wet.gz", [("http://a.example/1", good_wet_payload())])
    args = [str(tmp_path / "out") if a == "OUT" else a for a in args]
    if "--input" not in args:
        args = ["--input", str(wet), *args]
    proc = _run([venv_python, "-m", "pipelines.commoncrawl", *args], ok=False, cwd=tmp_path)
    errors = [line for line in proc.stderr.splitlines() if " ERROR " in line]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert len(errors) == 1 and f"pip install 'labse-pipeline[{extra}]'" in errors[0], errors
