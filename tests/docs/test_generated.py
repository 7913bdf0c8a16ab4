"""Every generated block of the docs holds what its command prints now (tests/docs/generated.py).

A block that differs fails with a diff naming the doc, the line and the command; ``make docs``
(``python -m tests.docs.generated``) rewrites them.
"""

from __future__ import annotations

import pytest

from tests.docs import generated

BLOCKS = generated.all_blocks()


def test_the_drifting_examples_are_generated():
    """The dry-run plan, the runner's help and the configuration reference are generated."""
    where = {(b.doc.name, b.command) for b in BLOCKS}
    assert any(d == "own-data.md" and "--dry-run" in c for d, c in where), where
    assert ("stages.md", "python -m pipelines.run --help") in where, where
    reference = [b for b in BLOCKS if b.doc.name == "config-reference.md"]
    assert len(reference) == 1 and reference[0].markdown, reference


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.name)
def test_every_generated_block_is_what_its_command_prints(block: generated.Block):
    diff = generated.diff(block)
    assert not diff, f"{block.name} differs; regenerate with `make docs`:\n{diff}"


def test_normalise_drops_this_machines_paths():
    here = f"{generated.ROOT}/docs/x.md and {generated.EXAMPLE}/models/LaBSE \n"
    assert generated.normalise(here) == "docs/x.md and /models/LaBSE\n"
