"""Fixtures of the pipelines tests used by more than one module."""

from __future__ import annotations

import pytest


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
