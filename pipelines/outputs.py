"""Output folders of Beam jobs."""

from __future__ import annotations

from apache_beam.io.filesystems import FileSystems

from pipelines.options import UsageError


def prepare_output(output: str, overwrite: bool) -> None:
    existing = FileSystems.match([FileSystems.join(output, "**")])[0].metadata_list
    if existing and not overwrite:
        raise UsageError(f"output {output!r} is not empty; pass --overwrite to replace it")
    if existing:
        FileSystems.delete([m.path for m in existing])
