"""One registry of index kinds (mining.indexes). Every name ``mining.index`` accepts
builds in every path that builds an index: bounded mining, in-memory kNN (evaluation), BUCC's
mining and margin scoring; a name that is none is one ConfigError in each."""

from __future__ import annotations

import numpy as np
import pytest

from labse_common.config import ConfigError
from labse_common.embedding_store import unit_rows
from labse_common.sections.mining import MiningConfig
from mining import indexes

# FAISS on one OpenMP thread (tests/mining/conftest.py): on the shared 2-core machine spin-waiting
# threads made the OPQ training of these 300 rows take ~11 s.
pytestmark = pytest.mark.usefixtures("single_thread_faiss")

N, DIM = 300, 8
#: Every form the config's ``index`` help names: kinds, auto, ivfNNN, a FAISS string (the
#: aliases are their kinds: test_one_sizing_rule_per_kind).
SPECS = (*indexes.KINDS, "auto", "ivf16", "IVF8,Flat", "FLAT")
#: The names that reached faiss.index_factory unchanged outside bounded mining before.
PLANNER_NAMES = ("auto", "ivf_pqfs", "ivf_sq8", "ivf16")


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = unit_rows(rng.standard_normal((N, DIM)).astype(np.float32))
    y = unit_rows(x + 0.05 * rng.standard_normal((N, DIM)).astype(np.float32))
    return x, y


def cfg(spec: str) -> MiningConfig:
    # mem_gb small enough that "auto" plans an approximate index for these sizes too.
    return MiningConfig(k=4, index=spec, nprobe=64, train_size=N, rerank=16, progress=False)


def _knn(x, y, c):
    from mining.knn import knn

    return knn(x, y, 4, c)[1][:, 0]


def _vectors(x, y, c):
    from mining.mine import mine_vectors

    pairs, _ = mine_vectors(x, y, c)
    return _by_source(pairs.src, pairs.trg)


def _by_source(src: np.ndarray, trg: np.ndarray) -> np.ndarray | None:
    """Each source's target, when every source has one (else None: nothing to compare)."""
    return trg[np.argsort(src)] if len(src) == N else None


def _bucc(x, y, c):
    from mining.bucc import mine_candidates

    ids = [str(i) for i in range(N)]
    got = mine_candidates((ids, [f"s{i}" for i in ids]), (ids, [f"t{i}" for i in ids]), x, y, c)
    return _by_source(np.array([int(s) for s, _ in got]), np.array([int(t) for _, t in got]))


def _margin_score(x, y, c):
    from filters.bitext.margin_score import score_vectors

    rows = np.arange(N)
    marg, _ = score_vectors(x, y, rows, rows, c)
    assert np.isfinite(marg).all()
    return rows


def _bounded(x, y, c):
    import tempfile
    from pathlib import Path

    from mining.bounded import Layout, mine_bounded

    with tempfile.TemporaryDirectory() as d:
        np.save(Path(d) / "x.npy", x)
        np.save(Path(d) / "y.npy", y)
        res = mine_bounded(Path(d) / "x.npy", Path(d) / "y.npy", c, Layout())
    return _by_source(res.pairs.src, res.pairs.trg)


PATHS = {
    "knn": _knn,
    "mine_vectors": _vectors,
    "bucc": _bucc,
    "margin_score": _margin_score,
    "bounded": _bounded,
}


def _check(name: str, spec: str, got: np.ndarray | None) -> None:
    if got is not None and name != "margin_score":
        assert (got == np.arange(N)).mean() > 0.7, (name, spec)  # PQ: 1 x 4-bit code


@pytest.mark.slow
@pytest.mark.parametrize("spec", SPECS)
def test_every_index_name_builds_in_both_builders(data, spec: str) -> None:
    """knn.build_index (evaluation, BUCC, margin scoring) and the bounded miner's."""
    x, y = data
    for name in ("knn", "bounded"):
        _check(name, spec, PATHS[name](x, y, cfg(spec)))


@pytest.mark.parametrize("spec", PLANNER_NAMES)
@pytest.mark.parametrize("name", ["mine_vectors", "bucc", "margin_score"])
def test_every_entry_point_takes_the_planner_names(data, name: str, spec: str) -> None:
    x, y = data
    _check(name, spec, PATHS[name](x, y, cfg(spec)))


@pytest.mark.parametrize("name", sorted(PATHS))
def test_a_wrong_index_name_is_one_config_error(data, name: str) -> None:
    x, y = data
    with pytest.raises(ConfigError, match="mining.index='IVF8,Bogus'"):
        PATHS[name](x, y, cfg("IVF8,Bogus"))


def test_one_sizing_rule_per_kind() -> None:
    from mining import plan

    for kind in indexes.KINDS:
        assert plan.factory_for(kind, 10**6, 768) == indexes.factory(kind, 10**6, 768)
    for alias, kind in indexes.ALIASES.items():
        assert indexes.factory(alias, 50_000, 64) == indexes.factory_for(kind, 50_000, 64)
    assert indexes.factory("ivf300", 10, 8) == "IVF300,Flat"
