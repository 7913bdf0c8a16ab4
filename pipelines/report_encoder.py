"""Which encoder a run embedded with, and its shape, for the report's summary box: the model the
run trained (``train/model``), else ``model.init`` of the run's effective configuration."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from labse_common.sections.model import ModelConfig
from pipelines.report_data import read_json_or_none

log = logging.getLogger("pipelines.report")

#: The demo's encoder width (the model section's default): on a user's data it is a toy.
DEMO_HIDDEN = ModelConfig().hidden_size


@dataclass
class Encoder:
    where: str  # "trained in this run (`train/model`)" | "model.init `PATH`" | ...
    hidden: int | None
    layers: int | None
    heads: int | None
    vocab: int | None
    from_checkpoint: bool  # shape read from the checkpoint's config.json, not the run config

    def shape(self) -> str:
        if self.hidden is None:
            return "shape unknown"
        parts = [f"hidden {self.hidden}", f"{self.layers} layers"]
        if self.heads:
            parts.append(f"{self.heads} heads")
        if self.vocab:
            parts.append(f"vocabulary {self.vocab}")
        return ", ".join(parts)

    def is_demo_shape(self) -> bool:
        return self.hidden is not None and self.hidden <= DEMO_HIDDEN


def read_run_config(run: Path) -> dict:
    """The run's effective configuration (``_config.yaml``), or {} when missing or damaged: the
    report then says less, it does not fail."""
    p = run / "_config.yaml"
    if not p.is_file():
        return {}
    import yaml

    try:
        doc = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        log.warning("%s: not readable as YAML (%s); the summary leaves the encoder out", p, e)
        return {}
    return doc if isinstance(doc, dict) else {}


def checkpoint_config(folder: Path) -> dict | None:
    """The transformer's ``config.json`` of a model folder in either layout: a Hugging Face
    folder (``config.json`` at its root) or a sentence-transformers one (``modules.json``
    naming the Transformer module's subfolder)."""
    modules = folder / "modules.json"
    if modules.is_file():
        import json

        try:
            mods = json.loads(modules.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            mods = []
        for m in mods if isinstance(mods, list) else []:
            if isinstance(m, dict) and str(m.get("type", "")).endswith("Transformer"):
                cfg = read_json_or_none(folder / str(m.get("path", "")) / "config.json")
                if cfg:
                    return cfg
    return read_json_or_none(folder / "config.json")


def run_encoder(run: Path, cfg: dict, trained: bool) -> Encoder | None:
    """The encoder the run used (``trained``: the train stage finished), or None when the run
    neither trained one nor was given one."""
    model = cfg.get("model") if isinstance(cfg.get("model"), dict) else {}
    init = model.get("init")
    if trained:
        folder, where = run / "train" / "model", "trained in this run (`train/model`)"
        if init:
            where = f"fine-tuned in this run from model.init `{init}` (`train/model`)"
    elif init:
        folder, where = Path(str(init)), f"model.init `{init}`"
    else:
        return None
    ck = checkpoint_config(folder) if folder.is_dir() else None
    src = ck or model  # the run config's shape when the checkpoint cannot be read here
    return Encoder(
        where=where,
        hidden=_int(src.get("hidden_size")),
        layers=_int(src.get("num_hidden_layers")),
        heads=_int(src.get("num_attention_heads")),
        vocab=_int(src.get("vocab_size")),
        from_checkpoint=ck is not None,
    )


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def demo_sources(cfg: dict, info: dict) -> bool:
    """The run mined the demo's sources (its task builder or the embedded synthetic sample)."""
    sources = cfg.get("sources") if isinstance(cfg.get("sources"), dict) else {}
    return info.get("data") == "synthetic" or bool(sources.get("demo"))
