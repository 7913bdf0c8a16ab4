"""Typed config values: a section's dataclass built from plain data, every value checked.

:func:`from_dict` coerces each value to its field's annotated type and checks the range the
field declares with :func:`option` (``min``/``max``, ``choices``, or ``names``: a
:class:`labse_common.registry.Registry` of the names the field accepts). A wrong value is a
:class:`ConfigError` naming the key, one line.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

from labse_common.errors import UsageError

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
    names: Any = None,
    default_factory: Any = dataclasses.MISSING,
) -> Any:
    """A dataclass field with its documentation and range: ``lr: float = option(1e-3, min=0,
    min_exclusive=True, help="peak learning rate")``. ``min``/``max`` apply to numbers (and to
    each element of a list of numbers). ``names``: a :class:`labse_common.registry.Registry`;
    the value (each element of a list) must be one of its names, read when the config loads."""
    meta = {
        "help": help,
        "min": min,
        "max": max,
        "min_exclusive": min_exclusive,
        "choices": tuple(choices) if choices is not None else None,
        "names": names,
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


def clip(text: str, limit: int = 4 * SHOWN_CHARS) -> str:
    """A library's message (YAML's, with its excerpt of the file) cut to ``limit`` characters."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


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
            f"unknown config key(s) {', '.join(where + clip(str(k), 60) for k in unknown)}; "
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


def type_name(tp: Any) -> str:
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
        raise ConfigError(f"{path} may not be null (expected {type_name(tp)})")
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
        f"{path}={shown(value)} is not a valid {' or '.join(type_name(o) for o in options)}"
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
    names = meta.get("names")
    if names is not None:  # the registry says which names, a whole list in one error
        names.check(value, path)
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
