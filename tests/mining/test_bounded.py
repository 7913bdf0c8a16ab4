"""Bounded-memory mining (mining.bounded) and its planner (mining.plan): the same pairs as the
in-memory path on exact search, sharded == one pass, peak RSS not growing with the input beyond
the index and the neighbour lists, and every planner choice a FAISS index that trains and
searches."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from labse_common.embedding_store import StoreWriter
from labse_common.embedding_store import unit_rows as normalized
from labse_common.sections.mining import MiningConfig
from mining import plan as planner
from mining.__main__ import main as mining_main
from mining.bounded import Layout, bounded_neighbours, mine_bounded
from mining.faiss_lib import faiss
from mining.mine import mine_vectors
from mining.vector_side import VectorSide
from tests.support.paths import REPO

pytestmark = pytest.mark.usefixtures("single_thread_faiss")


def planted(n_src: int, n_trg: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Clustered vectors; the first n_src/5 target rows are noisy copies of source rows."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((30, dim)).astype(np.float32) * 2
    x = (centres[rng.integers(0, 30, n_src)] + rng.standard_normal((n_src, dim))).astype(np.float32)
    y = (centres[rng.integers(0, 30, n_trg)] + rng.standard_normal((n_trg, dim))).astype(np.float32)
    n_par = n_src // 5
    y[:n_par] = x[:n_par] + 0.3 * rng.standard_normal((n_par, dim)).astype(np.float32)
    return x, y


def write_store(path: Path, vecs: np.ndarray, dtype: str = "float32", rows: int = 400) -> str:
    w = StoreWriter(path, vecs.shape[1], dtype, rows_per_shard=rows)
    w.add(vecs, [str(i) for i in range(len(vecs))])
    w.close()
    return str(path)


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> tuple[np.ndarray, np.ndarray, str, str]:
    tmp = tmp_path_factory.mktemp("bounded")
    x, y = planted(1500, 1700, 48, seed=3)
    return x, y, write_store(tmp / "x", x), write_store(tmp / "y", y)


def cfg(**kw) -> MiningConfig:
    return MiningConfig(progress=False, **kw)


@pytest.mark.parametrize("mode", ["max", "intersect"])
def test_exact_bounded_equals_in_memory(stores, mode: str) -> None:
    x, y, xs, ys = stores
    c = cfg(k=4, mode=mode)
    ref, ref_sc = mine_vectors(normalized(x), normalized(y), c)
    assert len(ref) > 250  # the planted pairs are found: the comparison is not of empty sets
    # Chunks and blocks far smaller than the sides (5 x 7 block pairs), 1 and 3 target shards.
    for layout in (
        Layout(chunk_rows=300, block_rows=250),
        Layout(shards=3, chunk_rows=300, block_rows=250),
    ):
        got = mine_bounded(xs, ys, c, layout)
        np.testing.assert_array_equal(got.pairs.src, ref.src)
        np.testing.assert_array_equal(got.pairs.trg, ref.trg)
        np.testing.assert_allclose(got.pairs.score, ref.score, rtol=1e-6)
        nb, rnb = got.scored.neighbours, ref_sc.neighbours
        np.testing.assert_array_equal(nb.fwd_inds, rnb.fwd_inds)
        np.testing.assert_array_equal(nb.bwd_inds, rnb.bwd_inds)


def test_float16_store_and_row_selection(stores, tmp_path) -> None:
    x, y, _, ys = stores
    xs16 = write_store(tmp_path / "x16", x, "float16", rows=333)
    rows = np.flatnonzero(np.arange(len(x)) % 3 != 1)  # e.g. a cleaned side's representatives
    c = cfg(k=3)
    x16 = normalized(x.astype(np.float16)[rows])
    ref, _ = mine_vectors(x16, normalized(y), c)
    got = mine_bounded(VectorSide(xs16, rows), ys, c, Layout(chunk_rows=256, block_rows=300))
    np.testing.assert_array_equal(got.pairs.src, ref.src)  # compact indices, as a Side's
    np.testing.assert_array_equal(got.pairs.trg, ref.trg)
    np.testing.assert_allclose(got.pairs.score, ref.score, rtol=1e-6)


def test_sharded_merge_equals_one_pass(stores) -> None:
    _, _, xs, ys = stores
    src, trg = VectorSide(xs), VectorSide(ys)
    # Exact, and IVF-Flat with one trained index: the shards' merged top-k is the single pass's.
    for c in (cfg(k=4), cfg(k=4, index="ivf_flat", nprobe=4, train_size=1500)):
        one, f1, _ = bounded_neighbours(src, trg, c, Layout(chunk_rows=500))
        many, f3, _ = bounded_neighbours(src, trg, c, Layout(shards=3, chunk_rows=500))
        assert f1 == f3
        for name in ("fwd_sims", "fwd_inds", "bwd_sims", "bwd_inds"):
            np.testing.assert_array_equal(getattr(many, name), getattr(one, name), err_msg=name)
        assert (one.fwd_inds >= 0).all() and (one.bwd_inds >= 0).all()


@pytest.mark.slow
def test_sharded_in_worker_processes(stores, tmp_path) -> None:
    _, _, xs, ys = stores
    src, trg = VectorSide(xs), VectorSide(ys)
    c = cfg(k=4, index="ivf_flat", nprobe=4, train_size=1500)
    one, _, _ = bounded_neighbours(src, trg, c, Layout(chunk_rows=500))
    work = tmp_path / "work"
    two, _, _ = bounded_neighbours(src, trg, c, Layout(shards=2, workers=2, workdir=str(work)))
    for name in ("fwd_sims", "fwd_inds", "bwd_sims", "bwd_inds"):
        np.testing.assert_array_equal(getattr(two, name), getattr(one, name), err_msg=name)
    assert [p.name for p in work.iterdir()] and not list(work.glob("*_sims.npy"))  # merged, freed


@pytest.mark.slow
def test_approximate_recall_against_exact(stores) -> None:
    x, y, xs, ys = stores
    _, sc = mine_vectors(normalized(x), normalized(y), cfg(k=4))
    got = mine_bounded(xs, ys, cfg(k=4, index="ivf_pq", nprobe=8, train_size=1700))
    assert got.factories["trg"].startswith("IVF") and "PQ" in got.factories["trg"]
    nb = got.scored.neighbours
    n_par = len(x) // 5
    exact = sc.neighbours.fwd_inds
    # 6 sub-quantizers of 4 bits are coarse: the exact re-score still puts most planted
    # translations first, and the in-memory path with the same index does no better.
    assert (nb.fwd_inds[:n_par, 0] == exact[:n_par, 0]).mean() > 0.85
    _, mem_sc = mine_vectors(
        normalized(x),
        normalized(y),
        cfg(k=4, index=got.factories["trg"], nprobe=8, train_size=1700),
    )
    ours = (nb.fwd_inds[:, 0] == exact[:, 0]).mean()
    theirs = (mem_sc.neighbours.fwd_inds[:, 0] == exact[:, 0]).mean()
    assert ours >= theirs - 0.03, (ours, theirs)
    found = (got.pairs.src == got.pairs.trg) & (got.pairs.src < n_par)
    assert found.sum() > 0.85 * n_par


CHILD = textwrap.dedent("""
    import sys, faiss
    faiss.omp_set_num_threads(1)
    from labse_common.sections.mining import MiningConfig
    from mining.bounded import Layout, mine_bounded
    c = MiningConfig(k=4, index=sys.argv[3], nprobe=1, train_size=8000, progress=False)
    r = mine_bounded(sys.argv[1], sys.argv[2], c, Layout(chunk_rows=2048, block_rows=2048,
                                                         merge_rows=256))
    assert len(r.pairs) > 0
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            print(int(line.split()[1]) * 1024)
""")


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc (Linux)")
def test_peak_rss_grows_less_than_the_index(tmp_path) -> None:
    dim, sizes, spec = 512, (8_000, 30_000), "IVF256,PQ32x4np"
    peaks = []
    for n in sizes:
        x, y = planted(n, n, dim, seed=n)
        xs, ys = (
            write_store(tmp_path / f"x{n}", x, rows=20_000),
            write_store(tmp_path / f"y{n}", y, rows=20_000),
        )
        del x, y
        out = subprocess.run(
            [sys.executable, "-c", CHILD, xs, ys, spec],
            cwd=REPO,
            check=True,
            capture_output=True,
            text=True,
            timeout=300,
        )
        peaks.append(int(out.stdout.split()[-1]))
    growth = peaks[1] - peaks[0]
    dn = sizes[1] - sizes[0]
    matrices = 2 * dn * dim * 4  # what holding both float32 matrices would add
    index = dn * (16 + 8)  # PQ32x4 codes (16 B) + int64 ids, one side at a time
    lists = 2 * dn * 4 * (4 + 8) * 4  # merged lists + scores + retrieval temporaries
    assert growth < index + lists + 24 * 2**20, (peaks, growth)
    assert growth < matrices / 3, (peaks, growth, matrices)


def test_planner_choices_are_faiss_indexes() -> None:
    kinds = set()
    for n in (10_000, 300_000, 3_000_000, 10_000_000, 100_000_000, 1_000_000_000):
        for mem in (2, 16, 64):
            for workers, gpu in ((1, False), (4, False), (16, True)):
                p = planner.make_plan(n, n // 2, 768, mem, workers, gpu)
                kinds.add(p.kind)
                for fs in (p.factory_trg, p.factory_src):
                    index = faiss.index_factory(768, fs, faiss.METRIC_INNER_PRODUCT)
                    assert index.d == 768
                assert p.shards >= workers and p.shards % workers == 0
                assert p.total_seconds > 0 and p.worker_peak_bytes > 0
    assert {"flat", "ivf_sq8", "ivf_pq"} <= kinds, kinds


@pytest.mark.slow
@pytest.mark.parametrize("kind", planner.KINDS)
def test_every_index_kind_trains_and_searches(kind: str) -> None:
    rng = np.random.default_rng(0)
    n, dim = 2000, 32
    xb = normalized(rng.standard_normal((n, dim)).astype(np.float32))
    p = planner.make_plan(n, n, dim, 1.0, kind=kind, train_size=n)
    assert p.kind == kind
    index = faiss.index_factory(dim, p.factory_trg, faiss.METRIC_INNER_PRODUCT)
    index.train(xb)
    index.add(xb)
    with contextlib.suppress(RuntimeError):
        faiss.ParameterSpace().set_index_parameter(index, "nprobe", max(1, p.nprobe))
    _, inds = index.search(xb[:50], 4)
    assert inds.shape == (50, 4) and (inds >= 0).all() and (inds < n).all()
    found = (inds == np.arange(50)[:, None]).any(axis=1).mean()  # each vector finds itself
    assert found > (0.6 if "PQ" in p.factory_trg else 0.95), found


def test_plan_command(capsys) -> None:
    argv = [
        "plan",
        "--n-src",
        "10000000",
        "--n-trg",
        "8000000",
        "--dim",
        "768",
        "--mem-gb",
        "4",
        "--workers",
        "2",
    ]
    assert mining_main([*argv, "--json", "--text-bytes", "0"]) == 0  # vectors only
    plan = json.loads(capsys.readouterr().out)
    assert plan["kind"] != "flat" and plan["shards"] % 2 == 0
    assert plan["worker_peak_bytes"] <= 4 * 2**30 and plan["fits"]
    # With the corpora `mining mine` holds (150 B of text per sentence by default), 18M
    # sentences need ~4.3 GB on the driver alone: the plan says it does not fit.
    assert mining_main([*argv, "--json"]) == 0
    with_text = json.loads(capsys.readouterr().out)
    assert with_text["memory"]["driver_corpora"] == 18_000_000 * 240 and not with_text["fits"]
    assert set(plan["seconds"]) >= {"train", "add", "search", "rerank", "margin_retrieval"}
    assert mining_main(argv) == 0
    text = capsys.readouterr().out
    assert "index" in text and plan["factory_trg"] in text and "predicted" in text
    assert mining_main(["plan", "--n-src", "0", "--n-trg", "5", "--mem-gb", "1"]) == 2


def test_resumed_run_reuses_finished_steps(stores, tmp_path) -> None:
    _, _, xs, ys = stores
    src, trg = VectorSide(xs), VectorSide(ys)
    c = cfg(k=4, index="ivf_flat", nprobe=4, train_size=1500)
    work = tmp_path / "work"
    layout = Layout(shards=2, workdir=str(work), resume=True)
    first, _, secs = bounded_neighbours(src, trg, c, layout)
    assert {"train_fwd", "train_bwd"} <= set(secs)
    assert sorted(p.name for p in work.glob("*_merged.npz")) == ["bwd_merged.npz", "fwd_merged.npz"]
    # A stop after the forward direction: its merged lists stay, the backward ones are redone.
    (work / "bwd_merged.npz").unlink()
    again, _, secs = bounded_neighbours(src, trg, c, layout)
    assert "train_fwd" not in secs and "search_bwd" in secs
    for name in ("fwd_sims", "fwd_inds", "bwd_sims", "bwd_inds"):
        np.testing.assert_array_equal(getattr(again, name), getattr(first, name), err_msg=name)


def test_planner_picks_fast_scan_pq_for_the_issue_size() -> None:
    # 10M x 10M x 768 on this 24 GB machine: IVF-Flat does not fit, SQ8 and 8-bit PQ are
    # predicted at ~22 h; 4-bit fast-scan PQ (compressed, scanned with SIMD) within 6 h.
    p = planner.make_plan(10_000_000, 10_000_000, 768, 20.0, cores=2)
    assert p.kind == "ivf_pqfs" and p.fits and p.total_seconds < 6 * 3600, planner.render(p)
    assert p.factory_trg.startswith("IVF") and p.factory_trg.endswith("x4fs")
    assert planner.make_plan(10_000_000, 10_000_000, 768, 20.0, gpu=True).kind != "ivf_pqfs"
    small = planner.make_plan(100_000, 100_000, 768, 2.0, cores=2, exact_hours=0.01)
    assert small.kind in ("ivf_flat", "ivf_sq8")  # fast enough: the most accurate that fits


def test_the_rescore_is_cheaper_when_the_stores_fit_in_memory() -> None:
    # 1M x 1M x 768 float16 stores are 2.9 GiB: cached with a 20 GB budget, not with 2 GB.
    args = dict(n_src=1_000_000, n_trg=1_000_000, dim=768, kind="ivf_pqfs", cores=2)
    big, small = planner.make_plan(mem_gb=20.0, **args), planner.make_plan(mem_gb=2.0, **args)
    assert planner.stores_cached(big) and not planner.stores_cached(small)
    c = planner.MEASURED
    ratio = big.seconds["rerank"] / small.seconds["rerank"]
    assert ratio == pytest.approx(c.gather_cached_s / c.gather_s)
    assert not planner.stores_cached(planner.make_plan(10_000_000, 10_000_000, 768, 20.0))


def test_the_plan_counts_the_corpora_the_mine_command_holds() -> None:
    # `mining mine` holds both corpora as Arrow columns on the driver: n * (text + 90) bytes.
    args = dict(n_src=3_000_000, n_trg=2_000_000, dim=768, mem_gb=20.0, kind="ivf_pqfs", cores=2)
    bare, texts = planner.make_plan(**args), planner.make_plan(**args, text_bytes=150)
    assert "driver_corpora" not in bare.memory
    assert texts.memory["driver_corpora"] == 5_000_000 * (150 + planner.CORPUS_ROW_BYTES)
    extra = texts.driver_peak_bytes - bare.driver_peak_bytes
    assert extra == texts.memory["driver_corpora"] + texts.memory["driver_output_slice"]
    assert texts.kind == bare.kind and texts.total_seconds == bare.total_seconds
