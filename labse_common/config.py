"""One typed configuration loader for every stage.

A preset file (``configs/demo.yaml``, ``configs/paper.yaml``) has one top-level section per
stage (``corpus``, ``vocab``, ``model``, ``train``, ``mining``, ...). Each section is described by
one dataclass in ``labse_common/sections/<section>.py`` (exported there as ``CONFIG``), so the
sections are found by name and a new stage adds one small file, not an edit of a shared one.

:func:`load` reads a section, applies ``key=value`` overrides (dotted keys reach nested sections;
values are parsed as YAML) and then explicit CLI flags, and checks everything against the
dataclass: unknown keys, wrong types, NaN/inf and out-of-range values are a :class:`ConfigError`
that names the key. Constraints sit on the fields (:func:`option`), so the dataclass is also the
configuration reference.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import math
import os
import sys
import sysconfig
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

import yaml

from labse_common.errors import UsageError


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

T = TypeVar("T")


class ConfigError(UsageError, ValueError):
    """A bad preset, override or value; CLIs report it and exit with status 2."""


class ConfigFileNotFound(ConfigError, FileNotFoundError):
    """The ``--config`` file does not exist."""


def option(
    default: Any = dataclasses.MISSING,
    *,
    help: str = "",
    min: float | None = None,
    max: float | None = None,
    min_exclusive: bool = False,
    choices: Iterable[Any] | None = None,
    default_factory: Any = dataclasses.MISSING,
) -> Any:
    """A dataclass field with its documentation and range: ``lr: float = option(1e-3, min=0,
    min_exclusive=True, help="peak learning rate")``. ``min``/``max`` apply to numbers (and to
    each element of a list of numbers)."""
    meta = {
        "help": help,
        "min": min,
        "max": max,
        "min_exclusive": min_exclusive,
        "choices": tuple(choices) if choices is not None else None,
    }
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda d=default: copy.deepcopy(d), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


#: The most characters of a value an error message echoes: a value pasted by mistake (a whole
#: file, an alias-expanded YAML structure) must not make the one error line a megabyte.
SHOWN_CHARS = 200


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)`` for an error message, at most ``limit`` characters (an ellipsis marks the
    cut). Bounded in time too: nested and long containers are abbreviated before being joined."""
    import reprlib

    r = reprlib.Repr()
    r.maxlevel, r.maxlist, r.maxtuple, r.maxdict, r.maxset = 4, 12, 12, 12, 12
    r.maxstring = r.maxother = r.maxlong = limit
    text = r.repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _clip(text: str, limit: int = 4 * SHOWN_CHARS) -> str:
    """A library's message (YAML's, with its excerpt of the file) cut to ``limit`` characters."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- presets and overrides -------------------------------------------------------------------


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
            f"{path}: {EXTENDS} {shown(base)} leads back to itself ({_clip(shown_chain)})"
        )
    if len(chain) >= MAX_EXTENDS:
        raise ConfigError(
            f"{path}: {EXTENDS} chain longer than {MAX_EXTENDS} files ({_clip(shown_chain)})"
        )


def _read_yaml(path: Path) -> dict[str, Any]:
    """One config file's top-level mapping (``{}`` when empty)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.load(f, Loader=ConfigLoader)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {_clip(str(e))}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read: {_clip(str(e))}") from None
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


# --- the typed loader ------------------------------------------------------------------------


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


def from_dict(cls: type[T], data: Mapping[str, Any], prefix: str = "") -> T:
    """Build and validate dataclass ``cls`` from ``data``; errors name ``prefix.key``."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{prefix or cls.__name__}: expected a mapping, got {shown(data)}")
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(known), key=str)
    if unknown:
        where = f"{prefix}." if prefix else ""
        raise ConfigError(
            f"unknown config key(s) {', '.join(where + _clip(str(k), 60) for k in unknown)}; "
            f"known keys: {', '.join(sorted(known))}"
        )
    kwargs = {}
    for key, value in data.items():
        f = known[key]
        path = f"{prefix}.{key}" if prefix else key
        v = _coerce(value, hints[key], path)
        _check_range(v, f.metadata, path)
        kwargs[key] = v
    obj = cls(**kwargs)
    for key, f in known.items():
        if key not in kwargs:  # defaults are checked too: a preset cannot carry a bad default
            path = f"{prefix}.{key}" if prefix else key
            _check_range(getattr(obj, key), f.metadata, path)
    check = getattr(obj, "validate", None)
    if callable(check):
        try:
            check()
        except ConfigError:
            raise
        except ValueError as e:
            # A message naming its key in full (``launch.nnodes=0 ...``) is kept as it is.
            text = str(e)
            named = not prefix or text.startswith(f"{prefix}.")
            raise ConfigError(text if named else f"{prefix}: {text}") from None
    return obj


def to_dict(obj: Any) -> dict[str, Any]:
    """A config dataclass as plain data (for manifests, checkpoints and logs)."""
    return dataclasses.asdict(obj)


def _type_name(tp: Any) -> str:
    if tp is type(None):
        return "null"
    if get_origin(tp) is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, path: str) -> Any:
    """``value`` as the annotated type ``tp``, or a ConfigError naming ``path``. One step per
    kind of type, below: a union tries its members, scalars convert what a flag or YAML gives,
    containers coerce each element, a nested dataclass is built by :func:`from_dict`."""
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        return _coerce_union(value, tp, path)
    if value is None:
        raise ConfigError(f"{path} may not be null (expected {_type_name(tp)})")
    if origin is Literal:
        if value in get_args(tp):
            return value
        raise ConfigError(
            f"{path}={shown(value)} is not one of {', '.join(map(repr, get_args(tp)))}"
        )
    if tp is Any:
        return value
    if tp in _SCALARS:
        return _SCALARS[tp](value, path)
    if origin in (list, tuple) or tp in (list, tuple):
        return _coerce_list(value, tp, path)
    if origin is dict or tp is dict:
        return _coerce_dict(value, tp, path)
    if dataclasses.is_dataclass(tp):
        return value if isinstance(value, tp) else from_dict(tp, value, prefix=path)
    raise ConfigError(f"{path}: unsupported config type {tp!r}")


def _coerce_union(value: Any, tp: Any, path: str) -> Any:
    """The first member of the union that takes ``value`` (null only where the union has it)."""
    options = get_args(tp)
    if value is None and type(None) in options:
        return None
    if type(None) in options and isinstance(value, str) and not value.strip():
        # null is how a config says "none": an empty path read as none silently changed the
        # run (model.init: "" meant "no encoder" and switched full training on).
        raise ConfigError(f"{path}={shown(value)} is empty: give a value, or null for none")
    errors = []
    for opt in options:
        if opt is type(None):
            continue
        try:
            return _coerce(value, opt, path)
        except ConfigError as e:
            errors.append(e)
    if len(errors) == 1:  # X | None: X's own error names the key inside it
        raise errors[0]
    raise ConfigError(
        f"{path}={shown(value)} is not a valid {' or '.join(_type_name(o) for o in options)}"
    )


def _to_bool(value: Any, path: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
        return value.lower() in ("true", "yes", "1")
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise ConfigError(f"{path}={shown(value)} is not a boolean (true/false)")


def _to_int(value: Any, path: str) -> int:
    if isinstance(value, bool):  # an int subclass, but true is not a count
        raise ConfigError(f"{path}={shown(value)} is not an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.replace("_", ""))
        except ValueError:
            pass
    raise ConfigError(f"{path}={shown(value)} is not an integer")


def _to_float(value: Any, path: str) -> float:
    if isinstance(value, bool):
        raise ConfigError(f"{path}={shown(value)} is not a number")
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{path}={shown(value)} is not a number") from None
    if not math.isfinite(out):
        raise ConfigError(f"{path}={shown(value)} is not a finite number")
    return out


def _to_str(value: Any, path: str) -> str:
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return str(value)
    raise ConfigError(f"{path}={shown(value)} is not a string")


_SCALARS = {bool: _to_bool, int: _to_int, float: _to_float, str: _to_str}


def _coerce_list(value: Any, tp: Any, path: str) -> list[Any]:
    if isinstance(value, str):  # "de-en,fr-en" from a flag
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"{path}={shown(value)} is not a list")
    args = get_args(tp)
    item_tp = args[0] if args else Any
    return [_coerce(v, item_tp, f"{path}[{i}]") for i, v in enumerate(value)]


def _coerce_dict(value: Any, tp: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{path}={shown(value)} is not a mapping")
    args = get_args(tp)
    val_tp = args[1] if len(args) == 2 else Any
    return {str(k): _coerce(v, val_tp, f"{path}.{k}") for k, v in value.items()}


def _check_range(value: Any, meta: Mapping[str, Any], path: str) -> None:
    if value is None or not meta:
        return
    if isinstance(value, list):
        for i, v in enumerate(value):
            _check_range(v, meta, f"{path}[{i}]")
        return
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        raise ConfigError(f"{path}={shown(value)} is not one of {', '.join(map(repr, choices))}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        lo, hi = meta.get("min"), meta.get("max")
        if lo is not None:
            if meta.get("min_exclusive") and not value > lo:
                raise ConfigError(f"{path}={shown(value)} must be > {lo}")
            if value < lo:
                raise ConfigError(f"{path}={shown(value)} must be >= {lo}")
        if hi is not None and value > hi:
            raise ConfigError(f"{path}={shown(value)} must be <= {hi}")


# --- the configuration reference -------------------------------------------------------------


def section_names() -> list[str]:
    """Every section with a module in labse_common/sections/, sorted."""
    import pkgutil

    from labse_common import sections

    return sorted(m.name for m in pkgutil.iter_modules(sections.__path__) if not m.ispkg)


def _range_text(meta: Mapping[str, Any]) -> str:
    lo, hi = meta.get("min"), meta.get("max")
    if meta.get("choices") is not None:
        return "one of " + ", ".join(map(repr, meta["choices"]))
    if lo is not None and hi is not None:
        return f"{'(' if meta.get('min_exclusive') else '['}{lo}, {hi}]"
    if lo is not None:
        return f"{'>' if meta.get('min_exclusive') else '>='} {lo}"
    if hi is not None:
        return f"<= {hi}"
    return ""


def _rows(cls: type, prefix: str = "") -> list[tuple[str, str, str, str, str]]:
    hints = typing.get_type_hints(cls)
    rows = []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(tp):
            rows += _rows(tp, key + ".")
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = "(required)"
        tname = str(tp).replace("typing.", "") if get_origin(tp) else _type_name(tp)
        shown = yaml.safe_dump(default, default_flow_style=True, width=10**6).strip()
        shown = shown.removesuffix("...").strip()
        rows.append((key, tname, f"`{shown}`", _range_text(f.metadata), f.metadata.get("help", "")))
    return rows


def reference(sections: Iterable[str] | None = None) -> str:
    """Markdown tables of every section's keys: type, default, allowed range, meaning."""
    out = [
        "# Configuration reference",
        "",
        "Generated by `python -m labse_common.config --reference` from "
        "`labse_common/sections/`. Presets: "
        + ", ".join(f"`configs/{p}.yaml`" for p in PRESETS)
        + ". Override a key with `--set KEY=VALUE` (nested: `a.b=VALUE`).",
    ]
    for name in sections or section_names():
        cls = section_class(name)
        out += ["", f"## `{name}`", ""]
        doc = (sys.modules[cls.__module__].__doc__ or "").strip().splitlines()
        if doc:
            out += [doc[0], ""]
        out += ["| key | type | default | range | meaning |", "|---|---|---|---|---|"]
        for row in _rows(cls):
            out.append("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(
        prog="python -m labse_common.config",
        description="Print the configuration reference, or check a preset/file.",
    )
    ap.add_argument(
        "--reference",
        action="store_true",
        help="print every section's keys, types, defaults, ranges and help (Markdown)",
    )
    ap.add_argument(
        "--check",
        metavar="PRESET|FILE",
        help="load every section of this preset or file with the typed loader",
    )
    from labse_common.command import add_log_level_option, run_main
    from labse_common.logs import setup_logging

    add_log_level_option(ap)
    args = ap.parse_args(argv)
    setup_logging(args.log_level)

    def body() -> int:
        if args.check:
            data = read_preset(args.check)
            if not data:
                raise ConfigError(f"{args.check}: empty, no section to check")
            unknown = sorted(set(data) - set(section_names()))
            if unknown:
                raise ConfigError(f"{args.check}: unknown section(s) {', '.join(unknown)}")
            for name in data:
                load(name, args.check)
            print(f"{args.check}: {len(data)} section(s) valid")
            return 0
        sys.stdout.write(reference())
        return 0

    # The one error mapping: a bad preset or file is one line naming it, exit status 2.
    return run_main(body, "labse_common.config")


if __name__ == "__main__":
    from labse_common.command import exit_with

    exit_with(main)
