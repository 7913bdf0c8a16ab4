"""Multi-output ParDos and job ends that every Beam runner executes, the DaskRunner included.

Beam's DaskRunner (2.77) hands a multi-output ParDo's whole output, every tag mixed, to each
consumer of any one tag, and computes only the graph behind the last transform applied. So the
jobs (1) never use ``ParDo(...).with_outputs``: :func:`with_outputs` runs the DoFn once, wrapped
so that it emits ``(tag, value)`` pairs, and picks each tag with a plain ``FlatMap``; and
(2) end in :func:`join_sinks`, one last transform that depends on every sink, so every write is
computed. Both are standard transforms: the other runners execute them unchanged (the
DirectRunner fuses the extra steps; the cost is one small tuple per output element).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
from apache_beam.pvalue import TaggedOutput


class _Tagging(beam.DoFn):
    """Runs ``fn`` and emits each output as ``(tag, value)``, the main output under ``None``."""

    def __init__(self, fn: beam.DoFn) -> None:
        self.fn = fn

    def setup(self) -> None:
        self.fn.setup()

    def start_bundle(self) -> None:
        self.fn.start_bundle()

    @staticmethod
    def _tag(outputs: Iterable[Any] | None) -> Iterator[tuple[str | None, Any]]:
        for out in outputs or ():
            if isinstance(out, TaggedOutput):
                yield out.tag, out.value
            else:
                yield None, out

    def process(self, element: Any) -> Iterator[tuple[str | None, Any]]:
        yield from self._tag(self.fn.process(element))

    def finish_bundle(self):
        outs = self.fn.finish_bundle()
        for out in outs or ():
            # finish_bundle yields WindowedValues, bare or inside a TaggedOutput.
            tag = None
            if isinstance(out, TaggedOutput):
                tag, out = out.tag, out.value
            yield out.with_value((tag, out.value))

    def teardown(self) -> None:
        self.fn.teardown()


def _pick(kv: tuple[str | None, Any], tag: str | None) -> Iterator[Any]:
    if kv[0] == tag:
        yield kv[1]


class Outputs(dict):
    """Like ``DoOutputsTuple``: ``outs.main_name`` / ``outs[tag]``."""

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def with_outputs(pcoll, label: str, fn: beam.DoFn, *tags: str, main: str) -> Outputs:
    """``pcoll | label >> ParDo(fn).with_outputs(*tags, main=main)``, portable to every runner."""
    tagged = pcoll | label >> beam.ParDo(_Tagging(fn))
    outs = Outputs()
    outs[main] = tagged | f"{label}.{main}" >> beam.FlatMap(_pick, None)
    for tag in tags:
        outs[tag] = tagged | f"{label}.{tag}" >> beam.FlatMap(_pick, tag)
    return outs


def join_sinks(sinks: list, label: str = "Done"):
    """The job's last transform, depending on every sink (see the module docstring)."""
    return tuple(sinks) | f"{label}Inputs" >> beam.Flatten() | label >> beam.Filter(lambda _: False)
