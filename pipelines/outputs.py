"""Output folders of Beam jobs: exclusive, written under a temporary folder, committed at the end.

See ``labse_common/output_dir.py`` for the protocol (claim marker, ``_tmp-<job id>/``, commit).
"""

from __future__ import annotations

from labse_common.output_dir import OutputDir, OutputError
from pipelines.options import UsageError


def claim_output(output: str, overwrite: bool) -> OutputDir:
    """Claim ``output`` for this job; a busy or non-empty folder is a :class:`UsageError`."""
    try:
        return OutputDir(output, overwrite).claim()
    except OutputError as e:
        raise UsageError(str(e)) from e
