"""One registry per kind of named thing a config names (pair rules, margins, retrieval modes,
index kinds, combine features): each name is declared once, beside its code, and the config
checks against it.

Where the entries come from. ``labse_common`` is the bottom floor and imports no upper package
(tests/architecture), yet a section must refuse an unknown name when the config is loaded, before
any stage runs, and ``--reference`` must list the names. So a section holds an empty
:class:`Registry` that names, as a dotted string, the module holding its entries (``home``); the
first lookup imports that module, whose decorators fill the registry. This is the plugin /
entry-point pattern: the bottom floor holds the mechanism and an address, the floor above the
entries and their code. Rejected: the names listed in the section as well (two lists kept equal
by a test: what this replaces); a registry filled only when something else happened to import
the upper package (the check would depend on import order); packaging entry points (the names
would sit in pyproject, away from the code, and need an installed distribution).

Once its names have been read, a registry is sealed: a later registration (a second definition
of a name, or a module reading its own registry before its last entry) is a
:class:`RegistryError` at import, never a name silently missing.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from labse_common.config_values import ConfigError, shown

E = TypeVar("E")


class RegistryError(RuntimeError):
    """A programming error in the registrations (a name twice, an entry after the lookup)."""


class Registry(Generic[E]):
    """Names of one ``kind`` -> entries, filled by the module ``home`` when it is imported.

    Iterating, ``in`` and ``len`` see the names in registration order, so a registry is also an
    argparse ``choices``. ``closed=False``: the names are known ones but not the only valid
    values (a FAISS factory string is a valid ``mining.index``), so the config lists them but
    does not refuse other text.
    """

    def __init__(self, kind: str, home: str, *, closed: bool = True) -> None:
        self.kind = kind
        self.home = home
        self.closed = closed
        self._entries: dict[str, E] = {}
        self._loaded = False

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, home={self.home!r})"

    # --- registering (the home module, at import) -------------------------------------------

    def add(self, name: str, entry: E) -> E:
        """Register ``entry`` under ``name``; a name given twice, or after the names were read,
        is a RegistryError."""
        if not isinstance(name, str) or not name:
            raise RegistryError(f"{self.kind} name must be a non-empty string, not {name!r}")
        if self._loaded:
            raise RegistryError(
                f"{self.kind} {name!r} registered after the {self.kind} names were read "
                f"(register every entry before {self.home} reads them)"
            )
        if name in self._entries:
            raise RegistryError(f"{self.kind} {name!r} registered twice")
        self._entries[name] = entry
        return entry

    def register(self, name: str | None = None) -> Callable[[E], E]:
        """Decorator: ``@REG.register("ratio")`` on a function, or ``@REG.register()`` on a
        class whose ``name`` attribute is its name."""

        def decorate(entry: E) -> E:
            return self.add(name if name is not None else getattr(entry, "name", None), entry)

        return decorate

    # --- reading (the config, the library, the CLIs) ----------------------------------------

    def _load(self) -> dict[str, E]:
        if not self._loaded:
            importlib.import_module(self.home)
            self._loaded = True
        return self._entries

    def names(self) -> tuple[str, ...]:
        """Every name, in registration order."""
        return tuple(self._load())

    def items(self) -> list[tuple[str, E]]:
        return list(self._load().items())

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._load())

    def __contains__(self, name: object) -> bool:
        return name in self._load()

    def get(self, name: str, key: str | None = None) -> E:
        """The entry of ``name``; an unknown one is a ConfigError naming ``key`` (or the kind),
        the name and the known names."""
        entries = self._load()
        if name not in entries:
            self.check(name, key or self.kind)
        return entries[name]

    def check(self, value: Any, key: str) -> None:
        """Refuse a value (or each value of a list) that is no name here: one ConfigError
        naming ``key``, the bad names and the known ones. Nothing for an open registry."""
        if not self.closed:
            return
        known = ", ".join(self.names())
        if isinstance(value, (list, tuple)):
            unknown = [v for v in value if v not in self._entries]
            if unknown:
                raise ConfigError(
                    f"{key}: unknown {self.kind}(s) {', '.join(shown(v) for v in unknown)}; "
                    f"known: {known}"
                )
        elif value not in self._entries:
            raise ConfigError(f"{key}={shown(value)} is not one of the known {self.kind}s: {known}")
