"""What ``python -m labse_model train`` and ``pretrain`` share: the launcher flags, the checks
made before any worker starts (one line and exit 2, not a worker's traceback), the run folder's
claim, and the torchrun launch itself."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
from collections.abc import Callable
from typing import Any

from labse_common.errors import InputError, UsageError


def add_launcher_options(p: argparse.ArgumentParser, restarts_note: str = "") -> None:
    """The torchrun flags: processes per node, nodes, rendezvous, restarts."""
    p.add_argument(
        "--nproc-per-node",
        type=int,
        default=1,
        help="worker processes per node (GPUs per node, or CPU processes); > 1 launches "
        "torchrun (default: 1)",
    )
    p.add_argument(
        "--nnodes", default="1", help="number of nodes, or MIN:MAX for elastic runs (default: 1)"
    )
    p.add_argument("--node-rank", type=int, help="this node's rank (static rendezvous only)")
    p.add_argument(
        "--rdzv-endpoint", metavar="HOST:PORT", help="rendezvous endpoint for multi-node runs"
    )
    p.add_argument("--rdzv-backend", default="c10d", help="rendezvous backend (default: c10d)")
    p.add_argument("--rdzv-id", help="job id shared by all nodes (default: random)")
    p.add_argument(
        "--max-restarts",
        type=int,
        default=0,
        help="let the elastic agent restart all workers this many times after a failure; they "
        f"resume from the last checkpoint.{restarts_note} (default: 0)",
    )


def quiet_transformers() -> None:
    """transformers' per-file load/save bars drown the training and encoding bars."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def split_overrides(overrides: list[str], section: str) -> tuple[list[str], list[str]]:
    """``model.KEY=V`` overrides for the model section, the rest (``section.`` optional) for
    ``section``."""
    model, rest = [], []
    for o in overrides:
        if o.startswith("model."):
            model.append(o[len("model.") :])
        else:
            rest.append(o[len(section) + 1 :] if o.startswith(f"{section}.") else o)
    return model, rest


def local_paths(flag: str, values: list[str] | None) -> list[str]:
    """``flag value`` pairs for a worker's command line: local paths made absolute (a worker may
    start elsewhere), object-store URLs as given."""
    from labse_common.filesystems import is_remote

    argv: list[str] = []
    for v in values or []:
        argv += [flag, v if is_remote(v) else os.path.abspath(v)]
    return argv


def check_inputs(flag: str, specs: list[str] | None, what: str = "input file") -> None:
    """Files, globs or <lang>/ folders; a missing one is one line naming it, before any worker."""
    from labse_model.stream import expand_inputs

    if not specs:
        return
    try:
        expand_inputs(specs, what)
    except FileNotFoundError as e:  # the stream's own "not found" (no filename attached)
        raise InputError(None, str(e), flag) from None


def check_dirs(*flag_paths: tuple[str, str | None]) -> None:
    """``--vocab``/``--init`` folders exist (and a vocabulary folder holds one)."""
    from labse_model.model import check_vocab_dir

    for flag, path in flag_paths:
        if path and not os.path.isdir(path):
            raise InputError(path, "folder not found", flag)
        if path and flag == "--vocab":
            check_vocab_dir(path)


def run_claim(args: argparse.Namespace) -> contextlib.AbstractContextManager[Any]:
    """Hold OUTPUT/_CLAIM.json while the run writes there: a second run into the same folder
    stops with exit 2 instead of mixing checkpoints. Held by the process that starts the run
    (one node: this one; several: the launcher of node rank 0), not by torchrun workers; a run
    that was killed is resumed by the next, which takes its claim over."""
    from labse_common.output_dir import claim_output
    from labse_model import launcher

    if launcher.is_worker() or (str(args.nnodes) != "1" and args.node_rank != 0):
        return contextlib.nullcontext()
    return claim_output(args.output, resumable=True)


def check_launch_flags(args: argparse.Namespace) -> None:
    """The launch flags checked as the ``launch:`` section is (labse_common/sections/launch.py)
    before anything starts: a bad --nnodes, a --node-rank beyond it or an endpoint that is not
    HOST:PORT was a torchrun traceback, or minutes of DNS retries, once training started."""
    from labse_common.sections.launch import LaunchConfig

    if args.nproc_per_node < 1:
        raise UsageError("--nproc-per-node must be >= 1")
    try:
        LaunchConfig(
            nproc_per_node=args.nproc_per_node,
            nnodes=str(args.nnodes),
            node_rank=args.node_rank,
            rdzv_endpoint=args.rdzv_endpoint,
        ).validate()
    except UsageError as e:  # name the flags the user typed, not the config keys
        raise UsageError(re.sub(r"launch\.(\w+)", _flag_name, str(e))) from None


def _flag_name(m: re.Match) -> str:
    return "--" + m.group(1).replace("_", "-")


def launch_or_run(
    args: argparse.Namespace, worker_argv: Callable[[], list[str]], body: Callable[[], int]
) -> int:
    """torchrun with ``worker_argv()`` per worker when the flags ask for several processes or
    nodes, else ``body()`` here; the process group is shut down however the body ends."""
    from labse_model import launcher

    if launcher.needs_launch(args.nproc_per_node, args.nnodes, args.rdzv_endpoint):
        return launcher.launch(
            launcher.torchrun_args(
                worker_argv(),
                args.nproc_per_node,
                args.nnodes,
                args.node_rank,
                args.rdzv_endpoint,
                args.rdzv_backend,
                args.rdzv_id,
                args.max_restarts,
            )
        )
    from labse_model.distributed import shutdown

    try:
        return body()
    finally:
        shutdown()


def is_rank_zero() -> bool:
    """The process that prints the summary line (the only one without torchrun)."""
    return int(os.environ.get("RANK", "0")) == 0
