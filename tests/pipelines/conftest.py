"""Fixtures of the pipelines tests used by more than one module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.cli_process import ForkedCommands


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    """A 1-layer, 32-wide checkpoint (labse_model.tiny) for the embedding jobs; its path."""
    pytest.importorskip("torch")
    try:
        from labse_model.tiny import make_tiny_checkpoint
    except ImportError as exc:
        pytest.skip(f"labse_model.tiny not available: {exc}")
    out = tmp_path_factory.mktemp("tiny")
    sents = [f"sentence number {i} about topic {i % 7}" for i in range(200)]
    return make_tiny_checkpoint(str(out / "m"), sentences=sents, hidden=32, layers=1)


# What each command imports before it reads its arguments.
PRELOAD = ("pipelines.run.cli", "filters.__main__", "filters.bitext.cli_export")


@pytest.fixture(scope="module")
def forked_commands(tmp_path_factory) -> Iterator[ForkedCommands]:
    """``forked_commands.run(module, *args, env=None, timeout=120)``: ``python -m module *args``
    in a process forked from a server that imported the command once (the way the stage runner
    starts its stages; tests/support/cli_process.py); a :class:`subprocess.CompletedProcess`
    with its exit status, stdout and stderr."""
    commands = ForkedCommands(tmp_path_factory.mktemp("forked-commands"), PRELOAD)
    yield commands
    commands.close()
