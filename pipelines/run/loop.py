"""The run over the plan: stage after stage, the run's history in ``_run.json``, an optional
stage that fails, the stop for a person's labels, and --publish."""

from __future__ import annotations

import argparse
import copy
import logging
import os
import re
import shlex
import shutil
import sys
import time

import yaml

from labse_common.cli import EXIT_NEEDS_LABELS, LABELS_NEEDED
from labse_common.errors import UsageError
from pipelines.run.bitext_stages import BITEXT, REPORT
from pipelines.run.declare import Context
from pipelines.run.execute import StageFailed, run_stage, write_json
from pipelines.run.plan import Plan, make_plan
from pipelines.run.stages import NAMES

log = logging.getLogger("pipelines.run")


def publish_bitext(
    ctx: Context, url: str, *, overwrite: bool = False, protected: dict | None = None
) -> None:
    """The final bitext folder, with the report inside it, copied to ``url``; ``overwrite``
    and ``protected`` as :func:`labse_common.publish.publish` takes them. The staging folder
    goes, however the publication ends (one left by a killed runner goes at the next)."""
    from labse_common.publish import publish

    report = ctx.d(REPORT)
    staging = ctx.out / "_publish"
    if ctx.folder is not None:  # the scratch copy may lack them (a runner elsewhere made them)
        ctx.folder.fetch(BITEXT.name)
        ctx.folder.fetch(REPORT.name)
    shutil.rmtree(staging, ignore_errors=True)
    try:
        shutil.copytree(ctx.d(BITEXT), staging)
        if report.is_dir():
            if (staging / "report").exists():
                raise UsageError(
                    f"{ctx.d(BITEXT) / 'report'}: the bitext folder holds a report of its own "
                    "(left by an earlier publication into it?): remove it and run again"
                )
            shutil.copytree(report, staging / "report")
        summary = publish(staging, url, "--publish", overwrite=overwrite, protected=protected)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log.info("published %s files (%s bytes) to %s", summary.get("files"), summary.get("bytes"), url)
    sys.stdout.write(f"  published: {url}\n")


def plan_lines(plans: list[Plan]) -> str:
    width = max(len(n) for n in NAMES)
    return "".join(f"{p.stage.name:<{width}}  {p.action:<11} {p.reason}\n" for p in plans)


def run_stages(ctx: Context, args: argparse.Namespace) -> int:
    """Run the stages the plan says to run, in order; the run's exit status."""
    plans = make_plan(ctx, args.start, args.only)
    todo, history = _begin(ctx, plans)
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
                rc = _stop_status(ctx, p, e, history)
                if rc is not None:
                    return rc
                # Go on without it: plan the rest again (the stages after it fall back).
                plans = make_plan(ctx, args.start, args.only)
                history["plan"] = _plan_record(plans)
                history.setdefault("soft_failed", {})[p.stage.name] = ctx.soft_failed[p.stage.name]
                _save(ctx, history)
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
            history.setdefault("engine", {})[p.stage.name] = m["engine"]
            if m.get("resumed_shards"):
                history.setdefault("resumed_shards", {})[p.stage.name] = m["resumed_shards"]
                log.info(
                    "%s: %d shard(s) kept from an earlier attempt",
                    p.stage.name,
                    m["resumed_shards"],
                )
            _save(ctx, history)
            bar.update(1)
    finally:
        bar.close()
    history["finished"] = time.time()
    _save(ctx, history)
    root = ctx.remote or str(ctx.out)  # the run folder, where the user looks
    sys.stdout.write(
        f"finished: {root}\n  bitext: {root}/{BITEXT.name}/bitext.tsv.gz\n"
        f"  report: {root}/{REPORT.name}/report.html\n"
    )
    return 0


def _begin(ctx: Context, plans: list[Plan]) -> tuple[list[Plan], dict]:
    """Refuse a plan with missing inputs, write the config and the run's history: the stages to
    run and the history."""
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
    _save(ctx, history)
    return todo, history


#: The labels stop line's "(or ... in any editor)" (the labels task's); for a labels file on
#: object storage an editor cannot open the URL, so the line says what is safe instead.
_ANY_EDITOR = re.compile(r"\(or [^()]*\bin any editor\)")
EDIT_REMOTE = (
    "(the page is the safe way: it saves each label back to object storage as you give it; "
    "an editor cannot open the URL: download the file, fill its label column with GOOD or BAD, "
    "and upload it back to the same URL)"
)


def _stop_status(ctx: Context, p: Plan, e: StageFailed, history: dict) -> int | None:
    """The run's exit status when a failed stage ends it (the labels it waits for, or a stage
    that is not optional); None for an optional stage, then recorded in ``ctx.soft_failed``."""
    if e.rc == EXIT_NEEDS_LABELS:  # not a failure: the run waits for a person
        msg = next(
            (ln for ln in reversed(e.tail) if ln.startswith(LABELS_NEEDED)),
            f"{LABELS_NEEDED} see {e}",
        )
        if ctx.remote:  # the file to label is the remote one (python -m filters label URL)
            msg = _ANY_EDITOR.sub(EDIT_REMOTE, msg.replace(str(ctx.out), ctx.remote.rstrip("/")))
        history["waiting_for"] = p.stage.name
        _save(ctx, history)
        again = shlex.join(["python", "-m", "pipelines.run", *sys.argv[1:]])
        sys.stderr.write(f"{msg.strip()}; then run the same command again ({again})\n")
        return EXIT_NEEDS_LABELS
    log.error("%s", e)
    for line in e.tail:
        log.error("  | %s", line)
    if not p.stage.optional:
        history["failed"] = p.stage.name
        _save(ctx, history)
        # A stage's own usage error (exit 2) is the user's to fix: say so the same way.
        return 2 if e.rc == 2 else 1
    errs = [ln for ln in e.tail if "error" in ln.lower()] or e.tail[-1:]
    ctx.soft_failed[p.stage.name] = errs[-1].strip() if errs else str(e)
    log.warning("%s is optional: continuing without it", p.stage.name)
    return None


def _save(ctx: Context, history: dict) -> None:
    """``_run.json`` written; with the run folder on object storage, the run's state uploaded
    with it (what a runner elsewhere goes on from)."""
    write_json(ctx.out / "_run.json", history)
    if ctx.folder is not None:
        ctx.folder.push_state()


def _plan_record(plans: list[Plan]) -> list[dict]:
    return [{"stage": p.stage.name, "action": p.action, "reason": p.reason} for p in plans]


def _write_config(ctx: Context) -> None:
    text = yaml.safe_dump(copy.deepcopy(ctx.cfg), sort_keys=False, allow_unicode=True)
    if not ctx.config_file.is_file() or ctx.config_file.read_text(encoding="utf-8") != text:
        tmp = ctx.config_file.with_suffix(".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, ctx.config_file)
