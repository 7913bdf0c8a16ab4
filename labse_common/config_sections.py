"""The sections of a config: one dataclass per preset section, found by name, and
:func:`load`, which reads one section (preset, then overrides, then flags) as its dataclass."""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from labse_common.config_files import apply_overrides, load_section, preset_path, read_preset
from labse_common.config_values import ConfigError, from_dict

T = TypeVar("T")


def section_class(section: str) -> type:
    """The dataclass of ``section`` (``labse_common.sections.<section>.CONFIG``)."""
    try:
        mod = importlib.import_module(f"labse_common.sections.{section}")
    except ModuleNotFoundError as e:
        if e.name and e.name.endswith(f"sections.{section}"):
            raise ConfigError(f"unknown config section {section!r}") from None
        raise
    return mod.CONFIG


def load(
    section: str | type[T],
    preset: str | os.PathLike | None = "demo",
    overrides: Iterable[str] = (),
    flags: Mapping[str, Any] | None = None,
) -> T:
    """A stage's typed configuration: the preset's section, then ``key=value`` overrides, then
    explicit flags (those not None win). ``section`` is a section name or its dataclass; a
    dataclass whose ``SECTION`` attribute names a preset section reads that section."""
    cls = section_class(section) if isinstance(section, str) else section
    name = section if isinstance(section, str) else getattr(cls, "SECTION", cls.__name__)
    if preset is not None:  # a misspelt section would otherwise leave its keys at their defaults
        unknown = sorted(set(read_preset(preset)) - set(section_names()))
        if unknown:
            raise ConfigError(
                f"{preset_path(preset)}: unknown config section(s) {', '.join(map(str, unknown))}; "
                f"known: {', '.join(section_names())}"
            )
    raw = load_section(preset, name) if preset is not None else {}
    raw = apply_overrides(raw, overrides)
    for key, value in (flags or {}).items():
        if value is not None:
            raw[key] = value
    return from_dict(cls, raw, prefix=name)


def section_names() -> list[str]:
    """Every section with a module in labse_common/sections/, sorted."""
    import pkgutil

    from labse_common import sections

    return sorted(m.name for m in pkgutil.iter_modules(sections.__path__) if not m.ispkg)
