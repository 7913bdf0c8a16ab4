"""Threads on a shared node: one stage alone and beside a CPU-bound neighbour, stock vs sized.

    .venv/bin/python bench/threads_bench.py [--n 20000] [--dim 256] [--repeat 3]

The stage is a FAISS exact kNN search (``IndexFlatIP``, what the miner's flat path runs) and a
torch matmul loop (what encode/train spend their time in), each in a child process pinned to ONE
CPU with ``os.sched_setaffinity`` — a container or Slurm job given one core of a bigger machine.

  stock   the libraries' default thread count (OpenMP/torch: every CPU of the machine),
  sized   ``labse_common.threads.size_threads()``: the CPUs the process may use (here 1).

Each runs alone, then beside a neighbour process that spins on the same CPU. With a fair
scheduler a stage given half a CPU should take about twice as long (ratio ~2); oversubscribed
OpenMP threads spin in their barriers and lose far more. Printed: seconds of each case and the
ratios beside/alone and stock/sized. Needs at least 2 CPUs (otherwise there is nothing to
oversubscribe).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _spin(cpu: int, stop) -> None:
    os.sched_setaffinity(0, {cpu})
    x = 0
    while not stop.is_set():
        x += 1


def _stage(kind: str, sized: bool, cpu: int, n: int, dim: int, q) -> None:
    os.sched_setaffinity(0, {cpu})
    import faiss
    import numpy as np
    import torch

    if sized:
        from labse_common.threads import size_threads

        size_threads()
    else:  # what the libraries pick by themselves: the machine's CPU count
        faiss.omp_set_num_threads(os.cpu_count() or 1)
        torch.set_num_threads(os.cpu_count() or 1)
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    if kind == "faiss":
        x = rng.standard_normal((n, dim)).astype(np.float32)
        index = faiss.IndexFlatIP(dim)
        index.add(x)
        for a in range(0, n, 256):  # the miner's chunked queries
            index.search(x[a : a + 256], 4)
    else:
        a = torch.randn(256, dim * 4)
        w = torch.randn(dim * 4, dim * 4)
        for _ in range(max(1, n // 100)):
            a = torch.tanh(a @ w) * 0.1
    q.put(time.perf_counter() - t0)


def run_case(kind: str, sized: bool, neighbour: bool, n: int, dim: int) -> float:
    cpu = min(os.sched_getaffinity(0))
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    spin = ctx.Process(target=_spin, args=(cpu, stop)) if neighbour else None
    if spin:
        spin.start()
        time.sleep(0.5)
    q = ctx.Queue()
    p = ctx.Process(target=_stage, args=(kind, sized, cpu, n, dim, q))
    p.start()
    secs = q.get()
    p.join()
    if spin:
        stop.set()
        spin.join()
    return secs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=20000, help="vectors searched / matmul work unit")
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3, help="best of this many runs per case")
    a = ap.parse_args(argv)
    if (os.cpu_count() or 1) < 2:
        print("needs at least 2 CPUs")
        return 2
    rows = {}
    for kind in ("faiss", "torch"):
        for sized in (False, True):
            for nb in (False, True):
                rows[kind, sized, nb] = min(
                    run_case(kind, sized, nb, a.n, a.dim) for _ in range(a.repeat)
                )
    print(f"{'stage':<7}{'threads':<8}{'alone s':>9}{'beside s':>10}{'beside/alone':>14}")
    for kind in ("faiss", "torch"):
        for sized in (False, True):
            al, bs = rows[kind, sized, False], rows[kind, sized, True]
            print(
                f"{kind:<7}{'sized' if sized else 'stock':<8}{al:>9.2f}{bs:>10.2f}{bs / al:>14.2f}"
            )
        print(
            f"{kind}: beside a neighbour, stock/sized {rows[kind, False, True] / rows[kind, True, True]:.2f}x; "
            f"alone, stock/sized {rows[kind, False, False] / rows[kind, True, False]:.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
