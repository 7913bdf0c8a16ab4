"""A folder in the Hugging Face cache layout, as ``huggingface_hub`` leaves a download on disk:
``models--ORG--NAME/`` with ``blobs/<sha256>``, ``snapshots/<commit>/`` of relative symlinks to
the blobs, and ``refs/main`` naming the commit (model.init given that folder)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

COMMIT = "e34fab64a3011d2176c99545a93d5cbddc9a91b7"


def as_hf_cache(model_dir: Path, hub: Path, repo_id: str = "sentence-transformers/LaBSE") -> Path:
    """Copy ``model_dir`` into ``hub`` in the cache layout; the ``models--...`` folder."""
    repo = hub / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / COMMIT
    (repo / "blobs").mkdir(parents=True)
    for f in sorted(p for p in model_dir.rglob("*") if p.is_file()):
        data = f.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = snap / f.relative_to(model_dir)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT, encoding="utf-8")
    return repo
