"""The ``beam:`` section: the Beam runner every Beam stage of ``python -m pipelines.run`` uses."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import functools
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from labse_common.config_values import ConfigError, option, shown

# Beam knows the Dask runner only by its full name; the short one is what users write.
SHORT_RUNNER_NAMES = {"DaskRunner": "apache_beam.runners.dask.dask_runner.DaskRunner"}


class BeamOptionError(ValueError):
    """A Beam option Beam would refuse or drop: ``option`` is its name (no dashes), ``problem``
    what is wrong with it, ``suggestion`` the known option it is closest to (or None)."""

    def __init__(
        self, option: str, problem: str, suggestion: str | None = None, unknown: bool = False
    ) -> None:
        super().__init__(f"--{option}: {problem}")
        self.option = option
        self.problem = problem
        self.suggestion = suggestion
        self.unknown = unknown  # no Beam options class defines it

    def hint(self, dashes: str = "") -> str:
        """``"; did you mean <dashes>NAME?"``, or nothing when no known option is close."""
        return f"; did you mean {dashes}{self.suggestion}?" if self.suggestion else ""


@contextlib.contextmanager
def _quiet_beam_import():
    """Beam's import logs a warning about BigQuery clients on the root logger; this project uses
    none, and a config error must stay one line."""

    def keep(record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("apitools not found")

    root = logging.getLogger()
    root.addFilter(keep)
    try:
        yield
    finally:
        root.removeFilter(keep)


def _option_classes() -> list[type]:
    """Every PipelineOptions subclass Beam defines (and any a loaded module added), once by name
    as Beam's own ``get_all_options`` takes them. Imported here, not at module level: a config
    that does not use Beam loads without it."""
    with _quiet_beam_import():
        from apache_beam.options.pipeline_options import PipelineOptions

        try:  # DaskOptions live beside the Dask runner; Beam imports dask there only if present
            import apache_beam.runners.dask.dask_runner  # noqa: F401
        except ImportError:
            pass
    found: dict[str, type] = {}
    todo = list(PipelineOptions.__subclasses__())
    while todo:
        cls = todo.pop()
        found.setdefault(str(cls), cls)
        todo += cls.__subclasses__()
    return list(found.values())


@functools.lru_cache(maxsize=1)
def _parser() -> argparse.ArgumentParser:
    """Beam's own argument parser with every option class's arguments, raising on an error
    instead of printing usage and exiting."""
    classes = _option_classes()  # first: it imports Beam quietly
    from apache_beam.options.pipeline_options import _BeamArgumentParser

    class Strict(_BeamArgumentParser):
        def error(self, message: str) -> None:  # type: ignore[override]
            raise argparse.ArgumentError(None, message)

    parser = Strict(allow_abbrev=False, add_help=False)
    for cls in classes:
        try:
            cls._add_argparse_args(parser)
        except argparse.ArgumentError:
            pass  # a class registering a name twice (a test's copy): the first one stands
    return parser


def _known_names(parser: argparse.ArgumentParser) -> list[str]:
    return sorted(s[2:] for s in parser._option_string_actions if s.startswith("--"))


def _unknown(arg: str, known: list[str]) -> BeamOptionError:
    name = arg.lstrip("-").split("=", 1)[0]
    if not arg.startswith("--"):
        return BeamOptionError(name, f"{shown(arg)} is not an option (--NAME=VALUE)")
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
    return BeamOptionError(name, "not a Beam pipeline option", close[0] if close else None, True)


def parse_beam_args(args: Sequence[str]) -> argparse.Namespace:
    """``args`` parsed as Beam parses pipeline options, with what Beam would only log or fail on
    later refused now (:class:`BeamOptionError`): an option no Beam options class defines (Beam
    drops it with a warning), a value of the wrong type or not among the choices, and
    ``direct_num_workers`` below 0 (an ``IndexError`` in the DirectRunner)."""
    parser = _parser()
    try:
        ns, rest = parser.parse_known_args(list(args))
    except argparse.ArgumentError as e:
        text = str(e)
        name = text.split(":", 1)[0].removeprefix("argument ").split("/")[0].lstrip("-")
        problem = text.split(": ", 1)[1] if ": " in text else text
        raise BeamOptionError(name, problem) from None
    if rest:
        raise _unknown(rest[0], _known_names(parser))
    workers = getattr(ns, "direct_num_workers", None)
    if isinstance(workers, int) and workers < 0:
        raise BeamOptionError(
            "direct_num_workers", f"{workers} must be >= 0 (0: one worker per core)"
        )
    return ns


def check_runner(name: str) -> None:
    """``name`` is a runner Beam can create (a short name it knows, or module.Class); else
    ValueError naming what is wrong."""
    with _quiet_beam_import():
        from apache_beam.runners.runner import create_runner

    try:
        create_runner(SHORT_RUNNER_NAMES.get(name, name))
    except (ValueError, ImportError, AttributeError) as e:
        raise ValueError(str(e).splitlines()[0] if str(e) else type(e).__name__) from None


@dataclass
class BeamConfig:
    runner: str | None = option(
        None,
        help="Beam runner of every Beam stage (FlinkRunner, DataflowRunner, DaskRunner, ...); "
        "null = the local runner (every core of this machine, no download)",
    )
    options: dict[str, Any] = option(
        {},
        help="pipeline options given to every Beam stage as --KEY=VALUE (true: a bare --KEY; a "
        "list: the option once per item), checked against Beam's options at load, e.g. "
        "{flink_master: host:8081, parallelism: 8} or {dask_client_address: 127.0.0.1:8786}",
    )

    def args(self) -> list[str]:
        """The options as Beam command-line arguments."""
        out = [f"--runner={self.runner}"] if self.runner else []
        for key, value in self.options.items():
            if value is True:
                out.append(f"--{key}")
            elif isinstance(value, list):  # an appending option (experiments): once per item
                out += [f"--{key}={_arg(v)}" for v in value]
            elif value is not False and value is not None:
                out.append(f"--{key}={_arg(value)}")
        return out

    def validate(self) -> None:
        """Checked here, not when a stage starts: a wrong option is one line at load (the dry
        run included), not a warning in a stage log or a traceback from the runner. Nothing
        set, nothing to check: Beam is not imported."""
        for key in self.options:
            if not key or key.startswith("-") or "=" in key or key != key.strip():
                raise ConfigError(f"beam.options: {shown(key)} is not an option name")
        try:
            if self.options:
                parse_beam_args(self.args()[1 if self.runner else 0 :])
        except BeamOptionError as e:
            raise ConfigError(f"beam.options.{e.option}: {e.problem}{e.hint()}") from None
        if self.runner:
            try:
                check_runner(self.runner)
            except ValueError as e:
                raise ConfigError(f"beam.runner={shown(self.runner)}: {e}") from None


def _arg(value: Any) -> str:
    """One option value as Beam reads it: a mapping as JSON (Beam's dict options parse JSON)."""
    return json.dumps(value) if isinstance(value, dict) else str(value)


CONFIG = BeamConfig
