"""Config files: the shipped presets, ``extends:`` chains, strict YAML and ``key=value``
overrides. Everything here is plain data; :mod:`labse_common.config_values` types it."""

from __future__ import annotations

import copy
import os
import sys
import sysconfig
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from labse_common.config_values import ConfigError, ConfigFileNotFound, clip, shown


def _config_dir() -> Path:
    """configs/ beside the sources (a checkout, an editable install), else where a wheel puts the
    presets (pyproject's data-files: ``<prefix>/share/labse-pipeline/configs``)."""
    beside = Path(__file__).resolve().parent.parent / "configs"
    if beside.is_dir():
        return beside
    for prefix in (sysconfig.get_path("data"), sys.prefix):
        installed = Path(prefix) / "share" / "labse-pipeline" / "configs"
        if installed.is_dir():
            return installed
    return beside


CONFIG_DIR = _config_dir()
PRESETS = ("demo", "paper")


#: More values than this once YAML's aliases are expanded is refused: a config holds hundreds,
#: and a few lines of nested aliases (the "billion laughs") would otherwise expand to millions.
MAX_EXPANDED_VALUES = 100_000


class ConfigLoader(yaml.SafeLoader):
    """YAML as a config means it, the same in a file and in ``--set``: integers in base 10
    (``010`` is 10, not YAML 1.1's octal 8), no base-60 numbers (``1:30`` stays text, so a
    number key refuses it), booleans only true/false (``no`` stays the language code), a
    key given twice in one mapping refused instead of the last one silently winning, and a
    document whose aliases expand to more than :data:`MAX_EXPANDED_VALUES` values refused."""

    def get_single_node(self) -> yaml.Node | None:
        node = super().get_single_node()
        if node is not None:
            n = _expanded_size(node, {})
            if n > MAX_EXPANDED_VALUES:
                raise yaml.composer.ComposerError(
                    None,
                    None,
                    f"its aliases expand to {n} values (more than "
                    f"{MAX_EXPANDED_VALUES}): not a configuration",
                    node.start_mark,
                )
        return node


def _expanded_size(node: yaml.Node, memo: dict[int, int]) -> int:
    """Values in ``node`` with every alias expanded, counted in time linear in the nodes written
    (each node's size once, by identity; an alias of an enclosing node counts once)."""
    key = id(node)
    if key in memo:
        return memo[key]
    memo[key] = 1
    if isinstance(node, yaml.SequenceNode):
        n = 1 + sum(_expanded_size(c, memo) for c in node.value)
    elif isinstance(node, yaml.MappingNode):
        n = 1 + sum(_expanded_size(k, memo) + _expanded_size(v, memo) for k, v in node.value)
    else:
        n = 1
    memo[key] = n
    return n


def _strict_scalars() -> None:
    import re

    kept = {"tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:bool"}
    ConfigLoader.yaml_implicit_resolvers = {
        ch: [r for r in rs if r[0] not in kept]
        for ch, rs in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    ConfigLoader.add_implicit_resolver(
        "tag:yaml.org,2002:bool",
        re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
        list("tTfF"),
    )
    ConfigLoader.add_implicit_resolver(
        "tag:yaml.org,2002:int", re.compile(r"^[-+]?[0-9][0-9_]*$"), list("-+0123456789")
    )
    ConfigLoader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(
            r"^(?:[-+]?(?:[0-9][0-9_]*)?\.[0-9_]*(?:[eE][-+]?[0-9]+)?"
            r"|[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
        ),
        list("-+0123456789."),
    )

    def base10(loader: yaml.SafeLoader, node: yaml.Node) -> int:
        return int(str(loader.construct_scalar(node)).replace("_", ""), 10)

    def no_duplicates(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[object, int] = {}
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"key {shown(key)} given twice (lines {seen[key]} and "
                    f"{key_node.start_mark.line + 1})",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line + 1
        return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)

    ConfigLoader.add_constructor("tag:yaml.org,2002:int", base10)
    ConfigLoader.construct_mapping = no_duplicates  # type: ignore[method-assign]


_strict_scalars()


def preset_path(name_or_path: str | os.PathLike) -> Path:
    """Resolve ``demo``/``paper`` to the shipped preset, anything else as a file path."""
    name = os.fspath(name_or_path)
    if name in PRESETS:
        return CONFIG_DIR / f"{name}.yaml"
    path = Path(name)
    if not path.is_file():
        raise ConfigFileNotFound(
            f"config file not found: {name} (a preset is one of {', '.join(PRESETS)})"
        )
    return path


def read_preset(name_or_path: str | os.PathLike, _chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The whole preset as a dict (``extends:`` resolved); a malformed YAML file is a
    ConfigError with its position."""
    path = preset_path(name_or_path)
    data = _read_yaml(path)
    base = data.pop(EXTENDS, None)
    if base is None:
        return data
    # `extends: demo` (or a path, relative to this file): that preset, with this file's keys
    # merged over it section by section, so a user's config holds only what differs.
    if not isinstance(base, str) or not base.strip():
        raise ConfigError(f"{path}: {EXTENDS} must name a preset or a YAML file, not {shown(base)}")
    chain = (*_chain, path.resolve())
    target = base if base in PRESETS or os.path.isabs(base) else str(path.parent / base)
    _check_chain(chain, preset_path(target).resolve(), path, base)
    return _merge(read_preset(target, _chain=chain), data)


#: The most files one ``extends:`` chain may hold: deeper is a generated mistake, and each level
#: is a recursion (a chain of some hundreds ended in a RecursionError traceback).
MAX_EXTENDS = 32


def _check_chain(chain: tuple[Path, ...], target: Path, path: Path, base: str) -> None:
    """Refuse an ``extends:`` that leads back into ``chain`` or makes it too long, naming it."""
    names = [p.name for p in (*chain, target)]
    shown_chain = " -> ".join(names if len(names) <= 6 else [*names[:3], "…", *names[-2:]])
    if target in chain:
        raise ConfigError(
            f"{path}: {EXTENDS} {shown(base)} leads back to itself ({clip(shown_chain)})"
        )
    if len(chain) >= MAX_EXTENDS:
        raise ConfigError(
            f"{path}: {EXTENDS} chain longer than {MAX_EXTENDS} files ({clip(shown_chain)})"
        )


def _read_yaml(path: Path) -> dict[str, Any]:
    """One config file's top-level mapping (``{}`` when empty)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.load(f, Loader=ConfigLoader)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {clip(str(e))}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read: {clip(str(e))}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    return data


EXTENDS = "extends"


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` merged into a copy of ``base``: mappings key by key, anything else replaced (a
    list is replaced whole, and null replaces a mapping)."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def load_section(name_or_path: str | os.PathLike, section: str) -> dict[str, Any]:
    """One section of a preset as a plain dict (empty when the section is absent)."""
    raw = read_preset(name_or_path).get(section)
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{name_or_path}: section {section!r} must be a mapping")
    return copy.deepcopy(raw)


def parse_override(item: str) -> tuple[list[str], Any]:
    """``a.b=value`` -> (["a", "b"], parsed value)."""
    if "=" not in item:
        raise ConfigError(f"override {shown(item)} is not key=value")
    key, raw = item.split("=", 1)
    parts = [p for p in key.strip().split(".")]
    if not all(parts):
        raise ConfigError(f"override {shown(item)}: empty key")
    return parts, _parse_value(raw)


def apply_overrides(cfg: Mapping[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Return a copy of ``cfg`` with ``a.b=value`` overrides applied (no type checking)."""
    out = copy.deepcopy(dict(cfg))
    for item in overrides:
        parts, value = parse_override(item)
        node = out
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {shown(item)}: {shown(p)} is not a section")
        node[parts[-1]] = value
    return out


def _parse_value(raw: str) -> Any:
    try:
        value = yaml.load(raw, Loader=ConfigLoader)
    except yaml.YAMLError:
        return raw
    if isinstance(value, str):
        # YAML 1.1 reads "1e-5" as a string; a config value like that is meant as a number.
        try:
            return float(value)
        except ValueError:
            return value
    return value
