"""Beam job: sharded exact kNN mining between two embedding stores.

    python -m pipelines.mine --src-emb emb/de --trg-emb emb/en --output mined/de-en \
        [--k 4] [--margin ratio] [--mode max] [--threshold T] [--shard-rows R] [--mem-gb G] \
        [beam options, e.g. --runner FlinkRunner ...]

The per-shard kNN of ``mining.shards`` runs as Beam elements: one element per (direction, query
shard, base shard), each reading only its two shards (memory bounded by shard size). The partial
neighbour lists are grouped per query shard, merged in base-shard order (so the result equals the
local run bit for bit) and written to ``OUT/neighbours/{fwd,bwd}_NNNNN.npz``. The driver then
margin-scores them with the library (``mining.mine.finish_sharded``), exactly as
``python -m mining mine --shard-rows R`` does, and writes mined.parquet, mined.tsv.gz,
score_hist.png and stats.json.

Elements carry shard paths, shard numbers and the selected rows of their two shards; workers
read the stores and write the neighbour lists through Beam's FileSystems, so on a cluster the
stores live on any filesystem every worker reads (``s3://``, ``gs://``) and the lists go to
``--temp_location`` when one is given. The final outputs are written by the driver into --out.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions

from labse_common.cli import (
    add_config_options,
    add_log_level_option,
    add_output_option,
    add_overwrite_option,
    run_main,
)
from labse_common.embedding_store import MANIFEST, exists
from labse_common.errors import InputError, UsageError
from labse_common.logs import setup_logging
from labse_common.output_dir import OutputDir, join
from labse_common.remote import require_local
from labse_common.sections.mining import MiningConfig
from mining.__main__ import _print_stats, add_scoring_options, mining_config
from mining.knn import Neighbours
from mining.mine import finish_sharded, prepare_inputs
from mining.shards import (
    ShardRef,
    load_neighbour_parts,
    merge_parts,
    reps_in,
    save_neighbour_part,
    search_pair,
    shard_refs,
)
from pipelines.options import check_remote, pipeline_options, run_pipeline

log = logging.getLogger(__name__)

NB_DIR = "neighbours"
# Per direction: (query side, base side). fwd = each source row's targets.
DIRECTIONS = {"fwd": ("src", "trg"), "bwd": ("trg", "src")}

# (direction, q, b, q_ref, b_ref, k, (q_rows, q_lo), (b_rows, b_lo)): the selected rows of both
# shards travel with the task, so a worker needs no file but the two shards themselves.
Task = tuple[str, int, int, ShardRef, ShardRef, int, tuple, tuple]


class SearchShardPair(beam.DoFn):
    """A task -> ((direction, q), (b, sims, inds) or (b, None))."""

    def __init__(self, knn_cfg: MiningConfig) -> None:
        self.knn_cfg = knn_cfg

    def process(self, task: Task) -> Iterator[tuple[tuple[str, int], tuple[int, Any]]]:
        direction, qi, bi, q_ref, b_ref, k_all, (q_rows, q_lo), (b_rows, b_lo) = task
        res = search_pair(q_ref, q_rows, q_lo, b_ref, b_rows, b_lo, k_all, self.knn_cfg)
        yield (direction, qi), (bi, None if res is None else (res[1], res[2]))


class MergeAndWrite(beam.DoFn):
    """All base-shard parts of one query shard -> merged lists -> ``{direction}_{q:05d}.npz``
    in ``nb_dir``, through FileSystems (the job's output or ``--temp_location``)."""

    def __init__(self, nb_dir: str, spans: dict[str, list[tuple[int, int]]],
                 k_all: dict[str, int]) -> None:  # fmt: skip
        self.nb_dir = nb_dir
        self.spans = spans
        self.k_all = k_all

    def process(self, kv: tuple[tuple[str, int], Iterable[tuple[int, Any]]]) -> Iterator[str]:
        (direction, qi), parts = kv
        q_lo, q_n = self.spans[DIRECTIONS[direction][0]][qi]
        q_pos = np.arange(q_lo, q_lo + q_n, dtype=np.int64)
        # Base-shard order, as the local task merges: ties then resolve identically.
        ordered = [p for _, p in sorted(parts, key=lambda bp: bp[0])]
        q_pos, sims, inds = merge_parts(q_pos, self.k_all[direction], ordered)
        path = join(self.nb_dir, f"{direction}_{qi:05d}.npz")
        save_neighbour_part(path, q_pos, sims, inds)
        yield path


def make_tasks(refs: dict[str, list[ShardRef]], k_all: dict[str, int],
               reps: dict[str, np.ndarray]) -> list[Task]:  # fmt: skip
    """Every (direction, query shard, base shard) pair with the selected rows of both shards."""
    sel = {side: [reps_in(r, reps[side]) for r in refs[side]] for side in refs}
    tasks: list[Task] = []
    for direction, (q_side, b_side) in DIRECTIONS.items():
        for qi, q_ref in enumerate(refs[q_side]):
            for bi, b_ref in enumerate(refs[b_side]):
                tasks.append((direction, qi, bi, q_ref, b_ref, k_all[direction],
                              sel[q_side][qi], sel[b_side][bi]))  # fmt: skip
    return tasks


def build_pipeline(
    p: beam.Pipeline,
    tasks: Sequence[Task],
    nb_dir: str,
    spans: dict[str, list[tuple[int, int]]],
    k_all: dict[str, int],
    knn_cfg: MiningConfig,
) -> None:
    _ = (
        p
        | "Tasks" >> beam.Create(list(tasks))
        | "Spread" >> beam.Reshuffle()  # fan the tasks out over workers
        | "Search" >> beam.ParDo(SearchShardPair(knn_cfg))
        | "PerQueryShard" >> beam.GroupByKey()
        | "MergeWrite" >> beam.ParDo(MergeAndWrite(nb_dir, spans, k_all))
    )


def _list(pattern: str) -> list[str]:
    return sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)


def run_beam_mine(
    src_emb: str,
    trg_emb: str,
    out: str,
    cfg: MiningConfig,
    beam_args: Sequence[str],
    src_text: str | None = None,
    trg_text: str | None = None,
    src_lang: str = "",
    trg_lang: str = "",
    opts: PipelineOptions | None = None,
) -> dict:
    """Run the kNN as a Beam job, then score and write outputs with the library; the report.

    ``out`` is this job's (temporary) output folder; the neighbour lists go to
    ``out/neighbours/``, or under Beam's ``--temp_location`` when one is given (a bucket every
    worker can write), from where the driver reads them back.
    """
    if cfg.index != "flat":
        raise UsageError("the Beam job searches exactly: use --set index=flat (the default)")
    if opts is None:
        opts = pipeline_options(beam_args)  # first: it gives FileSystems the S3/GCS options
    for flag, path in (("--src-emb", src_emb), ("--trg-emb", trg_emb)):
        if not exists(path) and not exists(join(path, MANIFEST)):
            raise InputError(path, "embeddings not found", flag)
    src_text, trg_text = src_text or src_emb, trg_text or trg_emb
    inp = prepare_inputs(
        src_text, trg_text, out, cfg, src_emb, trg_emb, None, src_lang, trg_lang, sharded=True
    )
    rows = cfg.shard_rows
    refs = {"src": shard_refs(src_emb, rows), "trg": shard_refs(trg_emb, rows)}
    reps = {"src": inp.src.representative(), "trg": inp.trg.representative()}
    k_all = {d: min(cfg.k, len(reps[b])) for d, (_, b) in DIRECTIONS.items()}
    temp = opts.view_as(GoogleCloudOptions).temp_location
    nb_dir = join(temp, f"{NB_DIR}-{os.path.basename(out.rstrip('/'))}") if temp else join(
        out, NB_DIR)  # fmt: skip
    tasks = make_tasks(refs, k_all, reps)
    spans = {side: [(lo, len(rows)) for rows, lo in (reps_in(r, reps[side]) for r in refs[side])]
             for side in refs}  # fmt: skip
    log.info(
        "mining %d x %d sentences as %d Beam tasks (%d x %d shards, k=%d, %s, %s)",
        len(reps["src"]),
        len(reps["trg"]),
        len(tasks),
        len(refs["src"]),
        len(refs["trg"]),
        cfg.k,
        cfg.margin,
        cfg.mode,
    )
    p = beam.Pipeline(options=opts)
    build_pipeline(p, tasks, nb_dir, spans, k_all, cfg)
    run_pipeline(p)

    def lists(direction: str) -> tuple[np.ndarray, np.ndarray]:
        q_side = DIRECTIONS[direction][0]
        paths = _list(join(nb_dir, f"{direction}_*.npz"))
        return load_neighbour_parts(paths, len(reps[q_side]), k_all[direction])

    nb = Neighbours(*lists("fwd"), *lists("bwd"))
    if temp:
        FileSystems.delete(_list(join(nb_dir, "*.npz")))
    extra = {"src_text": str(src_text), "trg_text": str(trg_text), "runner": "beam"}
    return finish_sharded(inp, nb, refs["src"], refs["trg"], cfg, extra)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m pipelines.mine",
        description="Sharded exact kNN mining as a Beam job: one element per (direction, query "
        "shard, base shard), neighbour lists merged per query shard, then margin scoring and "
        "retrieval as `python -m mining mine`. Writes OUT/mined.parquet, OUT/mined.tsv.gz, "
        "OUT/score_hist.png, OUT/stats.json and OUT/neighbours/. Any option not listed here is "
        "passed to Beam, e.g. --runner FlinkRunner, --direct_running_mode in_memory.",
    )
    ap.add_argument("--src-emb", required=True, help="source embeddings: store directory or .npy")
    ap.add_argument("--trg-emb", required=True, help="target embeddings: store directory or .npy")
    add_output_option(ap, "output directory")
    ap.add_argument(
        "--src-text",
        help="source sentences (text or Parquet; default: the texts inside the --src-emb store)",
    )
    ap.add_argument("--trg-text", help="target sentences (default: the --trg-emb store's texts)")
    ap.add_argument("--src-lang", default="", help="source language code written in the output")
    ap.add_argument("--trg-lang", default="", help="target language code written in the output")
    add_scoring_options(ap)
    add_config_options(ap, "mining", "k=8")
    add_overwrite_option(ap, "a non-empty --output (old files are removed at the end)")
    add_log_level_option(ap)
    return ap


def run(argv: Sequence[str] | None = None) -> int:
    args, beam_args = build_parser().parse_known_args(argv)
    setup_logging(args.log_level)
    # Remote paths are checked in _run, with the job's own S3 options once they are parsed.
    return run_main(lambda: _run(args, beam_args), log, args=args, check_remote=False)


def _run(args: argparse.Namespace, beam_args: list[str]) -> int:
    # The driver scores and writes the outputs with local file APIs: say so before any work.
    require_local(args.output, "--output", "python -m pipelines.mine")
    cfg = mining_config(args)  # typed: shard_rows >= 1, k >= 1, no NaN, ...
    opts = pipeline_options(beam_args)  # first: it gives FileSystems the S3/GCS options
    check_remote([args.src_emb, args.trg_emb, args.src_text, args.trg_text], opts)
    with OutputDir(args.output, args.overwrite).open() as out:  # written aside, committed
        report = run_beam_mine(args.src_emb, args.trg_emb, out.tmp, cfg, beam_args,
                               args.src_text, args.trg_text, args.src_lang, args.trg_lang,
                               opts=opts)  # fmt: skip
    _print_stats(report)
    return 0


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
