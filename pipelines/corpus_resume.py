"""The corpus jobs resumable by shard (``--resume``): a killed job's rerun does only the rest.

A shard is a group of input files, cut from the sorted input list (``--files-per-shard``, by
default about :data:`MAX_SHARDS` shards in all), so the same inputs make the same shards. Each
shard not finished by an earlier attempt is its own Beam pipeline: read, parse and clean (the
costly part), written under ``OUTPUT/_partial/shard-NNNNN/``:

* ``kept/<lang>/<dedup shard>/*.parquet``: the kept rows before the dedup, sorted, in the file
  shuffle's spill format (:mod:`pipelines.spill`);
* ``_dropped/*.jsonl``: the rows the cleaning dropped (``--write-dropped``), as JSON so their
  values come back exactly as they left the cleaner;
* ``stats.json``: the cleaning's counts.

Only once a shard's pipeline ended is it recorded as finished (:mod:`labse_common.resume_shards`:
its files, sizes and hashes); a shard half-written when the job was killed, or damaged since, is
done again. Then one last pipeline deduplicates every shard's rows together, exactly as the
uninterrupted job does (the same merge of sorted spill files, so the same files row for row:
:class:`MergeShards`), writes ``<lang>/*.parquet``, ``_dropped/`` and a ``stats.json`` whose
counts are the shards' plus the dedup's, with ``shards`` and ``resumed_shards``. The shards'
folders are deleted before the commit; a kill during the last pipeline keeps them for the rerun.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import shutil
import uuid
from collections.abc import Iterator

import apache_beam as beam
from apache_beam.options.pipeline_options import DirectOptions, StandardOptions
from apache_beam.transforms.window import GlobalWindows

from labse_common import filesystems
from labse_common.config import to_dict
from labse_common.filesystems import is_remote
from labse_common.formats import DROPPED_SCHEMA
from labse_common.resume_shards import BOOKKEEPING, fingerprint
from labse_common.sections.corpus import CorpusConfig
from labse_common.stats import flatten
from pipelines import local_runner
from pipelines.clean import CleanDocuments
from pipelines.options import new_pipeline, run_pipeline
from pipelines.parquet_io import WriteParquet, WriteSentenceShard
from pipelines.spill import SENTENCES as _SPILL_FORMAT
from pipelines.spill import (
    MergeSpilled,
    SpillRows,
    _write_rows,
    merge_sorted,
    reduce_spilled,
    remove_spill,
    spill_dir,
)
from pipelines.stats_io import write_stats
from pipelines.tagged import join_sinks, with_outputs
from pipelines.tags import DROPPED, STATS

log = logging.getLogger(__name__)

#: Shards in all when ``--files-per-shard`` is not given: a pipeline's start is not free.
MAX_SHARDS = 64
#: A merge of shards smaller than this (bytes) on the local runner runs in one process.
SMALL_MERGE = 64 << 20
KEPT = "kept"
DROPPED_DIR = "_dropped"
_PREFIX = "shard-"


def plan_shards(inputs: list[str], files_per_shard: int | None) -> list[list[str]]:
    """The input files cut into shards, in sorted order (the same inputs, the same shards)."""
    files = sorted(inputs)
    n = files_per_shard or max(1, math.ceil(len(files) / MAX_SHARDS))
    return [files[i : i + n] for i in range(0, len(files), n)]


def resume_key(
    inputs: list[str], groups: list[list[str]], args: argparse.Namespace, cfg: CorpusConfig
) -> str:
    """What makes the shards what they are: the local inputs and models (names, sizes, times),
    every input's name, the shards' cut, the config and the job's own options."""
    skip = {"output", "overwrite", "log_level", "resume", "resume_stage"}
    own = {k: v for k, v in sorted(vars(args).items()) if k not in skip}
    local = [p for p in (*inputs, cfg.lid_model, cfg.quality_model) if p and not is_remote(p)]
    settings = {
        "inputs": inputs,
        "shards": [len(g) for g in groups],
        "config": to_dict(cfg),
        "args": own,
    }
    return fingerprint([p for p in local if os.path.exists(p)], settings)


def write_resumed(
    output: str, shards, documents, groups, args, opts, cfg: CorpusConfig, stage: str
) -> None:
    """Every shard not finished yet, then the output from all of them into ``output`` (module
    docstring). ``shards``: a :class:`labse_common.resume_shards.Shards`, local (``output`` is
    its folder) or on object storage (beside ``output``)."""
    names = [f"{_PREFIX}{i:05d}" for i in range(len(groups))]
    for name, files in zip(names, groups):
        if shards.finished(name):
            continue
        folder = shards.begin(name)
        log.info("%s: shard %s (%d file(s))", stage, name, len(files))
        with new_pipeline(opts) as p:
            docs, stats = documents(p, files, args, cfg)
            clean_shard(docs, folder, cfg, stats, stage)
            run_pipeline(p)
        shards.end(name)
    local = not is_remote(output)
    if local:
        _clear_output(output, set(names))
    extra = {
        "inputs": sum(map(len, groups)),
        "config": to_dict(cfg),
        "shards": len(names),
        "resumed_shards": shards.resumed,
    }
    dirs = [shards.path(n) for n in names]
    with _small_merge_in_process(opts, dirs), new_pipeline(opts) as p:
        merge_shards(p, output, dirs, cfg, stage, extra)
        run_pipeline(p)
    remove_spill(output)
    if local:  # not part of the output; their records go with _partial at the commit
        for name in names:
            shutil.rmtree(shards.path(name))
    log.info("%s: %d shard(s), %d kept from an earlier attempt", stage, len(names), shards.resumed)


@contextlib.contextmanager
def _small_merge_in_process(opts, dirs: list[str]) -> Iterator[None]:
    """A merge of less than :data:`SMALL_MERGE` bytes on the local runner runs in its one
    process: starting its worker processes costs seconds, more than the merge (the demo's
    corpus is a few MB). The files written are the same either way."""
    direct = opts.view_as(DirectOptions)
    runner = opts.view_as(StandardOptions).runner
    local = runner in (local_runner.NAME, "DirectRunner") and not any(map(is_remote, dirs))
    was = direct.direct_running_mode
    if local and sum(os.path.getsize(p) for d in dirs for p in _list(d)) < SMALL_MERGE:
        direct.direct_running_mode = "in_memory"
    try:
        yield
    finally:
        direct.direct_running_mode = was


def _clear_output(partial: str, names: set[str]) -> None:
    """What a merge killed midway wrote next to the shards goes: the merge writes it again."""
    for entry in os.listdir(partial):
        if entry not in names and entry not in BOOKKEEPING:
            path = os.path.join(partial, entry)
            shutil.rmtree(path) if os.path.isdir(path) else os.unlink(path)


def clean_shard(docs: list, folder: str, cfg: CorpusConfig, stats: list, stage: str) -> None:
    """Documents -> the shard's kept rows (sorted spill files), dropped rows and stats."""
    kept_dir = filesystems.join(folder, KEPT)
    sinks, dropped = [], []
    for i, branch in enumerate(docs):
        sfx = f"{i}" if i else ""
        cleaned = with_outputs(
            branch, f"Clean{sfx}", CleanDocuments(cfg), STATS, DROPPED, main="kept"
        )
        stats, dropped = [*stats, cleaned[STATS]], [*dropped, cleaned[DROPPED]]
        # Each branch spilled on its own: a Flatten of two stages' rows is held in memory by
        # Beam's local engine (pipelines/sentences.py).
        sinks.append(
            cleaned.kept | f"Spill{sfx}" >> beam.ParDo(SpillRows(kept_dir, cfg.spill_rows))
        )
    if cfg.write_dropped:
        sinks.append(
            tuple(dropped)
            | "AllDropped" >> beam.Flatten()
            | "WriteDropped" >> beam.ParDo(_JsonLines(filesystems.join(folder, DROPPED_DIR)))
        )
    sinks.append(write_stats(stats, folder, stage, {}))
    join_sinks(sinks)


class _JsonLines(beam.DoFn):
    """Rows -> one JSON-lines file per bundle under ``folder`` (a plain DoFn: Beam's text sink
    needs side inputs, which not every runner evaluates well); yields the file's path."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self._rows: list[str] = []

    def start_bundle(self) -> None:
        self._rows = []

    def process(self, row: dict):
        self._rows.append(json.dumps(row, ensure_ascii=False))

    def finish_bundle(self):
        if not self._rows:
            return
        path = filesystems.join(self.folder, f"{uuid.uuid4().hex}.jsonl")
        with filesystems.create(path) as f:
            f.write(("\n".join(self._rows) + "\n").encode("utf-8"))
        self._rows = []
        yield GlobalWindows.windowed_value(path)


def _list(folder: str) -> list[str]:
    """Every file under ``folder`` (local or remote), sorted."""
    if is_remote(folder):
        return sorted(filesystems.match(folder.rstrip("/") + "/**"))
    return sorted(os.path.join(d, n) for d, _, ns in os.walk(folder) for n in ns)


def _kept_groups(shard_dirs: list[str]) -> list[tuple[str, list[str]]]:
    """``("<lang>\t<dedup shard>", spill files of every shard)``, in a fixed order."""
    groups: dict[str, list[str]] = {}
    for d in shard_dirs:
        top = filesystems.join(d, KEPT)
        for path in _list(top):
            lang, shard, _ = path[len(top) + 1 :].replace(os.sep, "/").split("/")
            groups.setdefault(f"{lang}\t{shard}", []).append(path)
    return sorted(groups.items())


def _dropped_files(shard_dirs: list[str]) -> list[str]:
    return [p for d in shard_dirs for p in _list(filesystems.join(d, DROPPED_DIR))]


def _shard_stats(folder: str) -> dict:
    with filesystems.open_read(filesystems.join(folder, "stats.json")) as f:
        return flatten(json.loads(f.read().decode("utf-8")))


def _read_jsonl(path: str):
    with filesystems.open_read(path) as f:
        for line in f.read().decode("utf-8").splitlines():
            if line:
                yield json.loads(line)


def merge_shards(p, output: str, shard_dirs: list[str], cfg: CorpusConfig, stage: str, extra):
    """The last pipeline: every shard's rows deduplicated together into ``output`` as the
    uninterrupted job writes them; its stats the shards' and the dedup's, summed."""
    writer = WriteSentenceShard(output, cfg.rows_per_file, cfg.row_group_rows)
    merge = MergeShards(writer, cfg.dedup, cfg.write_dropped, cfg.spill_fan_in, spill_dir(output))
    groups = p | "Groups" >> beam.Create(_kept_groups(shard_dirs)) | "Spread" >> beam.Reshuffle()
    written = with_outputs(groups, "WriteSentences", merge, STATS, DROPPED, main="files")
    shard_stats = [_shard_stats(d) for d in shard_dirs]
    stats = [p | "ShardStats" >> beam.Create(shard_stats), written[STATS]]
    sinks = [written.files]
    if cfg.write_dropped:
        earlier = (
            p
            | "DroppedFiles" >> beam.Create(_dropped_files(shard_dirs))
            | "ReadDropped" >> beam.FlatMap(_read_jsonl)
        )
        sinks.append(
            (earlier, written[DROPPED])
            | "AllDropped" >> beam.Flatten()
            | "WriteDropped"
            >> WriteParquet(output, DROPPED_SCHEMA, cfg.rows_per_file, 1, subdir=DROPPED_DIR)
        )
    sinks.append(write_stats(stats, output, stage, extra))
    join_sinks(sinks)


class MergeShards(MergeSpilled):
    """:class:`MergeSpilled` over the shards' spill files, which it leaves in place (a kill
    during the merge keeps the shards for the rerun): a first round of more than ``fan_in``
    files is written to ``scratch`` in runs as :func:`pipelines.spill.reduce_spilled` makes
    them, and only what was written there is deleted. The rows come out in the same order as from one merge."""

    def __init__(self, writer, dedup: bool, keep_collapsed: bool, fan_in: int, scratch: str):
        super().__init__(writer, dedup, keep_collapsed, fan_in)
        self.scratch = scratch

    def process(self, kv):
        key, paths = kv
        paths = sorted(paths)
        ours: list[str] = []
        if len(paths) > self.fan_in:
            lang, shard = key.split("\t")
            for i in range(0, len(paths), self.fan_in):
                out = filesystems.join(self.scratch, lang, shard, f"first-{i:08d}.parquet")
                _write_rows(merge_sorted(paths[i : i + self.fan_in]), out, _SPILL_FORMAT)
                ours.append(out)
            paths = ours = reduce_spilled(ours, self.fan_in)  # deletes what it merged: ours
        yield from self.writer.write_entries(key, self._entries(merge_sorted(paths)))
        if ours:
            filesystems.delete(ours)
