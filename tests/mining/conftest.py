"""Fixtures of the mining tests used by more than one module."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def single_thread_faiss():
    """FAISS on one OpenMP thread for the module; restored after."""
    from mining.faiss_lib import faiss

    # On a busy shared machine OpenMP spin-waiting makes tiny FAISS jobs ~10x slower.
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)
