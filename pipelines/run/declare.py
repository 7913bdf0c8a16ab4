"""What a stage declaration is made of: the :class:`Context` a stage's command builder looks at,
the :class:`Stage` record and the :func:`stage` decorator that declares one (in
:mod:`pipelines.run.corpus_stages`, :mod:`~pipelines.run.model_stages` and
:mod:`~pipelines.run.bitext_stages`)."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labse_common.config import section_class
from pipelines.run.config import typed_config

# The repository root: the stages' children run from it.
ROOT = Path(__file__).resolve().parent.parent.parent
# Kept beside the stage folders, not in them: a stage's CLI owns its output folder (it may refuse
# a non-empty one or replace it whole).
STATE = "_state"

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
    # The run folder on object storage (--output s3://… or gs://…); ``out`` is then the local
    # scratch copy the runner works in (pipelines.run.run_folder).
    remote: str | None = None
    folder: Any = None  # its pipelines.run.run_folder.RunFolder (None for a local run folder)
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
        from labse_common.model_init import resolve_init  # a HF cache folder: its snapshot

        init = self.values["model"]["init"]
        return str(resolve_init(init)) if init else None

    def d(self, stage: Stage | str) -> Path:
        return self.out / (stage.name if isinstance(stage, Stage) else stage)

    @property
    def engine(self) -> str | None:
        """``beam.runner``: the Beam runner the engine stages run on; None runs them locally."""
        return self.values["beam"]["runner"] or None

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
    # Runs as Beam jobs on ``beam.runner`` when it is set (its commands take ``beam_args`` and
    # spell their folders with :meth:`Context.at`); otherwise in the runner's own machine.
    engine: bool = False

    def on_engine(self, ctx: Context) -> bool:
        """Whether this stage runs on the Beam engine in this run."""
        return self.engine and ctx.engine is not None

    def command_lines(self, ctx: Context) -> list[Command]:
        """The stage's commands as they run. On the engine with the run folder on object storage,
        every path inside the run folder is spelled as its URL (the workers see no disk of the
        runner's); the config file stays local: the launching process reads it."""
        cmds = [list(map(str, c)) for c in self.commands(ctx)]
        if not (ctx.remote and self.on_engine(ctx)):
            return cmds
        root, keep = str(ctx.out) + "/", str(ctx.config_file)
        url = ctx.remote.rstrip("/") + "/"
        return [
            [url + a[len(root) :] if a.startswith(root) and a != keep else a for a in c]
            for c in cmds
        ]

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
    engine: bool = False,
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
            engine=engine,
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
