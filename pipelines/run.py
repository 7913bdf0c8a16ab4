"""One command from raw web text to NMT-ready bitext, resumable, with a report.

    python -m pipelines.run --config configs/demo.yaml [--data ../shared/data] [--output demo_out]
        [--set section.key=value ...] [--from STAGE | --only STAGE] [--dry-run] [--list]

Every stage is declared once (below, in ``STAGES``): its name, the config sections it reads, the
stages and files it reads, the files it must leave, and the command line(s) that run it. Each
stage runs as a child process through its own CLI (so a stage's memory is returned when it ends
and a kill is what it would be in production), writes into ``OUTPUT/<stage>/``, and on success
the runner writes ``OUTPUT/_state/<stage>.manifest.json``: a hash of the stage's config sections and of
its command, the fingerprints of its inputs (an upstream stage's hash; size, mtime and content
hash of a data file) and the list of files it wrote. A rerun skips a stage only when its manifest
matches and its files are all there; a stage that reruns makes every stage after it that reads
it rerun too. A killed or failed run therefore resumes at the stage that did not finish, and a
changed setting reruns exactly the stages that depend on it.

Without ``--data`` the stages run on an embedded synthetic sample (``pipelines/synthetic.py``);
with ``--data DIR`` (the ../shared/data layout: wikipedia/, commoncrawl/, tatoeba/) on real
inputs. Stages whose command is not in this checkout (pretraining, the bitext filters) are
skipped with the reason recorded in the plan and the report.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import glob
import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from labse_common.config import ConfigError, apply_overrides, load, read_preset
from labse_common.logs import setup_logging

log = logging.getLogger("pipelines.run")

ROOT = Path(__file__).resolve().parent.parent
# Kept beside the stage folders, not in them: a stage's CLI owns its output folder (it may refuse
# a non-empty one or replace it whole).
STATE = "_state"


def manifest_path(out: Path, stage: str) -> Path:
    return out / STATE / f"{stage}.manifest.json"


def progress_path(out: Path, stage: str) -> Path:
    return out / STATE / f"{stage}.in_progress.json"
SMALL_FILE = 64 << 20  # data files up to this size are content-hashed; larger: size + mtime


class UsageError(Exception):
    """A wrong argument, path or config value: one line on stderr, exit status 2."""


@dataclass
class Context:
    """What a stage's command builder may look at: folders, the effective config, availability."""

    out: Path
    data: Path
    synthetic: bool
    config_file: Path  # the effective config (preset + --set) every stage CLI reads
    cfg: dict
    python: str = sys.executable
    available: dict[str, bool] = field(default_factory=dict)
    soft_failed: dict[str, str] = field(default_factory=dict)  # optional stage -> its error

    def d(self, stage: str) -> Path:
        return self.out / stage

    @property
    def langs(self) -> list[str]:
        from pipelines.e2e_tasks import LID_CODE

        return [LID_CODE[c] for c in self.cfg["run"]["langs"]]

    @property
    def pairs(self) -> list[str]:
        return [f"{lang}-en" for lang in self.langs]

    @property
    def corpus_stage(self) -> str:
        return "commoncrawl_q" if self.cfg["run"]["quality_bootstrap"] else "commoncrawl"


Command = list[str]


@dataclass
class Stage:
    name: str
    what: str
    sections: tuple[str, ...]  # config sections whose values the stage depends on
    deps: Callable[[Context], list[str]]  # upstream stages it reads
    files: Callable[[Context], list[str]]  # data files it reads (outside OUTPUT)
    outputs: Callable[[Context], list[str]]  # paths under OUTPUT/<name>/ that must exist after
    commands: Callable[[Context], list[Command]]
    needs: Callable[[Context], str | None] = lambda ctx: None  # None, or why it cannot run here
    resumable: bool = False  # keep a half-finished output folder (the CLI resumes from it)
    # A refinement the bitext can do without (the filters): when it fails (e.g. calibrate finds
    # no threshold reaching its target on this sample), the run goes on without it and the
    # stages after it fall back, and the plan and report say why.
    optional: bool = False


def _py(ctx: Context, module: str, *args: object) -> Command:
    return [ctx.python, "-m", module, *map(str, args)]


def _module_has(path: str, text: str | None = None) -> bool:
    p = ROOT / path
    return p.is_file() and (text is None or text in p.read_text(encoding="utf-8"))


def _needs_filters(command: str) -> Callable[[Context], str | None]:
    module = f"filters/bitext/cli_{command.replace('-', '_')}.py"

    def check(ctx: Context) -> str | None:
        if not _module_has(module):
            return f"stage not available in this checkout (no {module}: `python -m filters {command}`)"
        return None

    return check


def _needs_pretrain(ctx: Context) -> str | None:
    if not _module_has("labse_model/__main__.py", '"pretrain"'):
        return "stage not available in this checkout (`python -m labse_model pretrain` is not there)"
    return None


def _cfg_cmd(ctx: Context) -> list[str]:
    return ["--config", str(ctx.config_file)]


def _corpus_inputs(ctx: Context, kind: str) -> list[str]:
    pats = {"wikipedia": ["wikipedia/*.xml.bz2", "wikipedia/*.xml"],
            "commoncrawl": ["commoncrawl/*.warc.gz", "commoncrawl/*.wet.gz", "commoncrawl/*.warc"]}[kind]  # fmt: skip
    if ctx.synthetic:  # known before the synthetic stage has written them (stable cache keys)
        from pipelines.synthetic import data_files

        return [str(ctx.data / f) for f in data_files()[kind]]
    return sorted({f for p in pats for f in glob.glob(str(ctx.data / p))})


def _cc_command(ctx: Context, out: str, extra: list[str]) -> Command:
    inputs = [a for f in _corpus_inputs(ctx, "commoncrawl") for a in ("--input", f)]
    inputs += ["--input", str(ctx.d("prepare") / "tatoeba-dev.warc.wet.gz")]
    return _py(ctx, "pipelines.commoncrawl", *inputs, "--output", ctx.d(out), *_cfg_cmd(ctx),
               "--overwrite", *extra)  # fmt: skip


def _filters_used(ctx: Context) -> bool:
    return all(ctx.available.get(s, False) for s in FILTER_STAGES)


def _final_model(ctx: Context) -> Path:
    return ctx.d("train") / "model"


STAGES: list[Stage] = [
    Stage("synthetic", "embedded synthetic sample (no --data)",
          ("run.synthetic_seed", "run.synthetic_train", "run.synthetic_dev"),
          deps=lambda c: [], files=lambda c: [],
          outputs=lambda c: ["tatoeba", "commoncrawl", "wikipedia", "SYNTHETIC.json"],
          commands=lambda c: [_py(c, "pipelines.synthetic", "--output", c.d("synthetic"),
                                  "--seed", c.cfg["run"]["synthetic_seed"],
                                  "--train", c.cfg["run"]["synthetic_train"],
                                  "--dev", c.cfg["run"]["synthetic_dev"])],
          needs=lambda c: None if c.synthetic else "--data given: real inputs are used"),
    Stage("prepare", "split pairs: train / held-out / dev hidden in web text",
          ("run.langs", "run.max_train_pairs", "run.heldout", "run.train_languages", "run.doc_sentences",
           "run.shuffle_seed", "run.cds_trusted_pairs"),
          deps=lambda c: ["synthetic"] if c.synthetic else [],
          files=lambda c: [] if c.synthetic else sorted(glob.glob(str(c.data / "tatoeba" / "*"))),
          outputs=lambda c: ["train_pairs.tsv", "gold.tsv", "labelled.tsv", "labelled_pairs.tsv", "trusted_pairs.tsv", "tatoeba-dev.warc.wet.gz",
                             "heldout", "train_sentences", "stats.json"],
          commands=lambda c: [_py(c, "pipelines.e2e_tasks", "prepare", "--data", c.data,
                                  "--output", c.d("prepare"), *_cfg_cmd(c))]),
    Stage("wikipedia", "Wikipedia dump -> clean sentences (Beam)", ("corpus",),
          deps=lambda c: ["synthetic"] if c.synthetic else [],
          files=lambda c: [] if c.synthetic else _corpus_inputs(c, "wikipedia"),
          outputs=lambda c: ["stats.json"],
          commands=lambda c: [_py(c, "pipelines.wikipedia",
                                  *[a for f in _corpus_inputs(c, "wikipedia") for a in ("--input", f)],
                                  "--output", c.d("wikipedia"), *_cfg_cmd(c), "--overwrite")]),
    Stage("commoncrawl", "CommonCrawl WET/WARC + hidden dev text -> sentences (Beam, rule quality)",
          ("corpus",), deps=lambda c: ["prepare"] + (["synthetic"] if c.synthetic else []),
          files=lambda c: [] if c.synthetic else _corpus_inputs(c, "commoncrawl"),
          outputs=lambda c: ["stats.json", "_dropped"],
          commands=lambda c: [_cc_command(c, "commoncrawl", ["--write-dropped"])]),
    Stage("quality", "fastText quality classifier bootstrapped from the corpus outputs", (),
          deps=lambda c: ["wikipedia", "commoncrawl"], files=lambda c: [],
          outputs=lambda c: ["quality.bin"],
          commands=lambda c: [_py(c, "pipelines.quality", "train", "--positive", c.d("wikipedia"),
                                  "--positive", c.d("commoncrawl"), "--negative", c.d("commoncrawl"),
                                  "--output", c.d("quality") / "quality.bin")],
          needs=lambda c: None if c.cfg["run"]["quality_bootstrap"] else "run.quality_bootstrap is false"),
    Stage("commoncrawl_q", "CommonCrawl again with the trained quality classifier (Beam)",
          ("corpus",), deps=lambda c: ["prepare", "quality"] + (["synthetic"] if c.synthetic else []),
          files=lambda c: [] if c.synthetic else _corpus_inputs(c, "commoncrawl"),
          outputs=lambda c: ["stats.json"],
          commands=lambda c: [_cc_command(c, "commoncrawl_q",
                                          ["--quality-model", c.d("quality") / "quality.bin"])],
          needs=lambda c: None if c.cfg["run"]["quality_bootstrap"] else "run.quality_bootstrap is false"),
    Stage("sentences", "per-language sentences to mine (+ training sentences for the vocabulary)", (),
          deps=lambda c: ["wikipedia", c.corpus_stage, "prepare"], files=lambda c: [],
          outputs=lambda c: ["mine", "vocab", "stats.json"],
          commands=lambda c: [_py(c, "pipelines.e2e_tasks", "sentences", "--corpus", c.d("wikipedia"),
                                  "--corpus", c.d(c.corpus_stage),
                                  "--extra", c.d("prepare") / "train_sentences",
                                  "--output", c.d("sentences"))]),
    Stage("vocab", "smoothed multilingual wordpiece vocabulary (Beam + learner)", ("vocab",),
          deps=lambda c: ["sentences"], files=lambda c: [],
          outputs=lambda c: ["vocab.txt", "tokenizer.json", "vocab_stats.json", "stats.json"],
          commands=lambda c: [_py(c, "pipelines.vocab", "--input", c.d("sentences") / "vocab",
                                  "--output", c.d("vocab"), *_cfg_cmd(c), "--overwrite")]),
    Stage("pretrain", "MLM + TLM pretraining with progressive stacking", ("model", "pretrain"),
          deps=lambda c: ["sentences", "prepare", "vocab"], files=lambda c: [],
          outputs=lambda c: ["model"],
          commands=lambda c: [_py(c, "labse_model", "pretrain", *_cfg_cmd(c),
                                  "--sentences", c.d("sentences") / "vocab",
                                  "--pairs", c.d("prepare") / "train_pairs.tsv",
                                  "--vocab", c.d("vocab"), "--output", c.d("pretrain"))],
          needs=_needs_pretrain, resumable=True),
    Stage("train", "dual encoder, additive-margin softmax (torchrun-capable)", ("model", "train"),
          deps=lambda c: ["prepare", "vocab"] + (["pretrain"] if c.available.get("pretrain") else []),
          files=lambda c: [], outputs=lambda c: ["model", "metrics.jsonl", "stats.json"],
          commands=lambda c: [_py(c, "labse_model", "train", *_cfg_cmd(c),
                                  "--pairs", c.d("prepare") / "train_pairs.tsv",
                                  "--vocab", c.d("vocab"), "--output", c.d("train"),
                                  *(["--init", c.d("pretrain") / "model"] if c.available.get("pretrain") else []))],
          resumable=True),
    Stage("embed", "embedding store per language", ("run.embed_batch_size",),
          deps=lambda c: ["sentences", "train"], files=lambda c: [],
          outputs=lambda c: [*c.langs, "en"],
          commands=lambda c: [_py(c, "pipelines.e2e_tasks", "embed", "--sentences", c.d("sentences") / "mine",
                                  "--langs", *c.langs, "en", "--model", _final_model(c),
                                  "--output", c.d("embed"), "--batch-size", c.cfg["run"]["embed_batch_size"])]),
    Stage("mine", "FAISS kNN + margin scoring, each language against English", ("mining",),
          deps=lambda c: ["sentences", "embed"], files=lambda c: [],
          outputs=lambda c: [f"{p}/mined.parquet" for p in c.pairs],
          commands=lambda c: [_py(c, "mining", "mine-many", "--pairs", *c.pairs,
                                  "--corpus", str(c.d("sentences") / "mine" / "{lang}"),
                                  "--emb", str(c.d("embed") / "{lang}"),
                                  "--output", c.d("mine"), *_cfg_cmd(c), "--overwrite")]),
    Stage("rules", "bitext hard rules on the mined pairs (kept, dropped with reasons)", ("pair_rules",),
          deps=lambda c: ["mine"], files=lambda c: [],
          outputs=lambda c: [f"{p}/kept.parquet" for p in c.pairs] + ["kept_all.parquet"],
          commands=lambda c: [*[_py(c, "filters", "rules", "--pairs", c.d("mine") / p / "mined.parquet",
                                    "--src-lang", p.split("-")[0], "--trg-lang", p.split("-")[1],
                                    "--output", c.d("rules") / p, "--write-dropped", *_cfg_cmd(c))
                                for p in c.pairs],
                              _py(c, "pipelines.e2e_tasks", "concat",
                                  *[c.d("rules") / p / "kept.parquet" for p in c.pairs],
                                  "--output", c.d("rules") / "kept_all.parquet")],
          needs=_needs_filters("rules"), optional=True),
    Stage("cds_train", "CDS scorer: noisy candidates vs trusted pairs", ("cds",),
          deps=lambda c: ["rules", "prepare", "vocab"], files=lambda c: [], outputs=lambda c: ["stats.json"],
          commands=lambda c: [_py(c, "filters", "cds-train", "--noisy", c.d("rules") / "kept_all.parquet",
                                  "--trusted", c.d("prepare") / "trusted_pairs.tsv", "--vocab", c.d("vocab"),
                                  "--output", c.d("cds_train"), "--overwrite", *_cfg_cmd(c))],
          needs=_needs_filters("cds-train"), optional=True),
    Stage("cds_score", "CDS scores of the rule-filtered pairs and of the labelled sample", ("cds",),
          deps=lambda c: ["rules", "cds_train", "prepare"], files=lambda c: [],
          outputs=lambda c: ["scored.parquet", "labelled.parquet"],
          commands=lambda c: [_py(c, "filters", "cds-score", "--model", c.d("cds_train"),
                                  "--pairs", c.d("rules") / "kept_all.parquet",
                                  "--output", c.d("cds_score") / "scored.parquet", *_cfg_cmd(c)),
                              _py(c, "filters", "cds-score", "--model", c.d("cds_train"),
                                  "--pairs", c.d("prepare") / "labelled_pairs.tsv", "--layout", "src-trg",
                                  "--output", c.d("cds_score") / "labelled.parquet", *_cfg_cmd(c))],
          needs=_needs_filters("cds-score"), optional=True),
    Stage("calibrate", "threshold keeping cds.calibrate.target (0.8) GOOD on the labelled held-out sample",
          ("cds",),
          deps=lambda c: ["cds_score", "prepare"], files=lambda c: [],
          outputs=lambda c: ["threshold.json", "calibration.png"],
          commands=lambda c: [_py(c, "filters", "calibrate", "--scored", c.d("cds_score") / "labelled.parquet",
                                  "--labels", c.d("prepare") / "labelled.tsv",
                                  "--output", c.d("calibrate"), *_cfg_cmd(c))],
          needs=_needs_filters("calibrate"), optional=True),
    Stage("apply", "apply the calibrated threshold: kept, rejected with reasons, Moses export", ("cds",),
          deps=lambda c: ["cds_score", "calibrate", "rules"], files=lambda c: [],
          outputs=lambda c: ["kept.parquet", "stats.json"],
          commands=lambda c: [_py(c, "filters", "apply", "--scored", c.d("cds_score") / "scored.parquet",
                                  "--threshold", c.d("calibrate") / "threshold.json",
                                  "--output", c.d("apply"), "--write-rejected", "--overwrite", *_cfg_cmd(c))],
          needs=_needs_filters("apply"), optional=True),
    Stage("bitext", "the final NMT-ready bitext (Parquet, TSV.gz, Moses)", ("run.min_margin",),
          deps=lambda c: ["mine"] + (["rules"] if c.available.get("rules") else [])
          + (["apply"] if _filters_used(c) else []), files=lambda c: [],
          outputs=lambda c: ["bitext.parquet", "bitext.tsv.gz", "rejected.parquet", "stats.json"],
          commands=lambda c: [_py(c, "pipelines.e2e_tasks", "bitext", "--mined", c.d("mine"),
                                  *(["--filtered", c.d("apply")] if _filters_used(c) else []),
                                  *(["--rules", c.d("rules")] if c.available.get("rules") else []),
                                  "--min-margin", c.cfg["run"]["min_margin"], "--output", c.d("bitext"))]),
    Stage("eval", "Tatoeba-style retrieval on held-out pairs; precision/recall of the bitext", ("eval",),
          deps=lambda c: ["train", "prepare", "bitext", "sentences"], files=lambda c: [],
          outputs=lambda c: ["mined_pr.json", "tatoeba"],
          commands=lambda c: [
              _py(c, "mining", "eval", "tatoeba", "--model", _final_model(c),
                  "--data", c.d("prepare") / "heldout", "--prefix", "heldout", "--output", c.d("eval") / "tatoeba",
                  *_cfg_cmd(c)),
              _py(c, "pipelines.e2e_tasks", "score", "--bitext", c.d("bitext"), "--gold", c.d("prepare") / "gold.tsv",
                  "--sentences", c.d("sentences") / "mine", "--output", c.d("eval"))]),
    Stage("report", "report.md + self-contained report.html", (),
          deps=lambda c: ["eval", "bitext"], files=lambda c: [],
          outputs=lambda c: ["report.md", "report.html"],
          commands=lambda c: [_py(c, "pipelines.report", "--run", c.out, "--output", c.d("report"),
                                  "--examples", c.cfg["run"]["report_examples"])]),
]  # fmt: skip
FILTER_STAGES = ("rules", "cds_train", "cds_score", "calibrate", "apply")
BY_NAME = {s.name: s for s in STAGES}


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


@dataclass
class Plan:
    stage: Stage
    action: str  # run | skip | unavailable
    reason: str
    key: str = ""
    parts: dict = field(default_factory=dict)


def _section_value(cfg: dict, name: str) -> object:
    """``section`` or ``section.key`` of the effective config."""
    section, _, key = name.partition(".")
    value = cfg.get(section)
    return value.get(key) if key and isinstance(value, dict) else value


def stage_parts(stage: Stage, ctx: Context, keys: dict[str, str]) -> dict:
    """What a stage's cache key is made of, each part hashed on its own (to say what changed)."""
    sections = {s: _section_value(ctx.cfg, s) for s in stage.sections}
    cmds = _relative(stage.commands(ctx), ctx.out)
    # The config file path is in the command, its content in `sections`.
    cmds = [[a for a in c if a != _relative(str(ctx.config_file), ctx.out)] for c in cmds]
    return {
        "config": _sha(sections),
        "command": _sha([c[1:] for c in cmds]),  # not the interpreter's path
        "upstream": {d: keys.get(d, "") for d in stage.deps(ctx)},
        "files": {os.path.basename(f): _sha(file_fingerprint(f)) for f in stage.files(ctx)},
    }


def read_manifest(out: Path, stage: str) -> dict | None:
    try:
        return json.loads(manifest_path(out, stage).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _why_rerun(old: dict | None, parts: dict, key: str, d: Path) -> str | None:
    if old is None:
        return "no manifest (never finished)"
    if old.get("key") != key:
        changed = [k for k in ("config", "command") if old.get("parts", {}).get(k) != parts[k]]
        for kind in ("upstream", "files"):
            a, b = old.get("parts", {}).get(kind, {}), parts[kind]
            changed += [f"{kind[:-1] if kind == 'files' else 'input'} {n}" for n in sorted(set(a) | set(b))
                        if a.get(n) != b.get(n)]  # fmt: skip
        return "changed: " + (", ".join(changed) or "key")
    for rel, size in old.get("outputs", []):
        p = d / rel
        if not p.is_file() or p.stat().st_size != size:
            return f"output missing or changed: {rel}"
    return None


def _unavailable(s: Stage, ctx: Context) -> str | None:
    if s.name in ctx.soft_failed:
        return f"failed in this run (optional stage, skipped): {ctx.soft_failed[s.name]}"
    why = s.needs(ctx)
    if why:
        return why
    gone = [d for d in s.deps(ctx) if not ctx.available.get(d, False)]
    return f"needs {', '.join(gone)}, which is unavailable" if gone else None


def make_plan(ctx: Context, start: str | None = None, only: str | None = None) -> list[Plan]:
    for s in STAGES:  # in order: a stage's availability may depend on its upstream stages'
        ctx.available[s.name] = _unavailable(s, ctx) is None
    keys: dict[str, str] = {}
    plans: list[Plan] = []
    rerun: set[str] = set()
    names = [s.name for s in STAGES]
    forced: set[str] = set()
    if start:
        forced = set(names[names.index(start):])
    if only:
        forced = {only}
    for s in STAGES:
        why_not = _unavailable(s, ctx)
        if why_not:
            plans.append(Plan(s, "unavailable", why_not))
            continue
        parts = stage_parts(s, ctx, keys)
        key = _sha(parts)
        keys[s.name] = key
        d = ctx.d(s.name)
        reason = _why_rerun(read_manifest(ctx.out, s.name), parts, key, d)
        up = [u for u in s.deps(ctx) if u in rerun]
        if s.name in forced:
            reason = "--only" if only else "--from"
        elif up:
            reason = reason or f"upstream {', '.join(up)} reruns"
        if forced and s.name not in forced:
            before = names.index(s.name) < names.index(only or start)
            if reason and before:  # an input of the forced stages that is not complete
                plans.append(Plan(s, "missing", reason, key, parts))
            else:
                plans.append(Plan(s, "skip", "up to date" if not reason else f"not selected ({reason})",
                                  key, parts))  # fmt: skip
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


def run_stage(plan: Plan, ctx: Context, idx: int, total: int) -> dict:
    """Run a stage's commands as children; returns its manifest (raises on failure)."""
    s = plan.stage
    d = ctx.d(s.name)
    logs = ctx.out / "_logs"
    logs.mkdir(parents=True, exist_ok=True)
    (ctx.out / STATE).mkdir(exist_ok=True)
    prog = read_manifest_file(progress_path(ctx.out, s.name))
    if d.exists() and not (s.resumable and prog and prog.get("key") == plan.key):
        shutil.rmtree(d)
    d.mkdir(parents=True, exist_ok=True)
    manifest_path(ctx.out, s.name).unlink(missing_ok=True)
    progress_path(ctx.out, s.name).write_text(json.dumps({"key": plan.key, "started": time.time()}),
                                              encoding="utf-8")  # fmt: skip
    t0 = time.time()
    peak_kb, cpu = 0, 0.0
    with open(logs / f"{s.name}.log", "a", encoding="utf-8") as logf:
        for cmd in s.commands(ctx):
            logf.write(f"$ {' '.join(map(str, cmd))}\n")
            logf.flush()
            child = subprocess.Popen(list(map(str, cmd)), stdout=logf, stderr=subprocess.STDOUT,
                                     env=_child_env(), cwd=str(ROOT))  # fmt: skip
            # wait4 gives this child's own resource use: peak RSS of the child (and of the
            # grandchildren it waited for), not a high-water mark of the whole run.
            _, status, usage = os.wait4(child.pid, 0)
            child.returncode = os.waitstatus_to_exitcode(status)
            peak_kb = max(peak_kb, usage.ru_maxrss)
            cpu += usage.ru_utime + usage.ru_stime
            if child.returncode != 0:
                tail = (logs / f"{s.name}.log").read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
                raise StageFailed(s.name, child.returncode, logs / f"{s.name}.log", tail)
    missing = [o for o in s.outputs(ctx) if not (d / o).exists()]
    if missing:
        raise StageFailed(s.name, 0, logs / f"{s.name}.log", [f"declared outputs missing: {missing}"])
    manifest = {"stage": s.name, "key": plan.key, "parts": plan.parts,
                "sections": {k: _section_value(ctx.cfg, k) for k in s.sections},
                "commands": _relative(s.commands(ctx), ctx.out), "outputs": _listing(d),
                "seconds": round(time.time() - t0, 2), "cpu_seconds": round(cpu, 2),
                "peak_rss_mb": round(peak_kb / 1024, 1), "finished": time.time()}  # fmt: skip
    tmp = manifest_path(ctx.out, s.name).with_suffix(".tmp")
    tmp.write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    os.replace(tmp, manifest_path(ctx.out, s.name))
    progress_path(ctx.out, s.name).unlink(missing_ok=True)
    return manifest


def read_manifest_file(p: Path) -> dict | None:
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


class StageFailed(Exception):
    def __init__(self, stage: str, rc: int, logfile: Path, tail: list[str]) -> None:
        super().__init__(f"stage {stage} failed (exit status {rc}); log: {logfile}")
        self.tail = tail


# --- CLI -----------------------------------------------------------------------------------------


def effective_config(preset: str, overrides: list[str]) -> dict:
    """The preset with --set overrides applied, every known section type-checked."""
    cfg = apply_overrides(read_preset(preset), overrides)
    for section in cfg:
        try:
            load(section, None, flags=cfg[section]) if isinstance(cfg[section], dict) else None
        except ConfigError as e:
            if "unknown config section" in str(e):
                continue  # a section this checkout does not know yet: its stage checks it
            raise
    run = dataclasses.asdict(load("run", None, flags=cfg.get("run") or {}))
    cfg["run"] = run
    return cfg


def build_parser() -> argparse.ArgumentParser:
    names = [s.name for s in STAGES]
    ap = argparse.ArgumentParser(prog="python -m pipelines.run", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="stages, in order: " + " -> ".join(names))  # fmt: skip
    ap.add_argument("--config", default="demo", metavar="PRESET|FILE",
                    help="preset (demo, paper) or YAML file; every stage reads its section (demo)")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="override a config value, e.g. --set mining.k=8 (repeatable)")
    ap.add_argument("--data", metavar="DIR",
                    help="real inputs in the ../shared/data layout (wikipedia/, commoncrawl/, tatoeba/); "
                    "default: the embedded synthetic sample")
    ap.add_argument("--output", default="demo_out", metavar="DIR", help="run folder (demo_out)")
    ap.add_argument("--from", dest="start", choices=names, metavar="STAGE",
                    help="rerun STAGE and every stage after it (earlier ones must be complete)")
    ap.add_argument("--only", choices=names, metavar="STAGE",
                    help="rerun STAGE alone (its inputs must be complete)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan (run/skip and why) and exit")
    ap.add_argument("--log-level", default=None, help="DEBUG, INFO (default), WARNING")
    return ap  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)
    if args.start and args.only:
        print("error: --from and --only exclude each other", file=sys.stderr)
        return 2
    try:
        cfg = effective_config(args.config, args.set)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = Path(args.output).resolve()
    if args.data:
        data = Path(args.data).resolve()
        if not (data / "tatoeba").is_dir():
            print(f"error: --data {args.data}: expected tatoeba/ (and wikipedia/, commoncrawl/) inside",
                  file=sys.stderr)  # fmt: skip
            return 2
    else:
        data = out / "synthetic"
    ctx = Context(out=out, data=data, synthetic=not args.data, config_file=out / "_config.yaml", cfg=cfg)
    if args.data and not (_corpus_inputs(ctx, "wikipedia") and _corpus_inputs(ctx, "commoncrawl")):
        print(f"error: --data {args.data}: no wikipedia/*.xml.bz2 or commoncrawl/*.gz inputs", file=sys.stderr)
        return 2
    plans = make_plan(ctx, args.start, args.only)
    width = max(len(s.name) for s in STAGES)
    lines = [f"{p.stage.name:<{width}}  {p.action:<11} {p.reason}" for p in plans]
    if args.dry_run:
        sys.stdout.write("\n".join(lines) + "\n")
        return 0
    missing = [p for p in plans if p.action == "missing"]
    if missing:
        names = ", ".join(f"{p.stage.name} ({p.reason})" for p in missing)
        print(f"error: needed stages are not complete: {names}; run without --from/--only", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    _write_config(ctx)
    todo = [p for p in plans if p.action == "run"]
    log.info("run folder %s; data: %s; %d stage(s) to run, %d up to date, %d unavailable", out,
             "synthetic sample" if ctx.synthetic else data, len(todo),
             sum(p.action == "skip" for p in plans), sum(p.action == "unavailable" for p in plans))  # fmt: skip
    history = {"plan": [{"stage": p.stage.name, "action": p.action, "reason": p.reason} for p in plans],
               "data": "synthetic" if ctx.synthetic else str(data), "started": time.time(), "ran": []}  # fmt: skip
    _write_run(ctx, history)
    from tqdm import tqdm

    bar = tqdm(total=len(todo), desc="stages", unit="stage", disable=not sys.stderr.isatty())
    done: set[str] = set()
    n = 0
    while todo:
        p = todo.pop(0)
        n += 1
        total = n + len(todo)
        log.info("[%d/%d] %s: running (%s) — %s", n, total, p.stage.name, p.reason, p.stage.what)
        try:
            m = run_stage(p, ctx, n, total)
        except StageFailed as e:
            log.error("%s", e)
            for line in e.tail:
                log.error("  | %s", line)
            if not p.stage.optional:
                bar.close()
                history["failed"] = p.stage.name
                _write_run(ctx, history)
                return 1
            # Go on without it: plan the rest again (the stages after it fall back).
            errs = [ln for ln in e.tail if "error" in ln.lower()] or e.tail[-1:]
            ctx.soft_failed[p.stage.name] = errs[-1].strip() if errs else str(e)
            log.warning("%s is optional: continuing without it", p.stage.name)
            plans = make_plan(ctx, args.start, args.only)
            history["plan"] = [{"stage": q.stage.name, "action": q.action, "reason": q.reason} for q in plans]
            history.setdefault("soft_failed", {})[p.stage.name] = ctx.soft_failed[p.stage.name]
            _write_run(ctx, history)
            todo = [q for q in plans if q.action == "run" and q.stage.name not in done]
            bar.total = n + len(todo)
            continue
        done.add(p.stage.name)
        log.info("[%d/%d] %s: done in %.1f s, peak RSS %.0f MB", n, total, p.stage.name,
                 m["seconds"], m["peak_rss_mb"])  # fmt: skip
        history.setdefault("ran", []).append(p.stage.name)
        _write_run(ctx, history)
        bar.update(1)
    bar.close()
    history["finished"] = time.time()
    _write_run(ctx, history)
    report = ctx.d("report") / "report.html"
    sys.stdout.write(f"finished: {out}\n  bitext: {ctx.d('bitext') / 'bitext.tsv.gz'}\n  report: {report}\n")
    return 0


def _write_config(ctx: Context) -> None:
    text = yaml.safe_dump(copy.deepcopy(ctx.cfg), sort_keys=False, allow_unicode=True)
    if not ctx.config_file.is_file() or ctx.config_file.read_text(encoding="utf-8") != text:
        tmp = ctx.config_file.with_suffix(".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, ctx.config_file)


def _write_run(ctx: Context, history: dict) -> None:
    tmp = ctx.out / "_run.json.tmp"
    tmp.write_text(json.dumps(history, indent=1), encoding="utf-8")
    os.replace(tmp, ctx.out / "_run.json")


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.exit(main())
