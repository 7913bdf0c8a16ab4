"""Atomic, verifiable training checkpoints.

Layout: ``<output>/checkpoints/step-00000100/`` holds the model (Hugging Face + sentence-transformers
layout, loadable as is), ``trainer_state.pt`` (optimizer, scheduler, step, data position),
``rng-rank<r>.pt`` per rank and ``manifest.json`` (size and SHA-256 of every file).

A checkpoint is written into ``.tmp-step-...``, every file fsynced, then renamed into place, so a
kill -9 at any moment leaves either the complete new checkpoint or none; older ones are only
pruned after the rename, so the previous checkpoint always survives a crash mid-save. A
checkpoint whose manifest does not match its files is reported and skipped on resume.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
from collections.abc import Callable

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
TRAINER_STATE = "trainer_state.pt"
_STEP_DIR = re.compile(r"^step-(\d+)$")


class CorruptCheckpoint(RuntimeError):
    """A checkpoint directory whose files do not match its manifest."""


def step_dir_name(step: int) -> str:
    return f"step-{step:08d}"


def tmp_dir_for(root: str, step: int) -> str:
    return os.path.join(root, f".tmp-{step_dir_name(step)}")


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _walk_files(directory: str) -> list[str]:
    out = []
    for base, _dirs, files in os.walk(directory):
        for name in files:
            rel = os.path.relpath(os.path.join(base, name), directory)
            if rel != MANIFEST:
                out.append(rel)
    return sorted(out)


def prepare_tmp(root: str, step: int) -> str:
    """Create an empty temporary directory for ``step`` (main rank only)."""
    tmp = tmp_dir_for(root, step)
    if os.path.exists(tmp):
        shutil.rmtree(tmp)  # debris of a save killed half-way
    os.makedirs(tmp)
    return tmp


def finalize(root: str, step: int, keep: int, extra: dict | None = None) -> str:
    """Manifest + fsync + rename the temporary directory into place, then prune old ones."""
    tmp = tmp_dir_for(root, step)
    files = _walk_files(tmp)
    manifest = {
        "step": step,
        "files": {
            rel: {
                "bytes": os.path.getsize(os.path.join(tmp, rel)),
                "sha256": _sha256(os.path.join(tmp, rel)),
            }
            for rel in files
        },
        **(extra or {}),
    }
    with open(os.path.join(tmp, MANIFEST), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    for rel in files:
        _fsync_path(os.path.join(tmp, rel))
    for base, _dirs, _files in os.walk(tmp):
        _fsync_path(base)
    final = os.path.join(root, step_dir_name(step))
    if os.path.exists(final):
        shutil.rmtree(final)  # a rerun of the same step after a resume: replace it
    os.rename(tmp, final)
    _fsync_path(root)
    prune(root, keep)
    return final


def clean_tmp(root: str) -> None:
    """Remove half-written ``.tmp-step-*`` directories left by a crash mid-save."""
    if os.path.isdir(root):
        for name in os.listdir(root):
            if name.startswith(".tmp-"):
                log.warning("removing an incomplete checkpoint left by a crash: %s", name)
                shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def list_checkpoints(root: str) -> list[tuple[int, str]]:
    """(step, path) of the completed checkpoints under ``root``, newest first."""
    if not os.path.isdir(root):
        return []
    found = []
    for name in os.listdir(root):
        m = _STEP_DIR.match(name)
        if m and os.path.isdir(os.path.join(root, name)):
            found.append((int(m.group(1)), os.path.join(root, name)))
    return sorted(found, reverse=True)


def prune(root: str, keep: int) -> None:
    """Delete all but the ``keep`` newest checkpoints (at least two are always kept)."""
    for _step, path in list_checkpoints(root)[max(keep, 2) :]:
        shutil.rmtree(path, ignore_errors=True)


def verify(path: str) -> dict:
    """Check every file against the manifest; return the manifest or raise CorruptCheckpoint."""
    mpath = os.path.join(path, MANIFEST)
    try:
        with open(mpath, encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise CorruptCheckpoint(f"{path}: unreadable manifest ({e})") from e
    for rel, meta in manifest.get("files", {}).items():
        fp = os.path.join(path, rel)
        if not os.path.isfile(fp):
            raise CorruptCheckpoint(f"{path}: missing {rel}")
        if os.path.getsize(fp) != meta["bytes"] or _sha256(fp) != meta["sha256"]:
            raise CorruptCheckpoint(f"{path}: {rel} does not match its manifest checksum")
    return manifest


def latest_valid(
    root: str, on_corrupt: Callable[[str, Exception], None] | None = None
) -> str | None:
    """The newest checkpoint that verifies; corrupt ones are reported and skipped (kept on disk)."""
    for _step, path in list_checkpoints(root):
        try:
            verify(path)
            return path
        except CorruptCheckpoint as e:
            if on_corrupt:
                on_corrupt(path, e)
            else:
                log.error("skipping corrupt checkpoint: %s", e)
    return None
