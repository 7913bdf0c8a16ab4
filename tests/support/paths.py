"""Where the tests find the repository and the shared samples: one definition, so that a test
module's folder depth never decides which folder it reads."""

from __future__ import annotations

from pathlib import Path

# tests/support/paths.py -> tests/support -> tests -> the repository
REPO = Path(__file__).resolve().parents[2]
# The real samples (Tatoeba, a WET file, Wikipedia dumps) sit beside the repository, not in it.
SHARED_DATA = REPO.parent / "shared" / "data"
TATOEBA = SHARED_DATA / "tatoeba"
