"""``model.init``: the encoder folder a user gives, and the warning when a user's run has none.

The released LaBSE reaches a machine in one of two layouts: the plain folder that
``huggingface-cli download sentence-transformers/LaBSE --local-dir DIR`` writes (config.json,
modules.json, model.safetensors, the tokenizer files at its top), which the encoder loader reads
as it is, or the Hugging Face cache (``models--sentence-transformers--LaBSE/`` with ``refs/``,
``blobs/`` and ``snapshots/<hash>/``), whose encoder folder is one snapshot.
:func:`resolve_init` turns the second into the first. Either may be on object storage
(``s3://…``, ``gs://…``): it is read from this machine's copy (:mod:`labse_common.remote_cache`).

Without ``model.init`` a run trains an encoder from scratch in the ``model:`` shape; the demo's
is 128 wide, made to show every stage on a CPU in minutes, not to mine a user's crawl well.
:func:`demo_shape_warning` says so in one line.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from labse_common.errors import InputError
from labse_common.filesystems import is_remote

FLAG = "model.init"
# The keys that make an encoder's shape (the rest of model: is how it is trained).
SHAPE_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
_ENCODER_FILES = ("config.json", "modules.json")


def _is_encoder(path: Path) -> bool:
    return any((path / f).is_file() for f in _ENCODER_FILES)


def _snapshot(repo: Path) -> Path:
    """The snapshot of a cache repository folder: the one ``refs/main`` names, else the only
    one."""
    snaps = repo / "snapshots"
    ref = repo / "refs" / "main"
    if ref.is_file():
        named = snaps / ref.read_text(encoding="utf-8").strip()
        if named.is_dir():
            return named
    found = sorted(d for d in snaps.iterdir() if d.is_dir())
    if len(found) == 1:
        return found[0]
    raise InputError(
        repo,
        f"a Hugging Face cache folder with {len(found)} snapshots and no refs/main naming one: "
        "give model.init the snapshot folder (snapshots/<hash>)",
        FLAG,
    )


def resolve_init(path: str | Path, flag: str | None = FLAG) -> Path:
    """``model.init`` as the encoder folder (absolute): an encoder folder as it is; a Hugging
    Face cache repository folder (``models--ORG--NAME``, or a hub cache holding exactly one)
    as its snapshot (see the module docstring). Anything else is returned for the caller to
    refuse with its own message. A folder on object storage (``s3://…``, ``gs://…``) is first
    copied to this machine once (:func:`labse_common.remote_cache.local_folder`: every local
    stage reads the encoder from a path); a missing one is an InputError naming it."""
    if is_remote(path):
        from labse_common.remote_cache import local_folder

        path = local_folder(str(path), flag)
    p = Path(path).expanduser().resolve()
    if not p.is_dir() or _is_encoder(p):
        return p
    if not (p / "snapshots").is_dir():
        repos = sorted(d for d in p.glob("models--*") if (d / "snapshots").is_dir())
        if len(repos) != 1:  # not the cache (or several models in it): the caller says why
            return p
        p = repos[0]
    return _snapshot(p)


def demo_shape(preset: str = "demo") -> dict[str, int]:
    """The encoder shape of the demo preset's ``model:`` section."""
    from labse_common.config import from_dict, read_preset
    from labse_common.sections.model import ModelConfig

    model = from_dict(ModelConfig, read_preset(preset).get("model") or {}, prefix="model")
    return {k: getattr(model, k) for k in SHAPE_KEYS}


def demo_shape_warning(values: Mapping[str, Mapping]) -> str | None:
    """One line when a run on a user's sources (not the demo's) trains an encoder from scratch
    no wider than the demo's, else None. ``values``: the typed config sections."""
    model = values["model"]
    if model["init"] or values["sources"]["demo"] is not None:
        return None
    demo = demo_shape()
    if model["hidden_size"] > demo["hidden_size"]:
        return None
    shape = ", ".join(f"{k} {model[k]}" for k in SHAPE_KEYS)
    return (
        f"model.init is not given: this run trains the demo's small encoder from scratch "
        f"({shape}), which shows the stages on a CPU but mines a real crawl poorly; give "
        "model.init the released LaBSE (docs/own-data.md, 'Start from LaBSE')"
    )
