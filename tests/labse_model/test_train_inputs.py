"""The training input's hostile cases: a vocabulary directory without a vocabulary, a truncated
pairs.tsv.gz, reproducible runs without --vocab, truncation counts across a resume."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import numpy as np
import pytest

from labse_common.config import load
from labse_common.sections.train import TrainConfig
from labse_common.stats import check_balanced, read_report
from labse_model.__main__ import main
from labse_model.train import train
from tests.support.pretrain_fixtures import DATA

# The model: section as the commands load it; the keys not given keep the section's defaults.
MODEL = load(
    "model",
    None,
    flags={
        "hidden_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "max_position_embeddings": 64,
        "initializer_range": 0.1,
        "dropout": 0.0,
    },
)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def deu_pairs(tmp_path_factory) -> Path:
    if not DATA.is_dir():
        pytest.skip(f"Tatoeba data not found under {DATA}")
    src = (DATA / "train.deu-eng.deu").read_text(encoding="utf-8").splitlines()
    trg = (DATA / "train.deu-eng.eng").read_text(encoding="utf-8").splitlines()
    out = tmp_path_factory.mktemp("deu") / "pairs.tsv"
    out.write_text("".join(f"{s}\t{t}\n" for s, t in zip(src, trg, strict=True)), encoding="utf-8")
    return out


def _cfg(**kw) -> TrainConfig:
    flags = {
        "progress": False,
        "threads": 1,
        "tensorboard": False,
        "vocab_size": 2000,
        "batch_size": 16,
        "log_every": 1,
        "save_every": 1000,
        **kw,
    }
    return load("train", "demo", flags=flags)


def test_vocab_dir_without_vocabulary_is_exit_2(tmp_path, deu_pairs, caplog):
    empty = tmp_path / "vocab"
    empty.mkdir()
    (empty / "README").write_text("not a vocabulary", encoding="utf-8")
    for cmd in (
        ["train", "--pairs", str(deu_pairs)],
        ["pretrain", "--pairs", str(deu_pairs), "--stage-steps", "1,1"],
    ):
        caplog.clear()
        rc = main([*cmd, "--vocab", str(empty), "--output", str(tmp_path / cmd[0])])
        assert rc == 2, cmd
        assert "has no vocab.txt or tokenizer.json" in caplog.text
        assert not (tmp_path / cmd[0] / "checkpoints").exists()


def test_truncated_gzip_pairs_are_counted_not_a_traceback(tmp_path, deu_pairs, caplog):
    whole = gzip.compress(deu_pairs.read_bytes())
    cut = tmp_path / "pairs.tsv.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    out = tmp_path / "run"
    train(MODEL, _cfg(), [str(cut)], str(out), max_steps=2)
    report = read_report(str(out / "stats.json"))
    assert check_balanced(report) == []
    assert report["counts"]["files"]["events"] == {"truncated": 1}
    assert 100 < report["counts"]["pairs"]["out"] < 700  # what was readable is kept
    # Nothing readable: a clear one-line error, exit 2.
    dead = tmp_path / "dead.tsv.gz"
    dead.write_bytes(whole[:15])
    caplog.clear()
    assert (
        main(["train", "--pairs", str(dead), "--output", str(tmp_path / "r2"), "vocab_size=2000"])
        == 2
    )
    assert "no usable pairs" in caplog.text


def _losses(out: Path) -> list[float]:
    return [json.loads(x)["loss"] for x in open(out / "metrics.jsonl")]


@pytest.mark.slow
def test_runs_without_vocab_are_reproducible(tmp_path, deu_pairs):
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        train(MODEL, _cfg(learn_vocab=True), [str(deu_pairs)], str(out), max_steps=3)
    assert (a / "vocab" / "vocab.txt").read_text() == (b / "vocab" / "vocab.txt").read_text()
    assert _losses(a) == _losses(b)


@pytest.mark.slow
def test_truncation_counts_cover_the_whole_resumed_run(tmp_path, deu_pairs):
    from labse_model.train import learn_vocab_from

    vocab = tmp_path / "vocab"
    learn_vocab_from(
        iter(deu_pairs.read_text(encoding="utf-8").replace("\t", "\n").splitlines()),
        str(vocab),
        2000,
    )
    cfg = _cfg(max_seq_length=8, save_every=3)
    full, cut = tmp_path / "full", tmp_path / "cut"
    train(MODEL, cfg, [str(deu_pairs)], str(full), vocab=str(vocab), max_steps=6)
    train(MODEL, cfg, [str(deu_pairs)], str(cut), vocab=str(vocab), max_steps=6, stop_at_step=3)
    train(MODEL, cfg, [str(deu_pairs)], str(cut), vocab=str(vocab), max_steps=6)
    a, b = (read_report(str(d / "stats.json")) for d in (full, cut))
    n = a["counts"]["pairs"]["events"]["sentences_truncated"]
    assert n > 0 and b["counts"]["pairs"]["events"]["sentences_truncated"] == n
    np.testing.assert_allclose(_losses(cut), _losses(full), rtol=1e-6)
    assert os.path.exists(cut / "model" / "model.safetensors")
