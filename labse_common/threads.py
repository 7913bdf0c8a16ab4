"""Threads sized to the CPUs a process may actually use.

``os.cpu_count()`` counts the machine's CPUs, not this process's: under ``taskset``, a
container's cpuset or a CPU quota (Kubernetes limits, Docker ``--cpus``, Slurm) it overstates
them, and torch, FAISS (OpenMP) and tokenizers (Rayon) each start that many threads. On a node
shared with other jobs those threads then fight for fewer cores and spin in their barriers, and
a stage slows down by far more than the CPU share it lost. :func:`usable_cpus` is the smaller of
the affinity mask and the cgroup quota; :func:`size_threads` gives every library that many
threads (divided among the processes sharing them) and exports the same sizes to child
processes through the environment.
"""

from __future__ import annotations

import logging
import math
import os
import sys
from pathlib import Path

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
# Environment variables child processes' libraries read for their thread pools.
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "RAYON_NUM_THREADS")


def cgroup_cpu_quota(root: str | os.PathLike = CGROUP_ROOT) -> float | None:
    """CPUs allowed by the cgroup CPU quota (cgroup v2 ``cpu.max``, else v1
    ``cpu.cfs_quota_us``/``cpu.cfs_period_us``); None when unlimited or unknown."""
    root = Path(root)
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    for base in (root / "cpu", root / "cpu,cpuacct", root):
        try:
            quota_us = int((base / "cpu.cfs_quota_us").read_text())
            period_us = int((base / "cpu.cfs_period_us").read_text())
        except (OSError, ValueError):
            continue
        return None if quota_us <= 0 or period_us <= 0 else quota_us / period_us
    return None


def usable_cpus(root: str | os.PathLike = CGROUP_ROOT) -> int:
    """The CPUs this process may use: its affinity mask, capped by the cgroup quota rounded up
    (a 1.5-CPU quota: two threads, or half a CPU would stay idle)."""
    mask = (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    )
    quota = cgroup_cpu_quota(root)
    if quota is not None:
        mask = min(mask, max(1, math.ceil(quota)))
    return max(1, mask)


def size_threads(threads: int | None = None, processes: int = 1) -> int:
    """Set torch, FAISS and the thread-pool environment to ``threads`` (default: the usable
    CPUs divided among ``processes`` on this node); returns the number used. Only libraries
    already imported are touched, so calling this costs no import."""
    n = threads or max(1, usable_cpus() // max(1, processes))
    for var in THREAD_ENV:
        os.environ[var] = str(n)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(n)
    if "faiss" in sys.modules:
        sys.modules["faiss"].omp_set_num_threads(n)
    log.debug("threads sized to %d (usable CPUs %d, %d process(es))", n, usable_cpus(), processes)
    return n
