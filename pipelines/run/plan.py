"""What a rerun does: the fingerprints a stage's cache key is made of, its manifest, and the
plan (each stage run, skip, off or missing, with the reason)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from labse_common.datafiles import read_json
from labse_common.errors import InputError
from labse_common.filesystems import is_remote
from pipelines.run.declare import STAGES, Context, Stage, manifest_path
from pipelines.run.run_folder import stage_files
from pipelines.run.stages import NAMES

log = logging.getLogger("pipelines.run")

SMALL_FILE = 64 << 20  # data files up to this size are content-hashed; larger: size + mtime


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


def out_relative(obj: object, out: Path, remote: str | None = None) -> object:
    """Commands with OUTPUT spelled as $OUT, so a moved output folder keeps its manifests (and
    a stage's key is the same whether it reads the scratch copy or the remote folder)."""
    if isinstance(obj, list):
        return [out_relative(o, out, remote) for o in obj]
    text = str(obj).replace(str(out), "$OUT")
    return text.replace(remote.rstrip("/"), "$OUT") if remote else text


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
    cmds = out_relative(stage.command_lines(ctx), ctx.out, ctx.remote)
    # The config file path is in every command; what the stage reads of it is in `config`.
    cfg_arg = out_relative(str(ctx.config_file), ctx.out)
    cmds = [[a for a in c if a != cfg_arg] for c in cmds]
    return {
        "config": _sha(stage_reads(stage, ctx)),
        "command": _sha([c[1:] for c in cmds]),  # not the interpreter's path
        "upstream": {d: keys.get(d, "") for d in stage.deps(ctx)},
        "files": {os.path.basename(f): _sha(_file_part(f, ctx)) for f in stage.files(ctx)},
    }


def _file_part(path: str, ctx: Context) -> dict:
    """A data file's fingerprint; a file of the run folder itself (the person's labels.tsv) by
    size and content only: its path and time differ between scratch copies of a run folder on
    object storage, and a runner elsewhere must not rerun the stages that read it."""
    if is_remote(path):  # a remote source glob: by its listing
        from pipelines.run.corpus_stages import source_listing

        return source_listing(path)
    fp = file_fingerprint(path)
    if path.startswith(str(ctx.out) + os.sep) and "sha256" in fp:
        return {"size": fp["size"], "sha256": fp["sha256"]}
    return fp


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


def _why_rerun(old: dict, parts: dict, key: str, ctx: Context, stage: str) -> str | None:
    if old.get("key") != key:
        before = old["parts"]
        changed = [k for k in ("config", "command") if before.get(k) != parts[k]]
        for kind, label in (("upstream", "input"), ("files", "file")):
            a, b = before.get(kind), parts[kind]
            a = a if isinstance(a, dict) else {}
            changed += [f"{label} {n}" for n in sorted(set(a) | set(b)) if a.get(n) != b.get(n)]
        return "changed: " + (", ".join(changed) or "key")
    files = stage_files(ctx.out, ctx.folder, stage)
    for rel, size in old["outputs"]:
        if files.get(str(rel)) != size:
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
            reason = _why_rerun(old, parts, key, ctx, s.name)
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
