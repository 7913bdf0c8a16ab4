"""Start training under torch.distributed.elastic (torchrun) or in this process.

``python -m labse_model train --nproc-per-node 2 ...`` re-runs itself as torchrun workers
(``--standalone`` on one node, c10d rendezvous across nodes). Workers see ``LOCAL_RANK`` in their
environment and train directly; the backend (gloo on CPU, NCCL on GPU) is chosen in
``distributed.init_from_env``. ``--max-restarts`` lets the elastic agent restart all workers after
one dies (e.g. kill -9); they resume from the last checkpoint.
"""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path

log = logging.getLogger(__name__)

REPO_ROOT = str(Path(__file__).resolve().parent.parent)


def is_worker() -> bool:
    """True inside a torchrun worker (the agent sets LOCAL_RANK)."""
    return "LOCAL_RANK" in os.environ


def needs_launch(nproc_per_node: int, nnodes: str, rdzv_endpoint: str | None) -> bool:
    return not is_worker() and (nproc_per_node > 1 or str(nnodes) != "1" or bool(rdzv_endpoint))


def torchrun_args(
    worker_argv: list[str],
    nproc_per_node: int,
    nnodes: str = "1",
    node_rank: int | None = None,
    rdzv_endpoint: str | None = None,
    rdzv_backend: str = "c10d",
    rdzv_id: str | None = None,
    max_restarts: int = 0,
) -> list[str]:
    """The torchrun command line that runs ``python -m labse_model <worker_argv>`` per worker."""
    args = ["--nproc-per-node", str(nproc_per_node), "--nnodes", str(nnodes)]
    args += ["--max-restarts", str(max_restarts)]
    if rdzv_endpoint:
        args += ["--rdzv-backend", rdzv_backend, "--rdzv-endpoint", rdzv_endpoint]
        args += ["--rdzv-id", rdzv_id or f"labse-{uuid.uuid4().hex[:8]}"]
        if node_rank is not None:
            args += ["--node-rank", str(node_rank)]
    elif str(nnodes) == "1":
        args += ["--standalone"]
    else:
        raise ValueError("--nnodes > 1 needs --rdzv-endpoint HOST:PORT")
    return args + ["--module", "labse_model", *worker_argv]


def launch(args: list[str]) -> int:
    """Run torchrun in this process (it forks the workers); return its exit status."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    # Workers run `python -m labse_model` and must import it without an installed package.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (REPO_ROOT, os.environ.get("PYTHONPATH")) if p
    )
    log.info("torchrun %s", " ".join(args))
    try:
        run(parse_args(args))
    except ChildFailedError as e:
        log.error("a training worker failed: %s", e.get_first_failure()[1].message)
        return 1
    return 0
