"""Plan bounded-memory mining: index, shards, nprobe, predicted time and memory.

The planner's command line (flags read and checked, one line naming a wrong one, exit 2), over
:func:`mining.plan.make_plan` and, with ``--calibrate``, :func:`mining.plan_calibrate.calibrate`.

Kept apart from :mod:`mining.plan` so that the planner's formulas import nothing above them:
the calibration times the miners (``mining.bounded``, ``mining.knn``), which read the planner.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
from dataclasses import asdict
from decimal import Decimal, InvalidOperation

from labse_common.cli import add_log_level_option, command_parser, run_main
from labse_common.errors import UsageError
from labse_common.logs import setup_logging
from mining.plan import GPU_ASSUMED, KINDS, RERANK, make_plan, render

log = logging.getLogger("mining")


SUMMARY = """\
Choose the index type (a FAISS factory string), shard count and nprobe for mining N x M vectors
within G GB per worker, and predict time and memory from per-operation costs measured on the
development machine (--calibrate measures them here first)."""
EXAMPLES = (
    "python -m mining plan --n-src 1e6 --n-trg 1e6 --mem-gb 8",
    "python -m mining plan --n-src 5e8 --n-trg 5e8 --mem-gb 64 --workers 16 --calibrate --json",
)


def build_parser() -> argparse.ArgumentParser:
    p = command_parser("python -m mining plan", SUMMARY, examples=EXAMPLES)
    p.add_argument(
        "--n-src", type=str, required=True, help="source vectors: a whole number, 1000000 or 1e6"
    )
    p.add_argument("--n-trg", type=str, required=True, help="target vectors (as --n-src)")
    p.add_argument("--dim", type=str, default=768, help="vector dimension (default 768)")
    p.add_argument("--mem-gb", type=float, required=True, help="memory of one worker, GB")
    p.add_argument("--workers", type=str, default=1, help="workers (processes/machines)")
    p.add_argument("--cores", type=str, help="cores per worker (default: this machine's)")
    p.add_argument("--gpu", action="store_true", help="FAISS on a GPU per worker (assumed costs)")
    p.add_argument("--k", type=str, default=4, help="margin neighbourhood (default 4)")
    p.add_argument(
        "--rerank",
        type=str,
        default=RERANK,
        help=f"candidates k*rerank re-scored exactly (default {RERANK}, as mining.rerank)",
    )
    p.add_argument("--train-size", type=str, default=200_000, help="index training sample")
    p.add_argument(
        "--dtype",
        choices=["float16", "float32"],
        default="float16",
        help="store precision (bytes read per value)",
    )
    p.add_argument(
        "--exact-hours",
        type=float,
        default=1.0,
        help="choose exact search when predicted at most this long (default 1)",
    )
    p.add_argument(
        "--max-hours",
        type=float,
        default=6.0,
        help="otherwise the most accurate index predicted within this (default 6)",
    )
    p.add_argument("--index", choices=KINDS, help="force an index kind instead of choosing")
    p.add_argument("--nprobe", type=str, help="force nprobe")
    p.add_argument("--calibrate", action="store_true", help="measure the cost constants here first")
    p.add_argument(
        "--text-bytes",
        type=str,
        default=150,
        help="bytes of text, id and provenance per sentence, for the corpora that "
        "`mining mine` holds on the driver (default 150; 0: vectors only)",
    )
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    add_log_level_option(p)
    return p


#: The plan's whole-number flags and their least value (read by :func:`parse_count`).
COUNT_FLAGS = {
    "n_src": 1,
    "n_trg": 1,
    "dim": 1,
    "workers": 1,
    "k": 1,
    "rerank": 1,
    "train_size": 1,
    "cores": 1,
    "nprobe": 1,
    "text_bytes": 0,
}


def parse_count(value: str | int, flag: str, least: int = 1) -> int:
    """A whole number as people write sizes: ``1000000``, ``1_000_000`` or ``1e9`` (scientific
    notation whose value is a whole number, as the docs write corpus sizes); ``1.5``, ``nan``,
    ``inf`` or a value below ``least`` is a UsageError naming ``flag``."""
    if isinstance(value, int):
        n = value
    else:
        text = str(value).strip().replace("_", "")
        try:
            n = int(text)
        except ValueError:
            try:  # Decimal, not float: 1e18 + 1 must not round to a neighbour
                d = Decimal(text)
            except InvalidOperation:
                raise UsageError(f"{flag} {value}: not a whole number") from None
            if not d.is_finite() or d != d.to_integral_value():
                raise UsageError(f"{flag} {value}: not a whole number") from None
            n = int(d)
    if n < least:
        raise UsageError(f"{flag} {value}: must be >= {least}")
    return n


def _check_plan_args(args) -> None:
    """Every flag of ``mining plan`` read and checked: one line naming the flag if wrong."""
    for name, least in COUNT_FLAGS.items():
        if getattr(args, name) is not None:
            setattr(
                args, name, parse_count(getattr(args, name), f"--{name.replace('_', '-')}", least)
            )
    # float() reads "nan" and "inf": a comparison with NaN is always False, so test finiteness.
    if not (math.isfinite(args.mem_gb) and args.mem_gb > 0):
        raise UsageError(f"--mem-gb {args.mem_gb}: must be a positive finite number (GB)")
    if not (math.isfinite(args.max_hours) and args.max_hours > 0):
        raise UsageError(f"--max-hours {args.max_hours}: must be a positive finite number")
    if not (math.isfinite(args.exact_hours) and args.exact_hours >= 0):
        raise UsageError(f"--exact-hours {args.exact_hours}: must be a finite number >= 0")


def cmd_plan(args) -> int:
    _check_plan_args(args)
    costs = None
    if args.calibrate:
        from mining.plan_calibrate import calibrate  # FAISS and the miners: only when asked

        costs = calibrate(args.dim)
    if costs is not None and args.gpu:
        costs = dataclasses.replace(
            GPU_ASSUMED,
            read_s=costs.read_s,
            gather_s=costs.gather_s,
            gather_cached_s=costs.gather_cached_s,
            margin_s=costs.margin_s,
        )
    p = make_plan(
        args.n_src,
        args.n_trg,
        args.dim,
        args.mem_gb,
        args.workers,
        args.gpu,
        args.k,
        args.rerank,
        args.train_size,
        2 if args.dtype == "float16" else 4,
        args.exact_hours,
        args.index,
        args.nprobe,
        costs,
        args.cores,
        args.max_hours,
        args.text_bytes,
    )
    if args.json:
        out = p.to_json()
        if costs is not None:
            out["calibrated_costs"] = asdict(costs)
        print(json.dumps(out, indent=2))
    else:
        if costs is not None:
            print(
                "calibrated costs: "
                + ", ".join(
                    f"{a}={b:.3g}" for a, b in asdict(costs).items() if isinstance(b, float)
                )
            )
        print(render(p))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)
    return run_main(lambda: cmd_plan(args), log, args=args)
