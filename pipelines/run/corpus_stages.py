"""The stages from the sources to the sentences: the synthetic sample, the demo's task, the
training inputs, the corpus jobs (Wikipedia, CommonCrawl, the quality classifier) and the
per-language sentences; with the helpers their declarations share."""

from __future__ import annotations

import dataclasses
import fnmatch
import glob
import os
from collections.abc import Callable

from labse_common.filesystems import is_remote
from pipelines import demo_data
from pipelines.run.declare import Command, Context, Paths, Stage, keys, stage

# --- helpers of the declarations -----------------------------------------------------------------


def source_patterns(ctx: Context, kind: str) -> list[str]:
    """``sources.<kind>`` with relative entries taken from ``ctx.base`` (and the demo's web text
    for commoncrawl; its pairs, alignment and text reach ``inputs`` as ``--demo``)."""
    pats = [p if is_remote(p) or os.path.isabs(p) else str(ctx.base / p) for p in ctx.sources[kind]]
    if ctx.demo is not None and kind == "commoncrawl":
        pats.append(str(ctx.d(DEMO) / demo_data.WEB))
    return pats


def has_source(ctx: Context, kind: str) -> bool:
    """Whether the run has ``sources.<kind>`` (pairs, eval): the user's or the demo's."""
    return bool(source_patterns(ctx, kind)) or ctx.demo is not None


def _corpus_stage(ctx: Context) -> Stage:
    """The CommonCrawl sentences to use: those of the quality classifier when it runs."""
    return COMMONCRAWL_Q if ctx.on.get(COMMONCRAWL_Q.name) else COMMONCRAWL


def expand_local(ctx: Context, patterns: list[str]) -> list[str]:
    """The local files of ``patterns`` (remote ones are the stage's to list). The synthetic
    sample's files are known before its stage wrote them, so its cache keys are stable."""
    found: set[str] = set()
    if ctx.synthetic:
        from pipelines.synthetic import data_files

        known = [str(ctx.base / f) for fs in data_files().values() for f in fs]
    for pat in patterns:
        if is_remote(pat):
            continue
        if ctx.synthetic and pat.startswith(str(ctx.base)):
            found.update(f for f in known if fnmatch.fnmatch(f, pat))
        else:
            found.update(glob.glob(pat))
    return sorted(found)


def _placeholders_to_glob(pattern: str) -> str:
    return pattern.replace("{src}", "*").replace("{trg}", "*").replace("{lang}", "*")


def _source_files(*kinds: str) -> Paths:
    """Fingerprinted inputs of ``sources.<kind>`` outside the run folder (the demo's are an
    upstream stage's output and the synthetic sample is a stage of its own): each local file,
    and each remote glob, fingerprinted by its listing (:func:`source_listing`)."""

    def files(ctx: Context) -> list[str]:
        pats = [_placeholders_to_glob(p) for k in kinds for p in source_patterns(ctx, k)]
        if ctx.synthetic:
            return []
        run = (ctx.remote or "").rstrip("/") + "/"
        remote = {p for p in pats if is_remote(p) and not (ctx.remote and p.startswith(run))}
        local = [f for f in expand_local(ctx, pats) if not f.startswith(str(ctx.out) + os.sep)]
        return [*local, *sorted(remote)]

    return files


def source_listing(pattern: str) -> dict:
    """A remote source glob's fingerprint: every object it matches with its size and time (what
    the filesystem's listing gives; one listing call, not one per object), so a replaced or
    added remote file reruns the stages that read it."""
    from labse_common import filesystems

    with filesystems.remote_failures():
        found = filesystems.filesystem(pattern).match([pattern])[0].metadata_list
    listing = sorted([m.path, m.size_in_bytes, m.last_updated_in_seconds] for m in found)
    return {"pattern": pattern, "files": listing}


def _corpus_inputs(ctx: Context, kind: str) -> list[str]:
    """What a corpus job is given: local globs expanded here (the cache key sees every file),
    remote ones and ``*.paths`` lists passed on for the job to list."""
    pats = source_patterns(ctx, kind)
    # What an upstream stage writes (the demo's web text) is named, not globbed: it may not be
    # there yet when the plan is made, and the command must be the same then and when it runs.
    ours = [
        p
        for p in pats
        if p.startswith(str(ctx.out) + os.sep) and not p.startswith(str(ctx.base) + os.sep)
    ]
    local = [
        p
        for p in pats
        if not is_remote(p) and not p.endswith((".paths", ".paths.gz")) and p not in ours
    ]
    listed = [p for p in pats if p not in local and p not in ours]
    return [*expand_local(ctx, local), *ours, *listed]


def _demo_files(ctx: Context) -> list[str]:
    """What the demo's builder reads: Tatoeba, and the UD text and PUD pairs when present."""
    if ctx.synthetic:
        return []
    return sorted(
        f for sub in ("tatoeba", "pud", "ud") for f in glob.glob(str(ctx.base / sub / "*"))
    )


def _quality_off(ctx: Context) -> str | None:
    return None if ctx.cfg["run"]["quality_bootstrap"] else "run.quality_bootstrap is false"


def _no_sources(kind: str) -> Callable[[Context], str | None]:
    # Off when its globs match no file too (another glob of the text to mine does: validate).
    return lambda c: (
        None
        if _corpus_inputs(c, kind)
        else f"sources.{kind} {'matches no file' if source_patterns(c, kind) else 'is empty'}"
    )


def _commoncrawl(ctx: Context, stage_name: str, *extra: object) -> Command:
    inputs = [a for f in _corpus_inputs(ctx, "commoncrawl") for a in ("--input", f)]
    prefix = ctx.sources["commoncrawl_prefix"]
    return ctx.py(
        "pipelines.commoncrawl",
        *inputs,
        *(["--paths-prefix", prefix] if prefix else []),
        "--output",
        ctx.d(stage_name),
        *ctx.config_args,
        "--overwrite",
        "--resume",
        "--resume-stage",
        stage_name,
        *extra,
        *ctx.beam_args,
    )


def _demo_keys(ctx: Context | None) -> tuple[str, ...]:
    """What the demo's builder reads: every key of sources.demo but the synthetic sample's."""
    from labse_common.sections.sources import DemoSource

    return tuple(
        f"sources.demo.{f.name}"
        for f in dataclasses.fields(DemoSource)
        if not f.name.startswith("synthetic_")
    )


# --- the stages, in run order --------------------------------------------------------------------


@stage(
    "embedded synthetic sample (demo without --data)",
    reads=(
        "sources.demo.synthetic_seed",
        "sources.demo.synthetic_train",
        "sources.demo.synthetic_dev",
    ),
    outputs=("tatoeba", "commoncrawl", "wikipedia", "SYNTHETIC.json"),
    off=lambda c: None if c.synthetic else "not the demo without --data",
)
def SYNTHETIC(c: Context) -> list[Command]:
    r = c.demo
    return [
        c.py(
            "pipelines.synthetic",
            "--output",
            c.d(SYNTHETIC),
            "--seed",
            r["synthetic_seed"],
            "--train",
            r["synthetic_train"],
            "--dev",
            r["synthetic_dev"],
        )
    ]


@stage(
    "the demo's sources: training pairs, and pairs with a known alignment hidden in web text",
    reads=_demo_keys,
    optional_inputs=(SYNTHETIC,),
    files=_demo_files,
    outputs=("pairs", "eval", demo_data.WEB, demo_data.HELDOUT, "stats.json"),
    off=lambda c: None if c.demo is not None else "sources.demo is null",
)
def DEMO(c: Context) -> list[Command]:
    return [c.py("pipelines.demo_data", "--data", c.base, "--output", c.d(DEMO), *c.config_args)]


@stage(
    "training pairs, evaluation alignment and training text from sources.pairs/eval/text",
    reads=(
        "sources.pairs",
        "sources.eval",
        "sources.text",
        "run.cds_trusted_pairs",
        "corpus.lid_model",
        "corpus.lid_threshold",
    ),
    optional_inputs=(DEMO,),
    files=_source_files("pairs", "eval", "text"),
    outputs=(
        "train_pairs.tsv",
        "train_groups",
        "trusted_pairs.tsv",
        "gold.tsv",
        "train_sentences",
        "stats.json",
    ),
)
def INPUTS(c: Context) -> list[Command]:
    args: list[object] = []
    for kind in ("pairs", "eval", "text"):
        for p in source_patterns(c, kind):
            args += [f"--{kind}", p]
    if c.demo is not None:
        args += ["--demo", c.d(DEMO)]
    lid = c.values["corpus"]["lid_model"]
    return [
        c.py(
            "pipelines.e2e_tasks",
            "inputs",
            *args,
            "--trusted",
            c.cfg["run"]["cds_trusted_pairs"],
            *(["--lid-model", lid] if lid else []),
            "--lid-threshold",
            c.values["corpus"]["lid_threshold"],
            "--output",
            c.d(INPUTS),
        )
    ]


@stage(
    "Wikipedia dump -> clean sentences (Beam)",
    reads=("sources.wikipedia", *keys("corpus"), "beam"),
    optional_inputs=(SYNTHETIC,),
    files=_source_files("wikipedia"),
    outputs=("stats.json",),
    off=_no_sources("wikipedia"),
    engine=True,
    resumable=True,  # by shard of input files: a rerun keeps the shards already cleaned
)
def WIKIPEDIA(c: Context) -> list[Command]:
    inputs = [a for f in _corpus_inputs(c, "wikipedia") for a in ("--input", f)]
    return [
        c.py(
            "pipelines.wikipedia",
            *inputs,
            "--output",
            c.d(WIKIPEDIA),
            *c.config_args,
            "--overwrite",
            "--resume",
            *c.beam_args,
        )
    ]


@stage(
    "CommonCrawl WET/WARC -> sentences (Beam, rule quality)",
    reads=("sources.commoncrawl", "sources.commoncrawl_prefix", *keys("corpus"), "beam"),
    optional_inputs=(SYNTHETIC, DEMO),
    files=_source_files("commoncrawl"),
    outputs=("stats.json", "_dropped"),
    off=_no_sources("commoncrawl"),
    engine=True,
    resumable=True,  # by shard of input files: a rerun keeps the shards already cleaned
)
def COMMONCRAWL(c: Context) -> list[Command]:
    return [_commoncrawl(c, "commoncrawl", "--write-dropped")]


@stage(
    "fastText quality classifier bootstrapped from the corpus outputs",
    inputs=(COMMONCRAWL,),
    optional_inputs=(WIKIPEDIA,),
    outputs=("quality.bin",),
    off=_quality_off,
)
def QUALITY(c: Context) -> list[Command]:
    pos = [a for s in (WIKIPEDIA, COMMONCRAWL) if c.on.get(s.name) for a in ("--positive", c.d(s))]
    return [
        c.py(
            "pipelines.quality",
            "train",
            *pos,
            "--negative",
            c.d(COMMONCRAWL),
            "--output",
            c.d(QUALITY) / "quality.bin",
        )
    ]


@stage(
    "CommonCrawl again with the trained quality classifier (Beam)",
    reads=("sources.commoncrawl", "sources.commoncrawl_prefix", *keys("corpus"), "beam"),
    inputs=(QUALITY,),
    optional_inputs=(SYNTHETIC, DEMO),
    files=_source_files("commoncrawl"),
    outputs=("stats.json",),
    off=_quality_off,
    engine=True,
    resumable=True,  # by shard of input files: a rerun keeps the shards already cleaned
)
def COMMONCRAWL_Q(c: Context) -> list[Command]:
    return [_commoncrawl(c, "commoncrawl_q", "--quality-model", c.d(QUALITY) / "quality.bin")]


@stage(
    "per-language sentences to mine (+ training sentences for the vocabulary)",
    inputs=(INPUTS,),
    optional_inputs=(WIKIPEDIA, COMMONCRAWL, COMMONCRAWL_Q),
    outputs=("mine", "vocab", "stats.json"),
    resumable=True,  # by language: a rerun keeps the languages already written
)
def SENTENCES(c: Context) -> list[Command]:
    corpora = [
        a for s in (WIKIPEDIA, _corpus_stage(c)) if c.on.get(s.name) for a in ("--corpus", c.d(s))
    ]
    return [
        c.py(
            "pipelines.e2e_tasks",
            "sentences",
            *corpora,
            "--extra",
            c.d(INPUTS) / "train_sentences",
            "--output",
            c.d(SENTENCES),
        )
    ]
