"""Quality bench: what more training minutes and more training pairs buy the demo encoder.

For a finished demo run (``--run DIR``) it measures, for each point of two curves:

- the 16-language Tatoeba dev average (xxx->eng and eng->xxx, ``python -m mining eval
  tatoeba --prefix dev`` on ``DATA/tatoeba``; the figure is the mean of the two directions);
- with ``--downstream``: the planted pairs the miner finds (mined pairs equal to a pair of the
  run's known alignment, ``inputs/gold.tsv``, over both halves: the miner sees no labels), and
  the final bitext's precision and recall on the evaluation half (``eval/mined_pr.json``,
  key ``all``, as the runner's ``eval`` stage writes them).

The curves:

- **minutes**: ONE fine-tuning run from the run's pretrained encoder (``DIR/pretrain/model``)
  on its training pairs (``DIR/inputs/train_pairs.tsv``) with its config (``DIR/_config.yaml``),
  ``python -m labse_model train ... steps=N save_every=S keep_checkpoints=K``. The requested
  minutes (``--minutes``) become steps by a rate (``--steps-per-minute``, default: the run's
  own training stage, steps over seconds in ``DIR/_state/train.manifest.json``) as multiples
  of the steps of the minutes' greatest common divisor, and ``S`` is that divisor's steps, so
  every requested point has its checkpoint (``--steps`` gives the steps directly; ``S`` is
  then their greatest common divisor). Each checkpoint's minutes are measured, not assumed:
  the modification time of its ``manifest.json`` (written when the checkpoint is complete)
  less the time the training process was started, so start-up and the scan of the pairs count.
  The learning-rate schedule is the whole run's (N steps), so an early checkpoint is taken
  mid-schedule, before the decay: a run of that length alone, with its own decay, may do
  somewhat better. That is the price of one run instead of one per point.
- **pairs**: for each k of ``--pairs-per-lang``, the training pairs cut to k per source
  language (``src_lang``, the third column): the k whose SHA-1 of the line is smallest, so the
  cut is deterministic and a larger k holds every pair of a smaller one. Each k trains
  ``--pairs-steps`` steps (default the config's ``train.steps``, the preset's budget) from the
  same pretrained encoder with its own schedule. ``all`` keeps every pair.

Two more rows, each cheap: the pretrained encoder without fine-tuning (the peer: every dev
average is printed as a ratio to it, evaluated in the same bench run), and the run's own
fine-tuned encoder (``DIR/train/model``), whose downstream figures the run already holds (its
minutes are its own training stage's, measured under that run's load and threads).

Downstream figures of a point rerun the runner's stages after training with that encoder:
``python -m pipelines.run --config DIR/_config.yaml --data DATA --output P --set
model.init=CHECKPOINT --set train.steps=0`` (vocabulary, pretraining and training are off). The
stages before ``vocab`` (demo task, inputs, corpus cleaning, sentences) do not depend on the
encoder, so P is first seeded with copies of their folders and manifests from DIR (later points:
from the first point's folder) and the runner skips them. The runner fingerprints data files by
size, mtime and content: if ``DATA`` was rewritten since DIR ran, the first point redoes those
stages (~1.5 minutes) and the later points copy its folders. Older runs' ``_config.yaml`` may
hold keys this code has removed: the bench writes ``WORKDIR/config.yaml`` without them (a
warning names them) and gives that to every child. What is left (embed, mine, rules, CDS
training and scoring, sample, combine, bitext, eval, report) took ~4-5 minutes in the demo run
of 2026-11-27 (its stage times; not yet measured through this bench), so it is off unless
``--downstream`` is given.

Everything is written under ``--workdir``; a rerun with the same settings reuses finished
trainings (and their measured minutes), evaluations and runner folders. Progress is logged;
the markdown table goes to stdout and every point to ``--json``.

    .venv/bin/python bench/quality_bench.py --run /tmp/demo2 --minutes 2.5,5,10,15 \\
        --pairs-per-lang 100,300,700 --downstream --json /tmp/quality.json
    # the smallest check (9-10 minutes on one thread of a loaded 2-core machine):
    OMP_NUM_THREADS=1 .venv/bin/python bench/quality_bench.py --run /tmp/demo2 --steps 20,40 \\
        --pairs-per-lang 50 --pairs-steps 20 --threads 1 --workdir /tmp/qb_tiny
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import os
import re
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data"
# The runner's stages that do not read the encoder: a downstream point copies them from DIR.
FIRST_ENCODER_STAGE = "vocab"

log = logging.getLogger("quality_bench")


class UsageError(Exception):
    """A wrong path or argument: one line, exit status 2."""


def parse_floats(text: str) -> list[float]:
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas: {text!r}") from e
    if not vals or any(not math.isfinite(v) or v <= 0 for v in vals):
        raise argparse.ArgumentTypeError(f"expected positive numbers: {text!r}")
    return sorted(set(vals))


def parse_float(text: str) -> float:
    vals = parse_floats(text)
    if len(vals) != 1:
        raise argparse.ArgumentTypeError(f"expected one positive number: {text!r}")
    return vals[0]


def parse_ints(text: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expected integers separated by commas: {text!r}") from e
    if not vals or any(v <= 0 for v in vals):
        raise argparse.ArgumentTypeError(f"expected positive integers: {text!r}")
    return sorted(set(vals))


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expected a positive integer: {text!r}") from e
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer: {text!r}")
    return v


def parse_pairs_per_lang(text: str) -> list[int | None]:
    """Positive integers and ``all`` (None: every pair), smallest first."""
    ks: set[int] = set()
    every = False
    for x in text.split(","):
        x = x.strip()
        if x == "all":
            every = True
        elif x:
            ks.update(parse_ints(x))
    if not ks and not every:
        raise argparse.ArgumentTypeError(f"expected k,k,... or all: {text!r}")
    return [*sorted(ks), *([None] if every else [])]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        epilog="Details of the method: the module docstring (bench/quality_bench.py).",
    )
    p.add_argument(
        "--run",
        help="a finished demo run folder (pipelines.run --output): its pretrain/model, "
        "inputs/train_pairs.tsv and _config.yaml are reused; default: run the demo preset into "
        "WORKDIR/demo_run first (~20 minutes on 2 cores)",
    )
    p.add_argument(
        "--data",
        default=str(DEFAULT_DATA),
        help="the ../shared/data folder: tatoeba/ dev files, and the demo's inputs for the runner "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--workdir",
        default="/tmp/quality_bench",
        help="folder for trainings, evaluations and runner folders; reused by a rerun with the "
        "same --run (default: %(default)s)",
    )
    p.add_argument(
        "--minutes",
        type=parse_floats,
        default=[2.5, 5.0, 10.0, 15.0],
        help="points of the minutes curve, in training minutes, comma-separated "
        "(default: 2.5,5,10,15)",
    )
    p.add_argument(
        "--steps",
        type=parse_ints,
        help="points of the minutes curve given as optimizer steps instead of --minutes, "
        "e.g. 20,40 (their minutes are still measured)",
    )
    p.add_argument(
        "--steps-per-minute",
        type=parse_float,
        help="rate that turns --minutes into steps (default: the run's own training stage, "
        "its steps over its seconds)",
    )
    p.add_argument(
        "--pairs-per-lang",
        type=parse_pairs_per_lang,
        default=[100, 300, 700],
        help="points of the pairs curve: training pairs kept per source language, "
        "comma-separated; 'all' keeps every pair (default: 100,300,700)",
    )
    p.add_argument(
        "--pairs-steps",
        type=positive_int,
        help="optimizer steps of each pairs-curve training (default: the config's train.steps)",
    )
    p.add_argument(
        "--no-minutes", action="store_true", help="skip the minutes curve (one training run)"
    )
    p.add_argument(
        "--no-pairs", action="store_true", help="skip the pairs curve (one training per k)"
    )
    p.add_argument(
        "--downstream",
        action="store_true",
        help="also mine, filter and score with each point's encoder (the runner after "
        "training, ~4-5 minutes a point on 2 cores): planted pairs found, bitext precision "
        "and recall on the evaluation half",
    )
    p.add_argument(
        "--threads",
        type=positive_int,
        help="CPU threads of every child (train.threads and OMP_NUM_THREADS); default: "
        "the config's train.threads and the environment",
    )
    p.add_argument("--json", help="write every point and the settings to this JSON file")
    p.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="progress logging (default: INFO)",
    )
    return p


def child_env(threads: int | None) -> dict[str, str]:
    env = dict(os.environ)
    if threads:
        for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env[k] = str(threads)
    return env


def run_child(work: Path, env: dict[str, str], name: str, cmd: list[str]) -> None:
    """Run one child to completion, its output in WORK/logs/NAME.log; a failure names the log
    and stops the bench."""
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    path = logs / f"{name}.log"
    log.debug("%s: %s", name, " ".join(cmd))
    with open(path, "w", encoding="utf-8") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        r = subprocess.run(cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        raise RuntimeError(f"{name} failed (exit {r.returncode}); see {path}")


class Bench:
    """Runs the children (each logged to WORKDIR/logs/) and holds the shared settings."""

    def __init__(self, args: argparse.Namespace, run: Path) -> None:
        self.args = args
        self.run = run
        self.data = Path(args.data).resolve()
        self.work = Path(args.workdir).resolve()
        self.config = current_config(run / "_config.yaml", self.work / "config.yaml")
        self.env = child_env(args.threads)
        # Where downstream points copy the encoder-independent stages from: the run, then the
        # first point done here (whose manifests match today's data files even if the run's
        # no longer do: the runner fingerprints data files by mtime too).
        self.seed_from = run

    def child(self, name: str, cmd: list[str]) -> None:
        run_child(self.work, self.env, name, cmd)

    def train(self, name: str, pairs: Path, steps: int, save_every: int) -> Path:
        """Fine-tune the run's pretrained encoder; returns the training folder. Keeps every
        checkpoint and writes each one's measured minutes to OUT/bench_times.json."""
        out = self.work / name
        times = out / "bench_times.json"
        if times.is_file():
            log.info("%s: finished before, reused", name)
            return out
        if out.exists():
            # A half-done training would resume with its old start time: start it over.
            shutil.rmtree(out)
        keep = steps // save_every + 2
        cmd = [
            sys.executable,
            "-m",
            "labse_model",
            "train",
            "--config",
            str(self.config),
            "--pairs",
            str(pairs),
            "--init",
            str(self.run / "pretrain" / "model"),
            "--output",
            str(out),
            f"steps={steps}",
            f"save_every={save_every}",
            f"keep_checkpoints={keep}",
            "progress=false",
        ]
        if self.args.threads:
            cmd.append(f"threads={self.args.threads}")
        log.info("%s: training %d steps, a checkpoint every %d", name, steps, save_every)
        t0 = time.time()
        self.child(name, cmd)
        wall = time.time() - t0
        minutes = {}
        for d in sorted((out / "checkpoints").glob("step-*")):
            manifest = d / "manifest.json"
            if manifest.is_file():
                step = int(d.name.split("-")[1])
                minutes[str(step)] = (manifest.stat().st_mtime - t0) / 60
        times.write_text(
            json.dumps({"start": t0, "wall_minutes": wall / 60, "minutes": minutes}, indent=1),
            encoding="utf-8",
        )
        log.info("%s: done in %.1f min", name, wall / 60)
        return out

    def dev(self, name: str, model: Path) -> dict[str, float]:
        """Tatoeba dev accuracy of an encoder (fractions), reused when already written."""
        out = self.work / "dev" / name
        report = out / "tatoeba_dev.json"
        if not report.is_file():
            log.info("%s: Tatoeba dev of %s", name, model)
            self.child(
                f"dev_{name}",
                [
                    sys.executable,
                    "-m",
                    "mining",
                    "eval",
                    "tatoeba",
                    "--model",
                    str(model),
                    "--data",
                    str(self.data / "tatoeba"),
                    "--prefix",
                    "dev",
                    "--output",
                    str(out),
                    "--config",
                    str(self.config),
                    "--overwrite",
                ],
            )
        avg = json.loads(report.read_text(encoding="utf-8"))["average"]
        return {
            "dev_xxx_eng": avg["xxx_to_eng"] / 100,
            "dev_eng_xxx": avg["eng_to_xxx"] / 100,
            "dev_avg": avg["both"] / 100,
        }

    def downstream(self, name: str, model: Path) -> dict[str, Any]:
        """The runner's stages after training with this encoder, in WORKDIR/runs/NAME."""
        out = self.work / "runs" / name
        if not (out / "eval" / "mined_pr.json").is_file():
            self._seed(out, self.stages_before_encoder())
            log.info("%s: mining and filtering with %s", name, model)
            self.child(
                f"run_{name}",
                [
                    sys.executable,
                    "-m",
                    "pipelines.run",
                    "--config",
                    str(self.config),
                    "--data",
                    str(self.data),
                    "--output",
                    str(out),
                    "--set",
                    f"model.init={model}",
                    "--set",
                    "train.steps=0",
                ],
            )
            self.seed_from = out
        return run_figures(out)

    def downstream_or_note(self, name: str, model: Path) -> dict[str, Any]:
        """A point whose downstream run fails (say, too few GOOD labels to calibrate) keeps its
        dev figures; the failure is logged and recorded, and the bench goes on."""
        try:
            return self.downstream(name, model)
        except RuntimeError as e:
            log.warning("%s: downstream figures missing: %s", name, e)
            return {"downstream_error": str(e)}

    def stages_before_encoder(self) -> list[str]:
        """The run's stages before the first that reads the encoder, in the order of its plan
        (DIR/_run.json), so the bench does not hard-code the runner's stage list."""
        plan = json.loads((self.run / "_run.json").read_text(encoding="utf-8"))["plan"]
        names = [row["stage"] for row in plan]
        if FIRST_ENCODER_STAGE not in names:
            raise RuntimeError(f"{self.run}/_run.json: no {FIRST_ENCODER_STAGE} stage in its plan")
        return names[: names.index(FIRST_ENCODER_STAGE)]

    def _seed(self, out: Path, stages: list[str]) -> None:
        """Copy the encoder-independent stages, with their manifests, so the runner finds them
        done (its manifests name paths relative to the run folder); if they no longer match,
        the runner redoes them, which costs time, not correctness."""
        state = out / "_state"
        state.mkdir(parents=True, exist_ok=True)
        for s in stages:
            manifest = self.seed_from / "_state" / f"{s}.manifest.json"
            if not manifest.is_file() or (state / manifest.name).is_file():
                continue
            if (self.seed_from / s).is_dir():
                shutil.copytree(self.seed_from / s, out / s, dirs_exist_ok=True)
            shutil.copy2(manifest, state / manifest.name)


def _known_only(data: dict[str, Any], cls: type, prefix: str, dropped: list[str]) -> dict:
    """``data`` without the keys dataclass ``cls`` does not have (recursing into nested
    config dataclasses); the dropped keys' paths are appended to ``dropped``."""
    import dataclasses
    import typing

    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls) if f.init}
    out = {}
    for key, value in data.items():
        if key not in fields:
            dropped.append(f"{prefix}.{key}")
        elif dataclasses.is_dataclass(hints[key]) and isinstance(value, dict):
            out[key] = _known_only(value, hints[key], f"{prefix}.{key}", dropped)
        else:
            out[key] = value
    return out


def current_config(run_config: Path, out: Path) -> Path:
    """The run's resolved config as this code reads it: a run written by an older version can
    carry keys that were removed since (every key of ``_config.yaml`` is written, defaults
    included, so a removed key had no effect). Those are dropped, with a warning naming them;
    every other value is the run's."""
    import yaml

    from labse_common.config import section_class, section_names

    cfg = yaml.safe_load(run_config.read_text(encoding="utf-8")) or {}
    known = set(section_names())
    dropped: list[str] = [s for s in cfg if s not in known]
    kept = {
        s: _known_only(v, section_class(s), s, dropped) if isinstance(v, dict) else v
        for s, v in cfg.items()
        if s in known
    }
    if dropped:
        log.warning(
            "%s: keys this code no longer knows, left out: %s", run_config, ", ".join(dropped)
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(kept, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return out


def run_figures(run: Path) -> dict[str, Any]:
    """Planted pairs the miner found, and the bitext's figures on the evaluation half."""
    import pyarrow.parquet as pq

    from pipelines.e2e_tasks import read_gold

    gold = read_gold(run / "inputs" / "gold.tsv")
    gold_set = {(g[0], g[2], g[3]) for g in gold}
    found = mined = 0
    for f in sorted((run / "mine").glob("*/mined.parquet")):
        rows = pq.read_table(f, columns=["src", "trg", "src_lang"]).to_pylist()
        mined += len(rows)
        found += sum((r["src_lang"], r["src"], r["trg"]) in gold_set for r in rows)
    pr = json.loads((run / "eval" / "mined_pr.json").read_text(encoding="utf-8"))["all"]
    return {
        "mined": mined,
        "planted_found": found,
        "planted_gold": len(gold),
        "bitext_eval_gold": pr["gold"],
        "bitext_eval_kept": pr["kept"],
        "bitext_eval_judged": pr["judged"],
        "bitext_eval_correct": pr["correct"],
        "precision": pr["precision"],
        "recall": pr["recall"],
    }


def subsample(pairs: Path, k: int | None, out: Path) -> dict[str, Any]:
    """Keep the k lines per source language with the smallest SHA-1 (every line when k is
    None), in the file's order; returns the counts."""
    lines = pairs.read_text(encoding="utf-8").splitlines(keepends=True)
    by_lang: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for i, line in enumerate(lines):
        cols = line.rstrip("\n").split("\t")
        lang = cols[2] if len(cols) >= 4 else ""
        by_lang[lang].append((hashlib.sha1(line.encode("utf-8")).hexdigest(), i))
    keep: set[int] = set()
    per_lang = {}
    for lang, items in by_lang.items():
        chosen = sorted(items)[:k] if k is not None else items
        keep.update(i for _, i in chosen)
        per_lang[lang] = len(chosen)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        f.writelines(line for i, line in enumerate(lines) if i in keep)
    return {"train_pairs": len(keep), "languages": len(per_lang), "per_lang": per_lang}


def steps_per_minute(run: Path) -> float:
    """The run's own training rate: its steps over the seconds of its train stage."""
    manifest = json.loads((run / "_state" / "train.manifest.json").read_text(encoding="utf-8"))
    stats = json.loads((run / "train" / "stats.json").read_text(encoding="utf-8"))
    return stats["steps"] / (manifest["seconds"] / 60)


def minutes_to_steps(minutes: list[float], rate: float) -> list[int]:
    """Steps for the requested minutes, as multiples of the steps of their greatest common
    divisor (to 1/100 minute), so that one checkpoint interval hits every point exactly."""
    centi = [max(1, round(m * 100)) for m in minutes]
    unit = math.gcd(*centi)
    unit_steps = max(1, round(unit / 100 * rate))
    return sorted({c // unit * unit_steps for c in centi})


def checkpoint_plan(targets: list[int]) -> tuple[int, int]:
    """Total steps and checkpoint interval so that every target step is a checkpoint; at most
    ~60 checkpoints (beyond that the nearest one stands in for a target)."""
    total = max(targets)
    every = math.gcd(*targets)
    if total // every > 60:
        every = math.ceil(total / 60)
    return total, every


def config_train_steps(config: Path) -> int:
    import yaml

    cfg = yaml.safe_load(config.read_text(encoding="utf-8"))
    return int(cfg["train"]["steps"])


def check_run(run: Path) -> None:
    for rel in (
        "_config.yaml",
        "pretrain/model",
        "inputs/train_pairs.tsv",
        "train/model",
        "train/stats.json",
        "_state/train.manifest.json",
    ):
        if not (run / rel).exists():
            raise UsageError(f"--run {run}: {rel} not found (a finished demo run folder?)")


def bench(args: argparse.Namespace) -> dict[str, Any]:
    data = Path(args.data).resolve()
    if not (data / "tatoeba").is_dir():
        raise UsageError(f"--data {data}: no tatoeba/ folder (the ../shared/data layout)")
    work = Path(args.workdir).resolve()
    if args.run:
        run = Path(args.run).resolve()
        check_run(run)
        work.mkdir(parents=True, exist_ok=True)
    else:
        work.mkdir(parents=True, exist_ok=True)
        run = work / "demo_run"
        if not (run / "report" / "report.md").is_file():
            log.info("no --run: running the demo preset into %s (~20 minutes)", run)
            run_child(
                work,
                child_env(args.threads),
                "demo_run",
                [
                    sys.executable,
                    "-m",
                    "pipelines.run",
                    "--config",
                    "demo",
                    "--data",
                    str(data),
                    "--output",
                    str(run),
                ],
            )
        check_run(run)
    # A work folder belongs to one run: its reused results would be another run's.
    owner = work / "bench_run.json"
    if owner.is_file():
        was = json.loads(owner.read_text(encoding="utf-8"))["run"]
        if was != str(run):
            raise UsageError(f"--workdir {work} holds the bench of {was}, not {run}: use another")
    else:
        owner.write_text(json.dumps({"run": str(run)}), encoding="utf-8")

    b = Bench(args, run)
    pairs_file = run / "inputs" / "train_pairs.tsv"
    all_counts = subsample(pairs_file, None, work / "pairs" / "all.tsv")
    points: list[dict[str, Any]] = []

    def point(curve: str, label: str, model: Path, **extra: Any) -> dict[str, Any]:
        p: dict[str, Any] = {"curve": curve, "point": label, "model": str(model), **extra}
        p.update(b.dev(re.sub(r"[^A-Za-z0-9_.-]+", "_", label), model))
        points.append(p)
        return p

    base = point(
        "peer",
        "pretrained",
        run / "pretrain" / "model",
        steps=0,
        minutes=0.0,
        train_pairs=0,
    )
    if args.downstream:
        base.update(b.downstream_or_note("pretrained", run / "pretrain" / "model"))
    ref_steps = json.loads((run / "train" / "stats.json").read_text(encoding="utf-8"))["steps"]
    ref_manifest = json.loads((run / "_state" / "train.manifest.json").read_text(encoding="utf-8"))
    ref = point(
        "reference",
        "run's encoder",
        run / "train" / "model",
        steps=ref_steps,
        minutes=ref_manifest["seconds"] / 60,
        train_pairs=all_counts["train_pairs"],
    )
    if (run / "eval" / "mined_pr.json").is_file():
        ref.update(run_figures(run))

    if not args.no_minutes:
        if args.steps:
            targets = args.steps
            rate = None
        else:
            rate = args.steps_per_minute or steps_per_minute(run)
            targets = minutes_to_steps(args.minutes, rate)
            log.info("minutes curve: %.1f steps a minute -> steps %s", rate, targets)
        total, every = checkpoint_plan(targets)
        out = b.train(f"time_s{total}_e{every}", pairs_file, total, every)
        times = json.loads((out / "bench_times.json").read_text(encoding="utf-8"))["minutes"]
        have = sorted(int(s) for s in times)
        for t in targets:
            step = min(have, key=lambda s: abs(s - t))
            model = out / "checkpoints" / f"step-{step:08d}"
            p = point(
                "minutes",
                f"step {step}",
                model,
                steps=step,
                minutes=times[str(step)],
                train_pairs=all_counts["train_pairs"],
                schedule_steps=total,
                **({"requested_minutes": t / rate} if rate else {}),
            )
            if args.downstream:
                p.update(b.downstream_or_note(f"step{step}_of{total}", model))

    if not args.no_pairs:
        steps = args.pairs_steps or config_train_steps(b.config)
        for k in args.pairs_per_lang:
            tag = "all" if k is None else str(k)
            sub = work / "pairs" / f"{tag}.tsv"
            counts = subsample(pairs_file, k, sub)
            out = b.train(f"pairs_{tag}_s{steps}", sub, steps, steps)
            times = json.loads((out / "bench_times.json").read_text(encoding="utf-8"))
            p = point(
                "pairs",
                f"{tag} per language",
                out / "model",
                steps=steps,
                minutes=times["wall_minutes"],
                train_pairs=counts["train_pairs"],
                pairs_per_lang=k,
                schedule_steps=steps,
            )
            if args.downstream:
                p.update(b.downstream_or_note(f"pairs_{tag}_s{steps}", out / "model"))

    for p in points:
        p["dev_ratio"] = p["dev_avg"] / base["dev_avg"] if base["dev_avg"] else None
    return {
        "run": str(run),
        "data": str(data),
        "peer": "the pretrained encoder of the run without fine-tuning (run/pretrain/model)",
        "threads": args.threads,
        "downstream": args.downstream,
        "points": points,
    }


def _f(v: Any, fmt: str) -> str:
    return "–" if v is None else format(v, fmt)


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"Quality bench of {result['run']} (data {result['data']}).",
        "dev avg: Tatoeba dev, 16 languages, mean of xxx->eng and eng->xxx. "
        "ratio: dev avg / the peer's, the pretrained encoder without fine-tuning, "
        "evaluated in this same bench run.",
        "planted found: mined pairs that are planted pairs (both halves) / planted pairs; "
        "precision and recall: the final bitext on the evaluation half (runner's eval stage).",
        "",
        "| curve | point | steps | train min | pairs/lang | train pairs | xxx→eng | eng→xxx "
        "| dev avg | ratio vs pretrained | planted found | precision (eval half) "
        "| recall (eval half) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in result["points"]:
        found = (
            f"{p['planted_found']}/{p['planted_gold']}"
            if p.get("planted_gold") is not None
            else "–"
        )
        per_lang = p.get("pairs_per_lang")
        per_lang_txt = "0" if p["curve"] == "peer" else _f(per_lang, "d").replace("–", "all")
        lines.append(
            f"| {p['curve']} | {p['point']} | {p['steps']} | {p['minutes']:.2f} | {per_lang_txt} "
            f"| {p['train_pairs']} | {p['dev_xxx_eng']:.3f} | {p['dev_eng_xxx']:.3f} "
            f"| {p['dev_avg']:.3f} | {_f(p['dev_ratio'], '.2f')} | {found} "
            f"| {_f(p.get('precision'), '.3f')} | {_f(p.get('recall'), '.3f')} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        result = bench(args)
    except UsageError as e:
        log.error("%s", e)
        return 2
    except RuntimeError as e:
        log.error("%s", e)
        return 1
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        log.info("points written to %s", args.json)
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
