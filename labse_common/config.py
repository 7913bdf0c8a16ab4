"""YAML presets with command-line overrides, shared by every stage's CLI.

A preset file (``configs/demo.yaml``, ``configs/paper.yaml``) has one top-level section per
stage (``corpus``, ``vocab``, ``train``, ``mining``, ...). A stage reads its own section, then
applies ``key=value`` overrides (dotted keys reach nested values; values are parsed as YAML so
``lr=1e-5`` is a float and ``langs=[en,de]`` a list).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
PRESETS = ("demo", "paper")


def preset_path(name_or_path: str) -> Path:
    """Resolve ``demo``/``paper`` to the shipped preset, anything else as a file path."""
    if name_or_path in PRESETS:
        return CONFIG_DIR / f"{name_or_path}.yaml"
    path = Path(name_or_path)
    if not path.is_file():
        raise FileNotFoundError(f"config file not found: {name_or_path}")
    return path


def load_section(name_or_path: str, section: str) -> dict[str, Any]:
    """Load one stage's section of a preset (empty dict when the section is absent)."""
    with open(preset_path(name_or_path), encoding="utf-8") as f:
        data = yaml.safe_load(f) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{name_or_path}: top level must be a mapping")
    return copy.deepcopy(data.get(section) or {})


def apply_overrides(cfg: Mapping[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Return a copy of ``cfg`` with ``a.b=value`` overrides applied."""
    out = copy.deepcopy(dict(cfg))
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"override {item!r} is not key=value")
        key, raw = item.split("=", 1)
        node = out
        parts = key.strip().split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ValueError(f"override {item!r}: {p!r} is not a section")
        node[parts[-1]] = _parse_value(raw)
    return out


def resolve_section(
    preset: str, section: str, overrides: Iterable[str], flags: Mapping[str, Any]
) -> dict[str, Any]:
    """A CLI's config: the preset's section, then ``--set`` overrides, then explicit flags
    (those not None win). Raises FileNotFoundError/ValueError for a bad preset or override."""
    cfg = apply_overrides(load_section(preset, section), overrides)
    cfg.update({k: v for k, v in flags.items() if v is not None})
    return cfg


def _parse_value(raw: str) -> Any:
    value = yaml.safe_load(raw)
    if isinstance(value, str):
        # YAML 1.1 reads "1e-5" as a string; a config value like that is meant as a number.
        try:
            return float(value)
        except ValueError:
            return value
    return value


def require_file(path: str | os.PathLike, what: str) -> str:
    """Fail early with a clear message when a local input path is missing."""
    p = os.fspath(path)
    if "://" not in p and not os.path.exists(p):
        raise FileNotFoundError(f"{what} not found: {p}")
    return p
