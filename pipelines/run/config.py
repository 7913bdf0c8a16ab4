"""The effective config of a run: the preset with its --set overrides, every section typed."""

from __future__ import annotations

import dataclasses

from labse_common.config import ConfigError, apply_overrides, from_dict, read_preset, section_class


def typed_config(cfg: dict) -> dict:
    """Every known section through its dataclass (defaults filled in, types checked), as data."""
    from labse_common.config import section_names

    return {
        name: dataclasses.asdict(from_dict(section_class(name), cfg.get(name) or {}, prefix=name))
        for name in section_names()
    }


def effective_config(preset: str, overrides: list[str]) -> dict:
    """The preset with --set overrides applied, every section type-checked (ConfigError)."""
    cfg = apply_overrides(read_preset(preset), overrides)
    from labse_common.config import section_names

    unknown = sorted(set(cfg) - set(section_names()))
    if unknown:
        raise ConfigError(
            f"unknown config section(s) {', '.join(unknown)}; known: {', '.join(section_names())}"
        )
    values = typed_config(cfg)
    cfg["run"] = values["run"]  # the runner's own section, defaults filled in
    return cfg
