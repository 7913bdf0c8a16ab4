"""One command from a user's raw crawl, dumps and pairs to NMT-ready bitext: resumable, with a
person in the loop and a report.

    python -m pipelines.run --config CONFIG [--data DIR] [--output DIR] [--set section.key=value ...]
        [--publish URL] [--from STAGE | --only STAGE] [--dry-run] [--list]

What a run reads is the ``sources:`` section (CommonCrawl WET/WARC globs or ``*.paths`` lists,
Wikipedia dumps, plain text, training pairs named ``{src}-{trg}``, known alignments), what it mines
is ``mining.pairs`` (any languages the language-ID model knows), ``model.init`` starts from an
encoder the user already has (no vocabulary or pretraining; training only when train.steps > 0),
``beam:`` is the runner of every Beam stage and ``launch:`` how the training stages start
(torchrun). The demo preset is one such config: its ``sources.demo`` task builder
(:mod:`pipelines.demo_data`) hides pairs with a known alignment in web text.

Every stage is declared once, below, by a small function under ``@stage(...)``: its name (the
function's, lower-cased), what it does, the config keys it reads, the stages it reads, the files
it must leave, and the command line(s) that run it (the function's body). ``--list`` prints the
declarations. Each stage runs as a child process through its own CLI (so a stage's memory is
returned when it ends and a kill is what it would be in production), writes into
``OUTPUT/<stage>/``, and on success the runner writes ``OUTPUT/_state/<stage>.manifest.json``: a
hash of the config keys the stage reads and of its command, the fingerprints of its inputs (an
upstream stage's hash; size, mtime and content hash of a data file) and the list of files it
wrote. A rerun skips a stage only when its manifest matches and its files are all there; a stage
that reruns makes every stage after it that reads it rerun too. A killed or failed run therefore
resumes at the stage that did not finish, and a changed setting reruns exactly the stages that
read it and those downstream of them.

A person labels the sample of mined pairs: unless ``sources.label_from`` is ``eval``, the run
stops after ``sample`` with exit status 3 and one line naming ``OUTPUT/labels.tsv`` (label it with
``python -m filters label OUTPUT/labels.tsv`` or any editor); the same command then continues.

The whole ``OUTPUT`` is claimed while the runner works (``OUTPUT/_CLAIM.json``, as every
command's output folder): a second runner on the same folder stops with exit status 2 naming
the claim. The claim of a runner that was killed is taken over by the next run (see
:func:`labse_common.output_dir.resumable_claim`).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import fnmatch
import glob
import hashlib
import json
import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from labse_common.cli import EXIT_NEEDS_LABELS, LABELS_NEEDED, add_log_level_option, run_main
from labse_common.config import ConfigError, apply_overrides, from_dict, read_preset, section_class
from labse_common.datafiles import read_json
from labse_common.errors import InputError, UsageError
from labse_common.logs import setup_logging
from labse_common.output_dir import resumable_claim
from labse_common.remote import require_local
from pipelines import demo_data

log = logging.getLogger("pipelines.run")

ROOT = Path(__file__).resolve().parent.parent
# Kept beside the stage folders, not in them: a stage's CLI owns its output folder (it may refuse
# a non-empty one or replace it whole).
STATE = "_state"
SMALL_FILE = 64 << 20  # data files up to this size are content-hashed; larger: size + mtime
# Keys that change what a command prints, never what it writes: not part of any stage's hash.
DISPLAY_ONLY = ("progress",)

Command = list[str]


def manifest_path(out: Path, stage: str) -> Path:
    return out / STATE / f"{stage}.manifest.json"


def progress_path(out: Path, stage: str) -> Path:
    return out / STATE / f"{stage}.in_progress.json"


@dataclass
class Context:
    """What a stage's command builder may look at: folders, the effective config, the plan."""

    out: Path
    base: Path  # relative source globs are taken from here (--data, the synthetic sample or cwd)
    synthetic: bool
    config_file: Path  # the effective config (preset + --set) every stage CLI reads
    cfg: dict  # as written to config_file
    python: str = sys.executable
    on: dict[str, bool] = field(default_factory=dict)  # stage -> runs in this plan (not off)
    soft_failed: dict[str, str] = field(default_factory=dict)  # optional stage -> its error
    _values: dict | None = None

    @property
    def values(self) -> dict:
        """Every section as the typed loader reads it (defaults filled in): what is hashed."""
        if self._values is None:
            self._values = typed_config(self.cfg)
        return self._values

    @property
    def sources(self) -> dict:
        return self.values["sources"]

    @property
    def demo(self) -> dict | None:
        return self.sources["demo"]

    @property
    def init(self) -> str | None:
        """The encoder the user gave (model.init), as an absolute path."""
        init = self.values["model"]["init"]
        return str(Path(init).resolve()) if init else None

    def d(self, stage: Stage | str) -> Path:
        return self.out / (stage.name if isinstance(stage, Stage) else stage)

    def py(self, module: str, *args: object) -> Command:
        return [self.python, "-m", module, *map(str, args)]

    @property
    def config_args(self) -> list[str]:
        return ["--config", str(self.config_file)]

    @property
    def beam_args(self) -> list[str]:
        """The ``beam:`` section as Beam options, given to every Beam stage."""
        from labse_common.sections.beam import BeamConfig

        return BeamConfig(**self.values["beam"]).args()

    @property
    def launch_args(self) -> list[str]:
        """The ``launch:`` section as ``labse_model`` options, given to the training stages."""
        from labse_common.sections.launch import LaunchConfig

        return LaunchConfig(**self.values["launch"]).args()

    @property
    def pairs(self) -> list[str]:
        """``mining.pairs``, normalised (``deu-fra`` -> ``de-fr``), in the configured order."""
        from labse_common.langs import parse_pair

        return list(dict.fromkeys("-".join(parse_pair(p)) for p in self.values["mining"]["pairs"]))

    @property
    def langs(self) -> list[str]:
        """Every language of the mined pairs, each once."""
        return list(dict.fromkeys(lang for p in self.pairs for lang in p.split("-")))

    @property
    def corpus_stage(self) -> Stage:
        return COMMONCRAWL_Q if self.on.get(COMMONCRAWL_Q.name) else COMMONCRAWL

    @property
    def model(self) -> Path:
        """The encoder that embeds: the trained one, else the one the user gave."""
        return self.d(TRAIN) / "model" if self.on.get(TRAIN.name) else Path(self.init or "")

    def source_patterns(self, kind: str) -> list[str]:
        """``sources.<kind>`` with relative entries taken from :attr:`base` (and the demo's web
        text for commoncrawl; its pairs, alignment and text reach ``inputs`` as ``--demo``)."""
        pats = [
            p if "://" in p or os.path.isabs(p) else str(self.base / p) for p in self.sources[kind]
        ]
        if self.demo is not None:
            from pipelines import demo_data

            if kind == "commoncrawl":
                pats.append(str(self.d(DEMO) / demo_data.WEB))
        return pats

    def has(self, kind: str) -> bool:
        """Whether the run has ``sources.<kind>`` (pairs, eval): the user's or the demo's."""
        return bool(self.source_patterns(kind)) or self.demo is not None


Paths = Callable[[Context], list[str]]


@dataclass(frozen=True)
class Stage:
    """One stage of the run; declared with :func:`stage`."""

    name: str
    what: str
    reads: Callable[[Context], tuple[str, ...]]  # config keys (section[.sub].key) it reads
    inputs: tuple[str, ...]  # upstream stages it needs (one that is off turns this one off)
    optional_inputs: tuple[str, ...]  # upstream stages it reads when they run
    outputs: Paths  # paths under OUTPUT/<name>/ that must exist after it ran
    files: Paths  # data files it reads (outside OUTPUT)
    commands: Callable[[Context], list[Command]]
    off: Callable[[Context], str | None]  # None, or why the stage does not run in this setup
    resumable: bool = False  # keep a half-finished output folder (the CLI resumes from it)
    # A refinement the bitext can do without (the filters): when it fails (e.g. calibrate finds
    # no threshold reaching its target on this sample), the run goes on without it, the stages
    # after it fall back, and the plan and report say why.
    optional: bool = False

    def deps(self, ctx: Context) -> list[str]:
        """The upstream stages this stage reads in this plan."""
        return [*self.inputs, *(s for s in self.optional_inputs if ctx.on.get(s))]


STAGES: list[Stage] = []


def stage(
    what: str,
    *,
    reads: Iterable[str] | Callable[[Context], tuple[str, ...]] = (),
    inputs: Sequence[Stage] = (),
    optional_inputs: Sequence[Stage] = (),
    outputs: Sequence[str] | Paths = (),
    files: Paths = lambda ctx: [],
    off: Callable[[Context], str | None] = lambda ctx: None,
    resumable: bool = False,
    optional: bool = False,
) -> Callable[[Callable[[Context], list[Command]]], Stage]:
    """Declare a stage: decorates the function that builds its command lines; the function's
    name, lower-cased, is the stage's name and the decorated name is the :class:`Stage` (so
    ``VOCAB.name == "vocab"``, and other modules import the constant, never the string). Stages
    run in the order they are declared; ``inputs`` are Stage objects, so an upstream stage is
    always declared first."""

    def declare(build: Callable[[Context], list[Command]]) -> Stage:
        s = Stage(
            name=build.__name__.lower(),
            what=what,
            reads=reads if callable(reads) else (lambda ctx, r=tuple(reads): r),
            inputs=tuple(i.name for i in inputs),
            optional_inputs=tuple(i.name for i in optional_inputs),
            outputs=outputs if callable(outputs) else (lambda ctx, o=list(outputs): list(o)),
            files=files,
            commands=build,
            off=off,
            resumable=resumable,
            optional=optional,
        )
        if any(t.name == s.name for t in STAGES):
            raise RuntimeError(f"stage {s.name!r} declared twice")
        STAGES.append(s)
        return s

    return declare


def keys(section: str, *, but: Iterable[str] = ()) -> tuple[str, ...]:
    """Every key of ``section`` (from its dataclass, so a new key is covered) except ``but`` and
    the display-only ones."""
    skip = {*but, *DISPLAY_ONLY}
    return tuple(
        f"{section}.{f.name}"
        for f in dataclasses.fields(section_class(section))
        if f.name not in skip
    )


# --- helpers of the declarations -----------------------------------------------------------------


def expand_local(ctx: Context, patterns: list[str]) -> list[str]:
    """The local files of ``patterns`` (remote ones are the stage's to list). The synthetic
    sample's files are known before its stage wrote them, so its cache keys are stable."""
    found: set[str] = set()
    if ctx.synthetic:
        from pipelines.synthetic import data_files

        known = [str(ctx.base / f) for fs in data_files().values() for f in fs]
    for pat in patterns:
        if "://" in pat:
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
    upstream stage's output and the synthetic sample is a stage of its own)."""

    def files(ctx: Context) -> list[str]:
        pats = [_placeholders_to_glob(p) for k in kinds for p in ctx.source_patterns(k)]
        if ctx.synthetic:
            return []
        return [f for f in expand_local(ctx, pats) if not f.startswith(str(ctx.out) + os.sep)]

    return files


def _corpus_inputs(ctx: Context, kind: str) -> list[str]:
    """What a corpus job is given: local globs expanded here (the cache key sees every file),
    remote ones and ``*.paths`` lists passed on for the job to list."""
    pats = ctx.source_patterns(kind)
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
        if "://" not in p and not p.endswith((".paths", ".paths.gz")) and p not in ours
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


def _init_files(ctx: Context) -> list[str]:
    """The files of model.init (a replaced checkpoint reruns what embeds with it)."""
    if not ctx.init or ctx.on.get(TRAIN.name):
        return []
    return sorted(str(p) for p in Path(ctx.init).rglob("*") if p.is_file())[:200]


def _quality_off(ctx: Context) -> str | None:
    return None if ctx.cfg["run"]["quality_bootstrap"] else "run.quality_bootstrap is false"


def _no_sources(kind: str) -> Callable[[Context], str | None]:
    return lambda c: None if c.source_patterns(kind) else f"sources.{kind} is empty"


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
        *extra,
        *ctx.beam_args,
    )


def _trained_off(ctx: Context) -> str | None:
    return f"model.init is given ({ctx.init})" if ctx.init else None


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
    outputs=("train_pairs.tsv", "trusted_pairs.tsv", "gold.tsv", "train_sentences", "stats.json"),
)
def INPUTS(c: Context) -> list[Command]:
    args: list[object] = []
    for kind in ("pairs", "eval", "text"):
        for p in c.source_patterns(kind):
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
)
def COMMONCRAWL_Q(c: Context) -> list[Command]:
    return [_commoncrawl(c, "commoncrawl_q", "--quality-model", c.d(QUALITY) / "quality.bin")]


@stage(
    "per-language sentences to mine (+ training sentences for the vocabulary)",
    inputs=(INPUTS,),
    optional_inputs=(WIKIPEDIA, COMMONCRAWL, COMMONCRAWL_Q),
    outputs=("mine", "vocab", "stats.json"),
)
def SENTENCES(c: Context) -> list[Command]:
    corpora = [
        a for s in (WIKIPEDIA, c.corpus_stage) if c.on.get(s.name) for a in ("--corpus", c.d(s))
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


@stage(
    "smoothed multilingual wordpiece vocabulary (Beam + learner)",
    reads=(*keys("vocab"), "beam"),
    inputs=(SENTENCES,),
    outputs=("vocab.txt", "tokenizer.json", "vocab_stats.json", "stats.json"),
    off=_trained_off,
)
def VOCAB(c: Context) -> list[Command]:
    return [
        c.py(
            "pipelines.vocab",
            "--input",
            c.d(SENTENCES) / "vocab",
            "--output",
            c.d(VOCAB),
            *c.config_args,
            "--overwrite",
            *c.beam_args,
        )
    ]


@stage(
    "MLM + TLM pretraining with progressive stacking",
    reads=(*keys("model", but=("init",)), *keys("pretrain"), "launch"),
    inputs=(SENTENCES, INPUTS, VOCAB),
    outputs=("model",),
    resumable=True,
    off=_trained_off,
)
def PRETRAIN(c: Context) -> list[Command]:
    return [
        c.py(
            "labse_model",
            "pretrain",
            *c.config_args,
            "--sentences",
            c.d(SENTENCES) / "vocab",
            "--pairs",
            c.d(INPUTS) / "train_pairs.tsv",
            "--vocab",
            c.d(VOCAB),
            "--output",
            c.d(PRETRAIN),
            *c.launch_args,
        )
    ]


def _train_off(c: Context) -> str | None:
    if c.init and c.values["train"]["steps"] == 0:
        return f"model.init is given ({c.init}) and train.steps is 0"
    return None


@stage(
    "dual encoder, additive-margin softmax (torchrun-capable); fine-tunes model.init when given",
    reads=(*keys("model"), *keys("train"), "launch"),
    inputs=(INPUTS,),
    optional_inputs=(VOCAB, PRETRAIN),
    files=lambda c: [],
    outputs=("model", "metrics.jsonl", "stats.json"),
    resumable=True,
    off=_train_off,
)
def TRAIN(c: Context) -> list[Command]:
    # From model.init (fine-tuning: its own tokenizer), else from the pretrained encoder.
    start = (
        ["--init", c.init] if c.init else ["--vocab", c.d(VOCAB), "--init", c.d(PRETRAIN) / "model"]
    )
    return [
        c.py(
            "labse_model",
            "train",
            *c.config_args,
            "--pairs",
            c.d(INPUTS) / "train_pairs.tsv",
            *start,
            "--output",
            c.d(TRAIN),
            *c.launch_args,
        )
    ]


@stage(
    "embedding store per language of mining.pairs",
    reads=("run.embed_batch_size", "mining.pairs", "model.init"),
    inputs=(SENTENCES,),
    optional_inputs=(TRAIN,),
    files=_init_files,
    outputs=lambda c: c.langs,
)
def EMBED(c: Context) -> list[Command]:
    return [
        c.py(
            "pipelines.e2e_tasks",
            "embed",
            "--sentences",
            c.d(SENTENCES) / "mine",
            "--langs",
            *c.langs,
            "--model",
            c.model,
            "--output",
            c.d(EMBED),
            "--batch-size",
            c.cfg["run"]["embed_batch_size"],
        )
    ]


@stage(
    "FAISS kNN + margin scoring of every pair of mining.pairs",
    reads=keys("mining"),
    inputs=(SENTENCES, EMBED),
    outputs=lambda c: [f"{p}/mined.parquet" for p in c.pairs],
)
def MINE(c: Context) -> list[Command]:
    return [
        c.py(
            "mining",
            "mine-many",
            "--pairs",
            *c.pairs,
            "--corpus",
            str(c.d(SENTENCES) / "mine" / "{lang}"),
            "--emb",
            str(c.d(EMBED) / "{lang}"),
            "--output",
            c.d(MINE),
            *c.config_args,
            "--overwrite",
        )
    ]


@stage(
    "bitext hard rules on the mined pairs (kept, dropped with reasons)",
    reads=keys("pair_rules"),
    inputs=(MINE,),
    outputs=lambda c: [f"{p}/kept.parquet" for p in c.pairs] + ["kept_all.parquet"],
    optional=True,
)
def RULES(c: Context) -> list[Command]:
    per_pair = [
        c.py(
            "filters",
            "rules",
            "--pairs",
            c.d(MINE) / p / "mined.parquet",
            "--src-lang",
            p.split("-")[0],
            "--trg-lang",
            p.split("-")[1],
            "--output",
            c.d(RULES) / p,
            "--write-dropped",
            *c.config_args,
        )
        for p in c.pairs
    ]
    # The CDS commands take one pair file.
    concat = c.py(
        "pipelines.e2e_tasks",
        "concat",
        *[c.d(RULES) / p / "kept.parquet" for p in c.pairs],
        "--output",
        c.d(RULES) / "kept_all.parquet",
    )
    return [*per_pair, concat]


def _cds_off(c: Context) -> str | None:
    if not c.has("pairs"):
        return "no training pairs (sources.pairs) to be the CDS scorer's trusted side"
    return None


@stage(
    "CDS scorer: noisy candidates vs trusted pairs",
    reads=keys("cds", but=("calibrate",)),
    inputs=(RULES, INPUTS),
    optional_inputs=(VOCAB,),
    outputs=("stats.json",),
    optional=True,
    off=_cds_off,
)
def CDS_TRAIN(c: Context) -> list[Command]:
    vocab = c.d(VOCAB) if c.on.get(VOCAB.name) else c.init
    return [
        c.py(
            "filters",
            "cds-train",
            "--noisy",
            c.d(RULES) / "kept_all.parquet",
            "--trusted",
            c.d(INPUTS) / "trusted_pairs.tsv",
            "--vocab",
            vocab,
            "--output",
            c.d(CDS_TRAIN),
            "--overwrite",
            *c.config_args,
        )
    ]


@stage(
    "CDS scores of the rule-filtered pairs",
    reads=("cds.device", "cds.threads", "cds.score_batch_size"),  # the rest: from the model
    inputs=(RULES, CDS_TRAIN),
    outputs=("scored.parquet", "stats.json"),
    optional=True,
)
def CDS_SCORE(c: Context) -> list[Command]:
    return [
        c.py(
            "filters",
            "cds-score",
            "--model",
            c.d(CDS_TRAIN),
            "--pairs",
            c.d(RULES) / "kept_all.parquet",
            "--output",
            c.d(CDS_SCORE),
            "--overwrite",
            *c.config_args,
        )
    ]


def _candidates(c: Context) -> Path:
    """The pairs the final filter judges: scored by CDS when it ran, else as the rules kept them."""
    if c.on.get(CDS_SCORE.name):
        return c.d(CDS_SCORE) / "scored.parquet"
    return c.d(RULES) / "kept_all.parquet"


def _label_from_eval(c: Context) -> bool:
    return c.sources["label_from"] == "eval"


@stage(
    "sample of the MINED pairs to label (language pair x margin strata); with "
    "sources.label_from=eval labelled from half 0 of the eval alignment",
    reads=("combine.sample_size", "combine.margin_buckets", "combine.seed", "sources.label_from"),
    inputs=(RULES, INPUTS),
    optional_inputs=(CDS_SCORE,),
    outputs=("sample.tsv", "sample.parquet", "stats.json"),
)
def SAMPLE(c: Context) -> list[Command]:
    # Half 0 of a stable split of the source sentences labels the sample; EVAL measures half 1.
    planted = ["--planted", c.d(INPUTS) / "gold.tsv", "--half", 0] if _label_from_eval(c) else []
    return [
        c.py(
            "filters",
            "sample",
            "--pairs",
            _candidates(c),
            *planted,
            "--output",
            c.d(SAMPLE),
            "--overwrite",
            *c.config_args,
        )
    ]


def person_labels(out: Path) -> Path:
    """The file a person labels (``python -m filters label``); the run waits for it."""
    return out / "labels.tsv"


def _label_files(c: Context) -> list[str]:
    files = [str(person_labels(c.out))] if person_labels(c.out).is_file() else []
    earlier = c.values["combine"]["labels"]
    return files + ([str(Path(earlier).resolve())] if earlier else [])


@stage(
    "the person's labels (OUTPUT/labels.tsv, prefilled from combine.labels): the run stops "
    f"with exit status {EXIT_NEEDS_LABELS} until enough pairs are labelled",
    reads=("combine.labels", "combine.min_labelled", "combine.min_per_label"),
    inputs=(SAMPLE, RULES),
    optional_inputs=(CDS_SCORE,),
    files=_label_files,
    outputs=("labels.tsv", "stats.json"),
    off=lambda c: (
        "sources.label_from is eval (labelled from the alignment)" if _label_from_eval(c) else None
    ),
)
def LABELS(c: Context) -> list[Command]:
    earlier = c.values["combine"]["labels"]
    comb = c.values["combine"]
    return [
        c.py(
            "pipelines.e2e_tasks",
            "labels",
            "--sample",
            c.d(SAMPLE) / "sample.parquet",
            "--candidates",
            _candidates(c),
            "--file",
            person_labels(c.out),
            *(["--earlier", Path(earlier).resolve()] if earlier else []),
            "--min-labelled",
            comb["min_labelled"],
            "--min-per-label",
            comb["min_per_label"],
            "--output",
            c.d(LABELS),
        )
    ]


@stage(
    "combined pair score fitted on the labelled sample; threshold for combine.target GOOD with its interval",
    reads=keys("combine", but=("sample_size", "margin_buckets", "labels")),
    inputs=(SAMPLE, RULES),
    optional_inputs=(CDS_SCORE, LABELS),
    outputs=("scored.parquet", "model.json", "combined.json", "stats.json"),
)
def COMBINE(c: Context) -> list[Command]:
    # Not optional: an unreachable target stops the run here under combine.on_unreachable=stop.
    labels = c.d(SAMPLE) / "sample.tsv" if _label_from_eval(c) else c.d(LABELS) / "labels.tsv"
    return [
        c.py(
            "filters",
            "combine",
            "--pairs",
            _candidates(c),
            "--labels",
            labels,
            "--output",
            c.d(COMBINE),
            "--overwrite",
            *c.config_args,
        )
    ]


@stage(
    "the final NMT-ready bitext (Parquet, TSV.gz, Moses, Hugging Face folder), every dropped pair with its reason",
    reads=("run.min_margin",),
    inputs=(MINE,),
    optional_inputs=(RULES, COMBINE),
    outputs=("bitext.parquet", "bitext.tsv.gz", "rejected.parquet", "stats.json", "hf/README.md"),
)
def BITEXT(c: Context) -> list[Command]:
    combined = ["--combined", c.d(COMBINE)] if c.on.get(COMBINE.name) else []
    rules = ["--rules", c.d(RULES)] if c.on.get(RULES.name) else []
    return [
        c.py(
            "filters",
            "export",
            "--mined",
            c.d(MINE),
            *combined,
            *rules,
            "--min-margin",
            c.cfg["run"]["min_margin"],
            "--output",
            c.d(BITEXT),
            "--overwrite",
        )
    ]


def _eval_off(c: Context) -> str | None:
    if not c.has("eval"):
        return "no known alignment (sources.eval is empty)"
    return None


@stage(
    "precision/recall of the bitext against sources.eval; the demo's retrieval on held-out pairs",
    reads=("eval.scoring", "eval.k", "eval.langs", "sources.label_from"),
    inputs=(INPUTS, BITEXT, SENTENCES),
    optional_inputs=(TRAIN, DEMO),
    outputs=("mined_pr.json",),
    off=_eval_off,
)
def EVAL(c: Context) -> list[Command]:
    half = ["--half", 1] if _label_from_eval(c) else ["--every-pair"]
    cmds = [
        c.py(
            "pipelines.e2e_tasks",
            "score",
            "--bitext",
            c.d(BITEXT),
            "--gold",
            c.d(INPUTS) / "gold.tsv",
            "--sentences",
            c.d(SENTENCES) / "mine",
            *half,
            "--output",
            c.d(EVAL),
        )
    ]
    if c.demo is not None:  # the demo's held-out pairs: Tatoeba-style retrieval accuracy
        cmds.insert(
            0,
            c.py(
                "mining",
                "eval",
                "tatoeba",
                "--model",
                c.model,
                "--data",
                c.d(DEMO) / demo_data.HELDOUT,
                "--prefix",
                "heldout",
                "--output",
                c.d(EVAL) / "tatoeba",
                *c.config_args,
            ),
        )
    return cmds


# Every stage before it reaches EVAL or BITEXT: a stage that reruns reruns the report too.
@stage(
    "report.md + self-contained report.html",
    reads=("run.report_examples",),
    inputs=(BITEXT,),
    optional_inputs=(EVAL,),
    outputs=("report.md", "report.html"),
)
def REPORT(c: Context) -> list[Command]:
    return [
        c.py(
            "pipelines.report",
            "--run",
            c.out,
            "--output",
            c.d(REPORT),
            "--examples",
            c.cfg["run"]["report_examples"],
        )
    ]


BY_NAME = {s.name: s for s in STAGES}
NAMES = [s.name for s in STAGES]
FILTER_STAGES = (RULES, CDS_TRAIN, CDS_SCORE, SAMPLE, LABELS, COMBINE)


# --- fingerprints and manifests ----------------------------------------------------------------


def _sha(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def file_fingerprint(path: str) -> dict:
    """size + mtime, plus the content hash of files up to SMALL_FILE bytes."""
    st = os.stat(path)
    fp = {"path": path, "size": st.st_size, "mtime": int(st.st_mtime)}
    if st.st_size <= SMALL_FILE:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        fp["sha256"] = h.hexdigest()[:16]
    return fp


def _relative(obj: object, out: Path) -> object:
    """Commands with OUTPUT spelled as $OUT, so a moved output folder keeps its manifests."""
    if isinstance(obj, list):
        return [_relative(o, out) for o in obj]
    return str(obj).replace(str(out), "$OUT")


def _listing(d: Path) -> list[list]:
    files = []
    for p in sorted(d.rglob("*")):
        if p.is_file():
            files.append([str(p.relative_to(d)), p.stat().st_size])
    return files


def config_value(values: dict, key: str) -> object:
    """``section``, ``section.key`` or ``section.sub.key`` of the typed config."""
    node: object = values
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(key)
        node = node[part]
    return node


def stage_reads(stage: Stage, ctx: Context) -> dict[str, object]:
    """The values of the config keys the stage reads (what its ``config`` hash is made of)."""
    return {k: config_value(ctx.values, k) for k in stage.reads(ctx)}


@dataclass
class Plan:
    stage: Stage
    action: str  # run | skip | off | missing
    reason: str
    key: str = ""
    parts: dict = field(default_factory=dict)


def stage_parts(stage: Stage, ctx: Context, keys: dict[str, str]) -> dict:
    """What a stage's cache key is made of, each part hashed on its own (to say what changed)."""
    cmds = _relative(stage.commands(ctx), ctx.out)
    # The config file path is in every command; what the stage reads of it is in `config`.
    cfg_arg = _relative(str(ctx.config_file), ctx.out)
    cmds = [[a for a in c if a != cfg_arg] for c in cmds]
    return {
        "config": _sha(stage_reads(stage, ctx)),
        "command": _sha([c[1:] for c in cmds]),  # not the interpreter's path
        "upstream": {d: keys.get(d, "") for d in stage.deps(ctx)},
        "files": {os.path.basename(f): _sha(file_fingerprint(f)) for f in stage.files(ctx)},
    }


def read_manifest(out: Path, stage: str) -> tuple[dict | None, str | None]:
    """(manifest, None), or (None, why there is none usable): a damaged or wrong-shaped
    manifest means the stage reruns, said in the plan and the log, never a traceback."""
    p = manifest_path(out, stage)
    if not p.exists():
        return None, "no manifest (never finished)"
    try:
        m = read_json(p, "manifest")
    except InputError as e:
        log.warning("%s: rerun: manifest unreadable (%s)", stage, e.problem)
        return None, f"manifest unreadable ({e.problem})"
    outputs = m.get("outputs")
    if not (
        isinstance(m.get("key"), str)
        and isinstance(m.get("parts"), dict)
        and isinstance(outputs, list)
        and all(isinstance(o, list) and len(o) == 2 for o in outputs)
    ):
        log.warning("%s: rerun: manifest unreadable (%s: not a runner manifest)", stage, p)
        return None, "manifest unreadable (not a runner manifest)"
    return m, None


def _why_rerun(old: dict, parts: dict, key: str, d: Path) -> str | None:
    if old.get("key") != key:
        before = old["parts"]
        changed = [k for k in ("config", "command") if before.get(k) != parts[k]]
        for kind, label in (("upstream", "input"), ("files", "file")):
            a, b = before.get(kind), parts[kind]
            a = a if isinstance(a, dict) else {}
            changed += [f"{label} {n}" for n in sorted(set(a) | set(b)) if a.get(n) != b.get(n)]
        return "changed: " + (", ".join(changed) or "key")
    for rel, size in old["outputs"]:
        p = d / str(rel)
        if not p.is_file() or p.stat().st_size != size:
            return f"output missing or changed: {rel}"
    return None


def _why_off(s: Stage, ctx: Context) -> str | None:
    if s.name in ctx.soft_failed:
        return f"failed in this run (optional stage, skipped): {ctx.soft_failed[s.name]}"
    why = s.off(ctx)
    if why:
        return why
    gone = [d for d in s.inputs if not ctx.on.get(d, False)]
    return f"needs {', '.join(gone)}, which is off" if gone else None


def make_plan(
    ctx: Context, start: str | None = None, only: Sequence[str] | None = None
) -> list[Plan]:
    """Every stage: run (and why), skip (up to date), off (and why) or missing (an input of
    --from/--only that is not complete)."""
    ctx.on = {}
    for s in STAGES:  # in order: whether a stage is on may depend on its upstream stages
        ctx.on[s.name] = _why_off(s, ctx) is None
    keys: dict[str, str] = {}
    plans: list[Plan] = []
    rerun: set[str] = set()
    forced: set[str] = set()
    if start:
        forced = set(NAMES[NAMES.index(start) :])
    if only:
        forced = set(only)
    for s in STAGES:
        why_off = _why_off(s, ctx)
        if why_off:
            plans.append(Plan(s, "off", why_off))
            continue
        parts = stage_parts(s, ctx, keys)
        key = _sha(parts)
        keys[s.name] = key
        old, reason = read_manifest(ctx.out, s.name)
        if old is not None:
            reason = _why_rerun(old, parts, key, ctx.d(s))
        up = [u for u in s.deps(ctx) if u in rerun]
        if s.name in forced:
            reason = "--only" if only else "--from"
        elif up:
            reason = reason or f"upstream {', '.join(up)} reruns"
        if forced and s.name not in forced:
            before = NAMES.index(s.name) < min(NAMES.index(n) for n in forced)
            if reason and before:  # an input of the forced stages that is not complete
                plans.append(Plan(s, "missing", reason, key, parts))
            else:
                plans.append(
                    Plan(
                        s,
                        "skip",
                        "up to date" if not reason else f"not selected ({reason})",
                        key,
                        parts,
                    )
                )
            continue
        if reason:
            rerun.add(s.name)
            plans.append(Plan(s, "run", reason, key, parts))
        else:
            plans.append(Plan(s, "skip", "up to date", key, parts))
    return plans


# --- running -------------------------------------------------------------------------------------


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("OMP_NUM_THREADS", "2")
    return env


def _die_with_runner() -> None:
    """In a stage's child before it starts: the kernel sends it SIGTERM when the runner dies,
    however it dies (``kill -9`` included), so no stage goes on writing into a run folder whose
    next runner takes the claim. Linux only; elsewhere the child outlives a killed runner."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        pass


PR_SET_PDEATHSIG = 1


class StageFailed(Exception):
    def __init__(self, stage: str, rc: int, logfile: Path, tail: list[str]) -> None:
        super().__init__(f"stage {stage} failed (exit status {rc}); log: {logfile}")
        self.rc = rc
        self.tail = tail


def _progress_key(out: Path, stage: str) -> str | None:
    p = progress_path(out, stage)
    if not p.exists():
        return None
    try:
        return read_json(p).get("key")
    except InputError:
        return None


def run_stage(plan: Plan, ctx: Context) -> dict:
    """Run a stage's commands as children; returns its manifest (raises StageFailed)."""
    s = plan.stage
    d = ctx.d(s)
    logs = ctx.out / "_logs"
    logs.mkdir(parents=True, exist_ok=True)
    (ctx.out / STATE).mkdir(exist_ok=True)
    if d.exists() and not (s.resumable and _progress_key(ctx.out, s.name) == plan.key):
        shutil.rmtree(d)
    d.mkdir(parents=True, exist_ok=True)
    manifest_path(ctx.out, s.name).unlink(missing_ok=True)
    _write_json(progress_path(ctx.out, s.name), {"key": plan.key, "started": time.time()})
    t0 = time.time()
    peak_kb, cpu = 0, 0.0
    logfile = logs / f"{s.name}.log"
    with open(logfile, "a", encoding="utf-8") as logf:
        for cmd in s.commands(ctx):
            logf.write(f"$ {' '.join(map(str, cmd))}\n")
            logf.flush()
            child = subprocess.Popen(
                list(map(str, cmd)),
                stdout=logf,
                stderr=subprocess.STDOUT,
                env=_child_env(),
                cwd=str(ROOT),
                preexec_fn=_die_with_runner,
            )
            try:
                # wait4 gives this child's own resource use: peak RSS of the child (and of the
                # grandchildren it waited for), not a high-water mark of the whole run.
                _, status, usage = os.wait4(child.pid, 0)
            except BaseException:  # Ctrl-C or SIGTERM of the runner alone: stop the child too
                child.terminate()
                child.wait()
                raise
            child.returncode = os.waitstatus_to_exitcode(status)
            peak_kb = max(peak_kb, usage.ru_maxrss)
            cpu += usage.ru_utime + usage.ru_stime
            if child.returncode != 0:
                tail = logfile.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
                raise StageFailed(s.name, child.returncode, logfile, tail)
    missing = [o for o in s.outputs(ctx) if not (d / o).exists()]
    if missing:
        raise StageFailed(s.name, 1, logfile, [f"declared outputs missing: {missing}"])
    manifest = {
        "stage": s.name,
        "key": plan.key,
        "parts": plan.parts,
        "reads": stage_reads(s, ctx),
        "commands": _relative(s.commands(ctx), ctx.out),
        "outputs": _listing(d),
        "seconds": round(time.time() - t0, 2),
        "cpu_seconds": round(cpu, 2),
        "peak_rss_mb": round(peak_kb / 1024, 1),
        "finished": time.time(),
    }
    _write_json(manifest_path(ctx.out, s.name), manifest)
    progress_path(ctx.out, s.name).unlink(missing_ok=True)
    return manifest


def _write_json(path: Path, doc: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    os.replace(tmp, path)


# --- configuration and inputs --------------------------------------------------------------------


def typed_config(cfg: dict) -> dict:
    """Every known section through its dataclass (defaults filled in, types checked), as data."""
    from labse_common.config import section_names

    return {
        name: dataclasses.asdict(from_dict(section_class(name), cfg.get(name) or {}, prefix=name))
        for name in section_names()
    }


def effective_config(preset: str, overrides: list[str]) -> dict:
    """The preset with --set overrides applied, every section type-checked (ConfigError)."""
    cfg = apply_overrides(read_preset(preset), overrides)
    from labse_common.config import section_names

    unknown = sorted(set(cfg) - set(section_names()))
    if unknown:
        raise ConfigError(
            f"unknown config section(s) {', '.join(unknown)}; known: {', '.join(section_names())}"
        )
    values = typed_config(cfg)
    cfg["run"] = values["run"]  # the runner's own section, defaults filled in
    return cfg


def _require_nonempty(path: Path, what: str) -> None:
    if not path.is_file() or path.stat().st_size == 0:
        raise InputError(path.parent, f"{what}: no {path.name} (or it is empty)", "--data")


def _line_count(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def validate_demo(data: Path, demo: dict) -> None:
    """--data in the demo's layout, checked before anything runs (and with --dry-run): one
    InputError naming the file, instead of a stage failing minutes later."""
    if not data.is_dir():
        raise InputError(
            data, "not a folder (the demo expects tatoeba/, wikipedia/, commoncrawl/)", "--data"
        )
    tatoeba = data / "tatoeba"
    if not tatoeba.is_dir():
        raise InputError(
            data,
            "no tatoeba/ folder inside (the demo's layout: tatoeba/, wikipedia/, commoncrawl/)",
            "--data",
        )
    from labse_common.langs import TATOEBA_TO_LID

    for key in ("langs", "train_languages"):
        bad = [c for c in demo[key] or [] if c not in TATOEBA_TO_LID or c == "eng"]
        if bad:
            raise ConfigError(
                f"sources.demo.{key}: unknown Tatoeba code(s) {', '.join(bad)} "
                f"(known: {', '.join(sorted(set(TATOEBA_TO_LID) - {'eng'}))})"
            )
    for code in sorted({*demo["langs"], *(demo["train_languages"] or [])}):
        for side in (code, "eng"):
            _require_nonempty(tatoeba / f"train.{code}-eng.{side}", f"training pairs of {code}")
    for code in demo["langs"]:
        for split in ("train", "dev"):
            a, b = tatoeba / f"{split}.{code}-eng.{code}", tatoeba / f"{split}.{code}-eng.eng"
            for f in (a, b):
                _require_nonempty(f, f"{split} pairs of {code} (sources.demo.langs)")
            na, nb = _line_count(a), _line_count(b)
            if na != nb:  # the alignment would be shifted from the first missing line on
                raise InputError(a, f"{na} lines vs {nb} in {b.name}", "--data")


def validate_synthetic(demo: dict) -> None:
    from pipelines.synthetic import LANGS

    for key in ("langs", "train_languages"):
        bad = [c for c in demo[key] or [] if c not in LANGS]
        if bad:
            raise ConfigError(
                f"sources.demo.{key}: {', '.join(bad)} not in the synthetic sample "
                f"({', '.join(c for c in LANGS if c != 'eng')}); give --data for other languages"
            )


def validate_sources(ctx: Context) -> None:
    """Every source and setting the plan depends on, before anything runs (and with --dry-run):
    a glob that matches nothing, a language the LID model does not know, a checkpoint that is not
    one, a run with nothing to mine or nothing to train on is one line and exit status 2."""
    from labse_common.langs import LID_LANGS, TATOEBA_TO_LID, parse_pair
    from labse_common.sources import expand_pairs, expand_texts

    src, demo = ctx.sources, ctx.demo
    if not ctx.values["mining"]["pairs"]:
        raise ConfigError(
            "mining.pairs is empty: name the language pairs to mine, e.g. [de-en, de-fr]"
        )
    for p in ctx.values["mining"]["pairs"]:
        try:
            parse_pair(p)
        except ValueError as e:
            raise ConfigError(f"mining.pairs: {e}") from None
    if demo is not None:
        unmined = [c for c in demo["langs"] if f"{TATOEBA_TO_LID[c]}-en" not in ctx.pairs]
        if unmined:
            raise ConfigError(
                f"sources.demo.langs {unmined} are hidden in the web text but not mined: "
                f"add {', '.join(TATOEBA_TO_LID[c] + '-en' for c in unmined)} to mining.pairs"
            )
    if not ctx.synthetic:
        user = lambda kind: [p for p in ctx.source_patterns(kind) if not p.startswith(str(ctx.out))]  # noqa: E731
        for kind in ("commoncrawl", "wikipedia"):
            for pat in user(kind):
                if "://" not in pat and not glob.glob(pat):
                    raise UsageError(f"sources.{kind}: {pat!r} matches no file")
        for kind, expand in (
            ("pairs", expand_pairs),
            ("eval", expand_pairs),
            ("text", expand_texts),
        ):
            if user(kind):  # each glob must match a file whose name gives its languages
                expand(user(kind), None, f"sources.{kind}")
        from labse_common.remote import check_paths, remote_paths

        check_paths(remote_paths([*user("commoncrawl"), *user("wikipedia")]))
    if not (ctx.source_patterns("commoncrawl") or ctx.source_patterns("wikipedia")):
        raise ConfigError(
            "sources.commoncrawl and sources.wikipedia are both empty: nothing to mine"
        )
    if src["label_from"] == "eval" and not ctx.has("eval"):
        raise ConfigError(
            "sources.label_from is eval but sources.eval is empty: no alignment to label from"
        )
    if ctx.init:
        _check_init(Path(ctx.init))
    trains = not (ctx.init and ctx.values["train"]["steps"] == 0)
    if trains and not ctx.has("pairs"):
        why = (
            "model.init is not given"
            if not ctx.init
            else f"train.steps is {ctx.values['train']['steps']}"
        )
        raise ConfigError(
            f"sources.pairs is empty and {why}: nothing to train the encoder on; give "
            "training pairs, or model.init with train.steps=0 to mine with it as it is"
        )
    missing = [lang for lang in ctx.langs if lang not in LID_LANGS]
    if missing:  # parse_pair checks this too; kept for a table edited by hand
        raise ConfigError(f"mining.pairs: {missing} unknown to the language-ID model")
    labels = ctx.values["combine"]["labels"]
    if labels and not Path(labels).is_file():
        raise InputError(labels, "no such labels file", "combine.labels")


def _check_init(path: Path) -> None:
    """model.init must be an encoder folder: HF (config.json) or sentence-transformers
    (modules.json), with its tokenizer."""
    if not path.is_dir():
        raise InputError(path, "not a folder (model.init names an encoder folder)", "model.init")
    if not ((path / "config.json").is_file() or (path / "modules.json").is_file()):
        raise InputError(
            path,
            "no config.json or modules.json: not a Hugging Face or "
            "sentence-transformers encoder folder",
            "model.init",
        )
    if not any(path.rglob("vocab.txt")) and not any(path.rglob("tokenizer.json")):
        raise InputError(
            path, "no vocab.txt or tokenizer.json: the encoder's tokenizer is missing", "model.init"
        )


# --- CLI -----------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m pipelines.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="stages, in order: " + " -> ".join(NAMES),
    )
    ap.add_argument(
        "--config",
        default="demo",
        metavar="PRESET|FILE",
        help="preset (demo, paper) or YAML file; every stage reads its section (demo)",
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override a config value, e.g. --set mining.k=8 (repeatable)",
    )
    ap.add_argument(
        "--data",
        metavar="DIR",
        help="folder the relative globs of sources: are taken from (default: the current folder); "
        "for the demo preset the ../shared/data layout (tatoeba/, wikipedia/, commoncrawl/), and "
        "without it the demo runs on the embedded synthetic sample",
    )
    ap.add_argument("--output", default="demo_out", metavar="DIR", help="run folder (demo_out)")
    ap.add_argument(
        "--publish",
        metavar="URL",
        help="at the end, copy the final bitext folder (Parquet, TSV, Moses, hf/) and the report "
        "to URL (s3://, gs:// or a local folder); checked before any stage runs",
    )
    ap.add_argument(
        "--from",
        dest="start",
        choices=NAMES,
        metavar="STAGE",
        help="rerun STAGE and every stage after it (earlier ones must be complete)",
    )
    ap.add_argument(
        "--only",
        type=_stage_list,
        metavar="STAGE[,STAGE...]",
        help="rerun these stages alone, e.g. --only wikipedia,commoncrawl (their inputs must be "
        "complete; the stages after them are left as they are)",
    )
    ap.add_argument(
        "--dry-run", action="store_true", help="print the plan (run/skip and why) and exit"
    )
    ap.add_argument(
        "--list",
        action="store_true",
        help="print every stage: what it does, the config keys and stages it reads",
    )
    add_log_level_option(ap)
    return ap


def _stage_list(value: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    wrong = [n for n in names if n not in NAMES]
    if wrong or not names:
        raise argparse.ArgumentTypeError(
            f"unknown stage {', '.join(wrong) or repr(value)} (stages: {', '.join(NAMES)})"
        )
    return names


def describe_stages() -> str:
    lines = []
    for s in STAGES:
        lines.append(f"{s.name}: {s.what}")
        lines.append(f"    reads config: {', '.join(s.reads(None)) or '-'}")
        ups = [*s.inputs, *(f"{o} (when it runs)" for o in s.optional_inputs)]
        lines.append(f"    reads stages: {', '.join(ups) or '-'}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)
    return run_main(lambda: _main(args), log)


def _main(args: argparse.Namespace) -> int:
    if args.list:
        sys.stdout.write(describe_stages())
        return 0
    if args.start and args.only:
        raise UsageError("--from and --only exclude each other")
    require_local(args.output, "--output", "the stage runner")
    cfg = effective_config(args.config, args.set)
    out = Path(args.output).resolve()
    demo = typed_config(cfg)["sources"]["demo"]
    if args.data and "://" in args.data:
        raise UsageError(f"--data {args.data}: the stage runner reads a local folder")
    synthetic = demo is not None and not args.data
    if synthetic:
        base = out / SYNTHETIC.name
        validate_synthetic(demo)
    else:
        base = Path(args.data).resolve() if args.data else Path.cwd()
        if args.data and not base.is_dir():
            raise InputError(base, "not a folder", "--data")
        if demo is not None:
            validate_demo(base, demo)
    ctx = Context(
        out=out, base=base, synthetic=synthetic, config_file=out / "_config.yaml", cfg=cfg
    )
    validate_sources(ctx)
    if args.publish:
        from labse_common.publish import check_destination

        check_destination(args.publish, "--publish")
    if args.dry_run:
        sys.stdout.write(_plan_lines(make_plan(ctx, args.start, args.only)))
        return 0
    # The whole run folder is this runner's until it ends (however it ends); a runner killed
    # outright leaves its claim behind, which the next run takes over.
    with resumable_claim(out):
        rc = _run(ctx, args)
    if rc == 0 and args.publish:
        _publish(ctx, args.publish)
    return rc


def _publish(ctx: Context, url: str) -> None:
    """The final bitext folder, with the report inside it, copied to ``url``."""
    from labse_common.publish import publish

    report = ctx.d(REPORT)
    staging = ctx.out / "_publish"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(ctx.d(BITEXT), staging)
    if report.is_dir():
        shutil.copytree(report, staging / "report")
    try:
        summary = publish(staging, url, "--publish")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log.info("published %s files (%s bytes) to %s", summary.get("files"), summary.get("bytes"), url)
    sys.stdout.write(f"  published: {url}\n")


def _plan_lines(plans: list[Plan]) -> str:
    width = max(len(n) for n in NAMES)
    return "".join(f"{p.stage.name:<{width}}  {p.action:<11} {p.reason}\n" for p in plans)


def _run(ctx: Context, args: argparse.Namespace) -> int:
    plans = make_plan(ctx, args.start, args.only)
    missing = [p for p in plans if p.action == "missing"]
    if missing:
        names = ", ".join(f"{p.stage.name} ({p.reason})" for p in missing)
        raise UsageError(f"needed stages are not complete: {names}; run without --from/--only")
    _write_config(ctx)
    todo = [p for p in plans if p.action == "run"]
    log.info(
        "run folder %s; data: %s; %d stage(s) to run, %d up to date, %d off",
        ctx.out,
        "synthetic sample" if ctx.synthetic else ctx.base,
        len(todo),
        sum(p.action == "skip" for p in plans),
        sum(p.action == "off" for p in plans),
    )
    history = {
        "plan": _plan_record(plans),
        "data": "synthetic" if ctx.synthetic else str(ctx.base),
        "started": time.time(),
        "ran": [],
    }
    _write_json(ctx.out / "_run.json", history)
    from tqdm import tqdm

    bar = tqdm(total=len(todo), desc="stages", unit="stage", disable=not sys.stderr.isatty())
    done: set[str] = set()
    n = 0
    try:
        while todo:
            p = todo.pop(0)
            n += 1
            total = n + len(todo)
            log.info(
                "[%d/%d] %s: running (%s) — %s", n, total, p.stage.name, p.reason, p.stage.what
            )
            try:
                m = run_stage(p, ctx)
            except StageFailed as e:
                if e.rc == EXIT_NEEDS_LABELS:  # not a failure: the run waits for a person
                    msg = next(
                        (ln for ln in reversed(e.tail) if ln.startswith(LABELS_NEEDED)),
                        f"{LABELS_NEEDED} see {e}",
                    )
                    history["waiting_for"] = p.stage.name
                    _write_json(ctx.out / "_run.json", history)
                    again = shlex.join(["python", "-m", "pipelines.run", *sys.argv[1:]])
                    sys.stderr.write(f"{msg.strip()}; then run the same command again ({again})\n")
                    return EXIT_NEEDS_LABELS
                log.error("%s", e)
                for line in e.tail:
                    log.error("  | %s", line)
                if not p.stage.optional:
                    history["failed"] = p.stage.name
                    _write_json(ctx.out / "_run.json", history)
                    # A stage's own usage error (exit 2) is the user's to fix: say so the same way.
                    return 2 if e.rc == 2 else 1
                # Go on without it: plan the rest again (the stages after it fall back).
                errs = [ln for ln in e.tail if "error" in ln.lower()] or e.tail[-1:]
                ctx.soft_failed[p.stage.name] = errs[-1].strip() if errs else str(e)
                log.warning("%s is optional: continuing without it", p.stage.name)
                plans = make_plan(ctx, args.start, args.only)
                history["plan"] = _plan_record(plans)
                history.setdefault("soft_failed", {})[p.stage.name] = ctx.soft_failed[p.stage.name]
                _write_json(ctx.out / "_run.json", history)
                todo = [q for q in plans if q.action == "run" and q.stage.name not in done]
                bar.total = n + len(todo)
                continue
            done.add(p.stage.name)
            log.info(
                "[%d/%d] %s: done in %.1f s, peak RSS %.0f MB",
                n,
                total,
                p.stage.name,
                m["seconds"],
                m["peak_rss_mb"],
            )
            history["ran"].append(p.stage.name)
            _write_json(ctx.out / "_run.json", history)
            bar.update(1)
    finally:
        bar.close()
    history["finished"] = time.time()
    _write_json(ctx.out / "_run.json", history)
    sys.stdout.write(
        f"finished: {ctx.out}\n  bitext: {ctx.d(BITEXT) / 'bitext.tsv.gz'}\n"
        f"  report: {ctx.d(REPORT) / 'report.html'}\n"
    )
    return 0


def _plan_record(plans: list[Plan]) -> list[dict]:
    return [{"stage": p.stage.name, "action": p.action, "reason": p.reason} for p in plans]


def _write_config(ctx: Context) -> None:
    text = yaml.safe_dump(copy.deepcopy(ctx.cfg), sort_keys=False, allow_unicode=True)
    if not ctx.config_file.is_file() or ctx.config_file.read_text(encoding="utf-8") != text:
        tmp = ctx.config_file.with_suffix(".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, ctx.config_file)


def _terminate(signum: int, frame: object) -> None:
    # SIGTERM unwinds like Ctrl-C: the running stage is stopped and the claim released.
    raise KeyboardInterrupt


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _terminate)
    sys.exit(main())
