"""What the ``python -m mining`` commands share: the config and mining flags, the typed
``mining`` section they make, the input checks and the stats table. ``pipelines.mine`` (the
Beam mining job) takes the same scoring flags."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from labse_common.cli import add_config_options, add_log_level_option, load_config
from labse_common.errors import InputError
from labse_common.filesystems import is_remote
from labse_common.sections.mining import MARGINS, RETRIEVAL_MODES, MiningConfig


def add_config(p: argparse.ArgumentParser, section: str = "mining") -> None:
    """``--config``, ``--set`` (for ``section``) and ``--log-level``."""
    add_config_options(p, section, "k=8")
    add_log_level_option(p)


def add_scoring_options(p: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """Options of the exact/sharded mining core, shared with the Beam mining job."""
    g = p.add_argument_group("mining (each defaults to the config section, then the built-in)")
    g.add_argument("--k", type=int, help="neighbourhood size k for the margin (default 4)")
    g.add_argument(
        "--margin",
        choices=MARGINS,
        help="margin(a, b) = a/b, a-b or a (default ratio)",
    )
    g.add_argument("--mode", choices=RETRIEVAL_MODES, help="retrieval mode (default max)")
    g.add_argument(
        "--threshold", type=float, help="keep pairs with margin > T, in every mode (default: none)"
    )
    g.add_argument(
        "--unify",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="mine each distinct sentence once and map pairs back to all its rows (LASER --unify)",
    )
    g.add_argument("--mem-gb", type=float, help="working-set budget of the kNN search (default 2)")
    g.add_argument(
        "--shard-rows",
        type=int,
        help="rows per shard for sharded search, i.e. per task and per worker's memory "
        "(default: store shards)",
    )
    return g


def add_mining_options(p: argparse.ArgumentParser) -> None:
    """The scoring options plus lexicon, index, GPU and encoding ones (``mine``, ``mine-many``)."""
    g = add_scoring_options(p)
    g.add_argument(
        "--lexicon",
        metavar="FILE",
        help="IBM Model 1 dictionaries (`filters lexicon`'s lexicon.parquet): adds lex_fwd and "
        "lex_bwd to the mined pairs, and with mining.lexicon_weight > 0 re-ranks each "
        "sentence's mining.lexicon_candidates nearest by margin + weight * (lex_fwd + lex_bwd)",
    )
    g.add_argument(
        "--lexicon-weight",
        type=float,
        help="weight of the lexical scores (default 0: features only)",
    )
    g.add_argument(
        "--lexicon-candidates", type=int, help="candidates re-ranked per sentence (default 16)"
    )
    g.add_argument(
        "--index",
        help="flat (exact, blocked), auto (the planner's choice), ivf_flat, ivf_sq8, ivf_pq, "
        "ivf_pqfs, opq_ivf_pq (or ivf, ivfsq, ivfpq, opq), ivfNNN, or a FAISS factory string "
        "such as 'IVF4096,PQ64' (default flat)",
    )
    g.add_argument("--nprobe", type=int, help="IVF lists probed per query (default 16)")
    g.add_argument("--train-size", type=int, help="vectors sampled to train IVF/PQ (default 200k)")
    g.add_argument(
        "--rerank",
        type=int,
        help="approximate search fetches k*rerank candidates, re-scored exactly (default 16)",
    )
    g.add_argument(
        "--gpu",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="force FAISS on GPU / CPU (default: GPU when faiss sees one)",
    )
    g.add_argument("--batch-size", type=int, help="encoding batch size with --model (default 64)")
    g.add_argument(
        "--workers", type=int, help="processes for sharded exact search; >1 implies sharding"
    )


def mining_config(args: argparse.Namespace) -> MiningConfig:
    """The typed ``mining`` section (preset, --set, then flags): what the library takes."""
    flags = {f.name: getattr(args, f.name, None) for f in dataclasses.fields(MiningConfig)}
    return load_config("mining", args, flags)


def print_stats(report: dict) -> None:
    """The counts of a mining report as a table on stdout (the command's result)."""
    print(f"{'unit':<16}{'in':>10}{'out':>10}  dropped")
    for unit, c in report["counts"].items():
        dropped = ", ".join(f"{k}={v}" for k, v in c["dropped"].items()) or "-"
        print(f"{unit:<16}{c['in']:>10}{c['out']:>10}  {dropped}")
    print(f"rows written: {report.get('rows_written', 0)}")


def require_inputs(*flag_paths: tuple[str, str | None]) -> None:
    """Local inputs the user named exist, before an output is claimed (remote ones were
    preflighted by run_main)."""
    for flag, path in flag_paths:
        if path and not is_remote(path) and not Path(path).exists():
            raise InputError(path, "not found", flag)
