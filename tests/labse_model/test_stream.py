"""Streaming input: same global batches on 1 and 2 ranks (gloo), exact resume after kill -9,
memory independent of the number of shards, counted bad shards, language mixing."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from labse_model import checkpoint as ckpt
from labse_model import stream, stream_windows
from labse_model.lanes import Lane, mixing_probabilities
from tests.support.paths import REPO
from tests.support.pretrain_fixtures import DATA, write_tatoeba_inputs
from tests.support.two_node_util import run_forked_ranks

ENV = dict(os.environ, PYTHONPATH=str(REPO), LABSE_DIST_TIMEOUT_S="60")
TINY = [
    "model.hidden_size=32",
    "model.num_hidden_layers=2",
    "model.num_attention_heads=2",
    "model.intermediate_size=64",
    "model.max_position_embeddings=64",
    "model.dropout=0.1",
]


# Four of the Tatoeba languages (three scripts) are as good a test of batching, resuming and
# stacking as all sixteen, at a quarter of the scanning and of the vocabulary's learning.
LANGS = ("cmn", "deu", "ell", "fra")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, str]:
    if not DATA.is_dir():
        pytest.skip(f"Tatoeba data not found under {DATA}")
    subset = tmp_path_factory.mktemp("tatoeba-subset")
    for lang in LANGS:
        for split in ("train", "dev"):
            for side in (lang, "eng"):
                name = f"{split}.{lang}-eng.{side}"
                (subset / name).symlink_to(DATA / name)
    return write_tatoeba_inputs(tmp_path_factory.mktemp("tatoeba"), vocab_size=2000, data=subset)


def _rank(rank: int, args: list[str], out: str) -> None:
    """One forked rank (torchrun's environment set by run_forked_ranks): the worker."""
    import torch

    from tests.labse_model.stream_worker import first_batches

    torch.set_num_threads(1)
    os.environ["LABSE_DIST_TIMEOUT_S"] = "60"
    first_batches(*args, out)


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_one_and_two_ranks_see_the_same_global_batches(inputs, tmp_path):
    import torch

    from tests.labse_model.stream_worker import MICRO_BATCHES, first_batches

    args = [inputs["sentences"], inputs["pairs"], inputs["vocab"]]
    one, two, flat = tmp_path / "one", tmp_path / "two", tmp_path / "flat"
    for d in (one, two, flat):
        d.mkdir()
    # Two ranks in a gloo group, forked from this process (torch and the reader imported
    # already: two spawned ranks and a torchrun launcher spent ~30 s of CPU importing them);
    # one rank needs no process group and runs here.
    run_forked_ranks(_rank, (args, str(two)), nprocs=2, timeout=300)
    first_batches(*args, str(one))
    a = torch.load(one / "rank0.pt", weights_only=False)
    b0, b1 = (torch.load(two / f"rank{k}.pt", weights_only=False) for k in (0, 1))
    for key, rows in a["rows"].items():
        # The global batch is rank 0's lanes then rank 1's: the same rows, masks and all.
        assert b0["rows"][key] + b1["rows"][key] == rows, key
    assert len(a["rows"][(0, 0)]) == 8 and len(a["rows"][(0, 1)]) == 8
    # TLM rows are [CLS] a [SEP] b [SEP] with token types 0 then 1.
    ids, _labels, types = a["rows"][(0, 1)][0]
    assert types[0] == 0 and types[-1] == 1 and sorted(set(types)) == [0, 1]
    # Each rank scanned half the shards; the exchanged counts are the whole corpus.
    assert a["counts"] == b0["counts"] == b1["counts"]
    # Resuming from a later micro-batch (the cursors of batch 2) gives batches 3.. exactly.
    assert {**b0["cursors"]["mlm"], **b1["cursors"]["mlm"]} == a["cursors"]["mlm"]
    # Packing (the default) is a layout only: unpacked, the same sequences with the same masks,
    # in fewer rows.
    first_batches(*args, str(flat), pack=False)
    c = torch.load(flat / "rank0.pt", weights_only=False)
    assert c["rows"] == a["rows"]
    assert c["tlm_rows"] == MICRO_BATCHES * 8 and a["tlm_rows"] < c["tlm_rows"]


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_kill_9_then_rerun_gives_the_uninterrupted_losses(inputs, tmp_path, caplog):
    # The four-language subset: it has a truncated sentence read ahead at a checkpoint's
    # cursor, which the resumed run once counted twice (stats.json below).
    from labse_model.__main__ import main

    def argv(out: Path) -> list[str]:
        return [
            "pretrain",
            "--sentences",
            inputs["sentences"],
            "--pairs",
            inputs["pairs"],
            "--vocab",
            inputs["vocab"],
            "--output",
            str(out),
            "--stage-steps",
            "4,6",
            "mlm_batch_size=8",
            "tlm_batch_size=8",
            "max_seq_length=32",
            "save_every=2",
            "log_every=1",
            "eval_every=0",
            "progress=false",
            "threads=1",
            "tensorboard=false",
            "warmup_steps=2",
            *TINY,
        ]

    # The uninterrupted run and the rerun are the same command called in this process (a
    # process start costs more than the ten steps); the killed one is a process of its own.
    full = tmp_path / "full"
    assert main(argv(full)) == 0
    cut = tmp_path / "cut"
    proc = subprocess.Popen(
        [sys.executable, "-m", "labse_model", *argv(cut)],
        env=ENV,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None:
            if ckpt.list_checkpoints(str(cut / "checkpoints")):
                os.kill(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.02)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    assert not (cut / "model").exists()
    caplog.clear()
    with caplog.at_level("INFO"):
        assert main(argv(cut)) == 0
    assert "resuming from" in caplog.text
    curve = {
        k: [json.loads(x) for x in open(d / "metrics.jsonl")]
        for k, d in (("full", full), ("cut", cut))
    }
    assert [x["step"] for x in curve["cut"]] == list(range(1, 11))
    np.testing.assert_allclose(
        [x["loss"] for x in curve["cut"]], [x["loss"] for x in curve["full"]], rtol=1e-5
    )
    assert [x["stage"] for x in curve["cut"]] == [0] * 4 + [1] * 6  # stacked after step 4
    manifest = json.loads(
        open(cut / "checkpoints" / ckpt.step_dir_name(10) / "manifest.json").read()
    )
    assert manifest["stage"] == 1
    cfg = json.loads(open(cut / "model" / "config.json").read())
    assert cfg["num_hidden_layers"] == 2 and (cut / "model" / "mlm_head.safetensors").exists()
    a, b = (json.loads(open(d / "stats.json").read()) for d in (full, cut))
    assert a["counts"] == b["counts"]  # events of the whole run, not only after the resume


_RSS = r"""
import resource, sys
from labse_model import stream
from labse_model.lanes import Lane
from labse_model.distributed import DistInfo
res = stream.scan_distributed(stream.expand_inputs([sys.argv[1]]), stream.PAIRS, 1000, 0.0, 0, DistInfo())
lanes = [Lane(res, stream.PAIRS, j, 4, 0, 2).records(0) for j in range(4)]
for _ in range(100):
    for it in lanes:
        for _ in range(16):
            next(it)
print(res.total_rows(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


@pytest.mark.slow
def test_reader_memory_does_not_grow_with_the_number_of_shards(tmp_path):
    rss = {}
    for shards in (4, 80):
        d = tmp_path / f"s{shards}"
        d.mkdir()
        for k in range(shards):
            ids = np.arange(k * 2000, (k + 1) * 2000).astype(str)
            text = pc.binary_join_element_wise("sentence number ", ids, " " + "x" * 60, "")
            pq.write_table(
                pa.table({"src": text, "trg": text}),
                d / f"part-{k:04d}.parquet",
                row_group_size=1000,
            )
        r = subprocess.run(
            [sys.executable, "-c", _RSS, str(d / "*.parquet")],
            env=ENV,
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        )
        rows, kb = map(int, r.stdout.split())
        assert rows == shards * 2000
        rss[shards] = kb / 1024
    # 20x the corpus (160k pairs, ~24 MB of text) costs no more than a few MB of bookkeeping.
    assert rss[80] < rss[4] + 15, rss


def test_bad_shards_are_counted_and_languages_mixed(tmp_path):
    (tmp_path / "sents" / "de").mkdir(parents=True)
    (tmp_path / "sents" / "fr").mkdir()
    (tmp_path / "sents" / "xx").mkdir()  # a language with no sentences
    pq.write_table(
        pa.table({"text": [f"Satz {i}." for i in range(9000)]}),
        tmp_path / "sents" / "de" / "a.parquet",
    )
    pq.write_table(
        pa.table({"text": [f"Phrase {i}." for i in range(1000)] + ["  ", None]}),
        tmp_path / "sents" / "fr" / "a.parquet",
    )
    (tmp_path / "sents" / "fr" / "broken.parquet").write_bytes(b"PAR1 not really")
    with gzip.open(tmp_path / "sents" / "de" / "cut.txt.gz", "wt", encoding="utf-8") as f:
        f.writelines(f"Zeile {i}.\n" for i in range(5000))
    data = (tmp_path / "sents" / "de" / "cut.txt.gz").read_bytes()
    (tmp_path / "sents" / "de" / "cut.txt.gz").write_bytes(data[: len(data) // 2])
    groups = stream.expand_inputs([str(tmp_path / "sents")])
    assert sorted(groups) == ["de", "fr", "xx"]
    res = stream.scan(groups, stream.SENTENCES, block_rows=500)
    stream.finish_groups(res, sorted(groups), stream.SENTENCES)
    report = stream.count_dict(res.counts).to_report("pretrain")
    from labse_common.stats import check_balanced

    assert check_balanced(report) == []
    c = report["counts"]
    assert c["files"]["dropped"] == {"unreadable": 1} and c["files"]["events"] == {"truncated": 1}
    assert c["languages"]["dropped"] == {"empty": 1}
    assert c["sentences"]["dropped"] == {"empty": 2}
    assert (
        9000 + 1000 < c["sentences"]["out"] < 9000 + 1000 + 5000
    )  # the readable half of cut.txt.gz
    # Mixing p^0.3: French (~10% of the data) gets far more than 10% of the stream.
    lane = Lane(res, stream.SENTENCES, 0, 1, seed=0, alpha=0.3)
    it = lane.records(0)
    sample = [next(it) for _ in range(4000)]
    fr = sum(s.startswith("Phrase") for s in sample) / len(sample)
    q = mixing_probabilities(res.groups, 0.3)["fr"]
    assert 0.3 < q < 0.45 and abs(fr - q) < 0.03, (fr, q)
    # Position-addressable: starting at 1000 gives what the full stream gave from 1000.
    assert [next(lane.records(1000)) for _ in range(1)] == sample[1000:1001]
    it2 = lane.records(1000)
    assert [next(it2) for _ in range(500)] == sample[1000:1500]
    with pytest.raises(FileNotFoundError):
        stream.expand_inputs([str(tmp_path / "nothing-*.parquet")])


@pytest.mark.slow
def test_two_rank_pretraining_stacks_under_ddp(inputs, tmp_path):
    from tests.support.scaleout_util import kill_group
    from tests.support.two_node_util import fork_labse_model

    out, log = tmp_path / "ddp", tmp_path / "ddp.log"
    # The launcher forked from this process as `python -m` runs it (its import of torch was
    # paid here already); its two workers are torchrun's interpreters.
    proc = fork_labse_model(
        [
            "pretrain",
            "--sentences",
            inputs["sentences"],
            "--pairs",
            inputs["pairs"],
            "--vocab",
            inputs["vocab"],
            "--output",
            str(out),
            "--nproc-per-node",
            "2",
            "--stage-steps",
            "2,2",
            "mlm_batch_size=8",
            "tlm_batch_size=8",
            "max_seq_length=32",
            "eval_every=2",
            "log_every=1",
            "threads=1",
            "progress=false",
            "tensorboard=false",
            *TINY,
        ],
        ENV,
        log,
    )
    try:
        rc = proc.wait(300)
    finally:
        kill_group(proc)
    assert rc == 0, log.read_text()[-3000:]
    recs = [json.loads(x) for x in open(out / "metrics.jsonl")]
    assert [x["step"] for x in recs] == [0, 1, 2, 3, 4]
    assert [x["stage"] for x in recs] == [0, 0, 0, 1, 1]
    assert all(np.isfinite(x["loss"]) for x in recs[1:]) and "eval_mlm_loss" in recs[-1]
    assert json.loads((out / "model" / "config.json").read_text())["num_hidden_layers"] == 2


def test_a_large_parquet_row_group_is_cut_into_blocks_of_block_rows(tmp_path):
    """A corpus file written as one 100k-row group must not become one shuffle block: the
    window would hold shuffle_blocks whole row groups per lane and language (memory grew 1.9x
    from 10k to 1M sentences before)."""
    (tmp_path / "de").mkdir()
    texts = [f"Satz {i}." if i % 10 else ("" if i % 20 else None) for i in range(5000)]
    pq.write_table(
        pa.table({"text": pa.array(texts, pa.string())}),
        tmp_path / "de" / "a.parquet",
        row_group_size=3000,
    )
    res = stream.scan(stream.expand_inputs([str(tmp_path)]), stream.SENTENCES, block_rows=512)
    blocks = res.groups["de"]
    usable = [t for t in texts if t]
    assert [b.rows for b in blocks] == [512] * 5 + [2700 - 5 * 512] + [512] * 3 + [1800 - 3 * 512]
    assert max(b.rows for b in blocks) == 512 and sum(b.rows for b in blocks) == len(usable)
    got = [r for b in blocks for r in stream.read_block(b, stream.SENTENCES, 0.0)]
    assert got == usable  # every usable row once, in file order


def test_a_damaged_row_group_costs_its_rows_only(tmp_path, damaged_parquet):
    """The middle of three row groups damaged: its 1,000 sentences are counted dropped
    (``damaged_row_group``), the other two groups become blocks and are trained on; a file
    whose every group is damaged is one unreadable file."""
    from labse_common.stats import check_balanced

    (tmp_path / "de").mkdir()
    texts = [f"Satz {i}." for i in range(3000)]
    damaged_parquet(tmp_path / "de" / "a.parquet", pa.table({"text": texts}))
    whole = tmp_path / "de" / "b.parquet"
    pq.write_table(
        pa.table({"text": ["x"] * 10}), whole, compression="snappy", use_dictionary=False
    )
    col = pq.ParquetFile(whole).metadata.row_group(0).column(0)
    data = bytearray(whole.read_bytes())
    for i in range(col.data_page_offset + 4, col.data_page_offset + col.total_compressed_size):
        data[i] ^= 0x5A
    whole.write_bytes(bytes(data))

    res = stream.scan(stream.expand_inputs([str(tmp_path)]), stream.SENTENCES, block_rows=400)
    report = stream.count_dict(res.counts).to_report("pretrain")
    assert check_balanced(report) == []
    c = report["counts"]
    assert c["files"] == {
        "in": 2,
        "out": 1,
        "dropped": {"unreadable": 1},
        "events": {"damaged_row_groups": 1},
    }
    assert c["sentences"] == {"in": 3000, "out": 2000, "dropped": {"damaged_row_group": 1000}}
    blocks = res.groups["de"]
    assert {b.part for b in blocks} == {0, 2}
    got = [r for b in blocks for r in stream.read_block(b, stream.SENTENCES, 0.0)]
    assert got == texts[:1000] + texts[2000:]


def _window_corpus(root: Path, blocks_per_language: int, block_rows: int) -> dict[str, list[str]]:
    words = {"de": "Straße über Bäume", "el": "καλημέρα κόσμε", "ja": "今日は良い天気です"}
    for lang, w in words.items():
        (root / lang).mkdir(parents=True)
        n = blocks_per_language * block_rows
        text = [f"{w} {i} {'x' * (i % 40)}" for i in range(n)]
        pq.write_table(pa.table({"text": text}), root / lang / "a.parquet", row_group_size=5000)
    return stream.expand_inputs([str(root)])


def test_the_window_bound_is_what_the_lanes_hold_and_stops_growing(tmp_path):
    """The shuffle windows are the stream's one large structure: ``window_bound`` predicts what
    they hold (records, and bytes from the scan's sampled record size) and it stops growing once
    each language has lanes x shuffle_blocks blocks, whatever the corpus size."""
    import tracemalloc

    lanes, on_rank, sb, rows = 4, 2, 2, 1000
    bounds, held = {}, {}
    next(
        Lane(
            stream.scan(_window_corpus(tmp_path / "warm", 1, 10), stream.SENTENCES),
            stream.SENTENCES,
            0,
            1,
            0,
        ).records(0)
    )  # lazy imports, outside the tracing
    for blocks in (1, 12, 36):
        res = stream.scan(
            _window_corpus(tmp_path / f"b{blocks}", blocks, rows), stream.SENTENCES, block_rows=rows
        )
        bounds[blocks] = stream_windows.window_bound(res, lanes, on_rank, sb)
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        its = [Lane(res, stream.SENTENCES, j, lanes, 0, sb).records(0) for j in range(on_rank)]
        for it in its:  # every (lane, language) window loaded, none finished
            for _ in range(600):
                next(it)
        held[blocks] = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        del its
    assert bounds[1].records == on_rank * 3 * rows  # one block per language: each lane's only one
    assert bounds[12].records == bounds[36].records == on_rank * 3 * sb * rows
    assert 60 < bounds[12].bytes / bounds[12].records < 200  # str of ~30 characters, non-ASCII
    # The prediction is what the windows hold (plus the lanes' language draws, 32 KiB each)...
    assert 0.9 < held[36] / bounds[36].bytes < 1.2, (held, bounds)
    # ...and 3x the corpus holds no more.
    assert held[36] < 1.1 * held[12], held


def test_windows_larger_than_a_share_of_the_machine_are_warned_about(caplog):
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    small = {"sentences": stream_windows.WindowBound(1000, 100_000, 4)}
    # the paper preset's 100k-row blocks
    huge = {"sentences": stream_windows.WindowBound(10**9, ram, 4)}
    with caplog.at_level("INFO", logger="labse_model.stream_windows"):
        assert stream_windows.log_window_bounds(small, 4, 512)["bytes"] == 100_000
        assert not [r for r in caplog.records if r.levelname == "WARNING"]
        stream_windows.log_window_bounds(huge, 4, 100_000)
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1 and "lower block_rows" in warned[0], warned
