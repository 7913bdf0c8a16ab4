"""Threads are sized to the CPUs a process may use: its affinity mask and its cgroup quota."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from labse_common.threads import cgroup_cpu_quota, size_threads, usable_cpus
from tests.support.paths import REPO as ROOT


def test_cgroup_quota_v2_v1_and_unlimited(tmp_path: Path):
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_quota(v2) == 1.5
    assert usable_cpus(v2) == min(len(os.sched_getaffinity(0)), 2)
    (v2 / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_quota(v2) is None
    v1 = tmp_path / "v1" / "cpu"
    v1.mkdir(parents=True)
    (v1 / "cpu.cfs_quota_us").write_text("100000\n")
    (v1 / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_quota(tmp_path / "v1") == 1.0 and usable_cpus(tmp_path / "v1") == 1
    (v1 / "cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_cpu_quota(tmp_path / "v1") is None
    assert cgroup_cpu_quota(tmp_path / "nothing") is None


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this OS")
def test_a_process_pinned_to_one_cpu_sizes_torch_and_faiss_to_one_thread():
    code = (
        "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
        "import torch, faiss; from labse_common.threads import size_threads; "
        "n = size_threads(); print(n, torch.get_num_threads(), faiss.omp_get_max_threads(), "
        "os.environ['OMP_NUM_THREADS'])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["1", "1", "1", "1"]


def test_processes_share_the_usable_cpus():
    import torch

    before = torch.get_num_threads()
    env = {
        v: os.environ.get(v)
        for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "RAYON_NUM_THREADS")
    }
    try:
        n = size_threads(processes=10_000)
        assert n == 1 and torch.get_num_threads() == 1
        assert size_threads(3) == 3 and torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)
        for var, value in env.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value
