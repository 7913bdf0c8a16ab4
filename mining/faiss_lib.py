"""The one import of FAISS: every module of the project that needs it imports it from here.

FAISS's loader logs, at INFO, each build it tries before the one it loads, among them
``Could not load library with AVX2 support due to: ModuleNotFoundError(...)``: six lines on
every command that mines, two of which read like a failure although nothing failed. Its
logger is set to WARNING before the import, so those lines go and real warnings stay.

    from mining.faiss_lib import faiss
"""

from __future__ import annotations

import logging

logging.getLogger("faiss.loader").setLevel(logging.WARNING)

import faiss  # noqa: E402 - after the loader's logger is quietened

__all__ = ["faiss"]
