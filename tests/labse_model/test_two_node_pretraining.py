"""Two-node pretraining on loopback: two `python -m labse_model pretrain --nnodes 2` launchers
(--node-rank 0/1, one c10d rendezvous endpoint, gloo) stream their sentences and pairs from an
S3-compatible server and give, step by step and across a progressive-stacking boundary, the
MLM and TLM losses of one process holding the global batches."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from tests.support.scaleout_util import free_port, kill_group
from tests.support.two_node_util import (
    read_metrics,
    s3_objects,
    start_node,
    synthetic_pairs,
    write_vocab,
)

pytestmark = pytest.mark.slow

STAGE_STEPS = [2, 2]  # one stacking boundary: 1 layer for steps 1-2, 2 layers for steps 3-4
PRETRAIN = [
    "--stage-steps",
    ",".join(map(str, STAGE_STEPS)),
    "mlm_batch_size=8",
    "tlm_batch_size=8",
    "lanes=4",
    "max_seq_length=32",
    "warmup_steps=1",
    "eval_every=0",
    "save_every=1000",
    "log_every=1",
    "threads=1",
    "progress=false",
    "tensorboard=false",
    "model.hidden_size=32",
    "model.intermediate_size=64",
    "model.num_hidden_layers=2",
    "model.num_attention_heads=2",
    "model.max_position_embeddings=64",
    # Dropout draws from per-rank generators; without it the losses must match exactly.
    "model.dropout=0.0",
]


@pytest.fixture(scope="module")
def s3_inputs(tmp_path_factory):
    with s3_objects(tmp_path_factory.mktemp("moto-logs"), "pre", _objects()) as extra_env:
        yield extra_env


def _objects() -> dict[str, bytes]:
    rows = [line.split("\t") for line in synthetic_pairs().splitlines()]
    return {
        "pairs/p.tsv": synthetic_pairs().encode(),
        # The corpus layout: <lang>/ folders of sentence shards, here under a prefix.
        "sentences/deu/part-0.txt": "".join(s + "\n" for s, _ in rows).encode(),
        "sentences/eng/part-0.txt": "".join(t + "\n" for _, t in rows).encode(),
    }


def _cmd(out: Path, root: str = "s3://pre") -> list[str]:
    vocab = write_vocab(out.parent / "vocab")
    return [
        sys.executable,
        "-m",
        "labse_model",
        "pretrain",
        "--config",
        "demo",
        "--sentences",
        f"{root}/sentences",
        "--pairs",
        f"{root}/pairs/p.tsv",
        "--vocab",
        vocab,
        "--output",
        str(out),
        *PRETRAIN,
    ]


@pytest.mark.usefixtures("one_torch_thread")
def test_two_node_pretraining_equals_one_process_across_a_stacking_boundary(s3_inputs, tmp_path):
    from labse_model.__main__ import main

    # The reference: one process holding the global batches, the same command called in this
    # process (an interpreter of its own spent more on imports than on its 4 steps), on a local
    # copy of the same objects (Beam's S3 options are process-wide; the nodes read the server's).
    local = tmp_path / "local"
    for key, body in _objects().items():
        (local / key).parent.mkdir(parents=True, exist_ok=True)
        (local / key).write_bytes(body)
    one = tmp_path / "one"
    assert main(_cmd(one, str(local))[3:]) == 0

    two, log = tmp_path / "two", tmp_path / "nodes.log"
    nodes = []
    try:
        port = free_port()
        nodes = [start_node(_cmd(two), rank, port, "pre", s3_inputs, log) for rank in (0, 1)]
        for n in nodes:
            assert n.wait(120) == 0, log.read_text()[-3000:]
    finally:
        for n in nodes:
            kill_group(n)
    text = log.read_text()
    assert "stacking: stage 1 with 2 layers" in text, text[-3000:]

    m1 = [m for m in read_metrics(one) if "mlm_loss" in m]
    m2 = [m for m in read_metrics(two) if "mlm_loss" in m]
    steps = list(range(1, sum(STAGE_STEPS) + 1))
    assert [m["step"] for m in m1] == steps and [m["step"] for m in m2] == steps
    assert [m["stage"] for m in m2] == [m["stage"] for m in m1] == [0, 0, 1, 1]
    for key in ("mlm_loss", "tlm_loss", "loss"):
        np.testing.assert_allclose(
            [m[key] for m in m2], [m[key] for m in m1], rtol=2e-4, err_msg=key
        )
    # Not a constant: the losses move, so equal lists say the two runs trained alike.
    assert len({round(m["mlm_loss"], 4) for m in m1}) > 1

    from safetensors.numpy import load_file

    w1, w2 = (load_file(str(d / "model" / "model.safetensors")) for d in (one, two))
    assert w1.keys() == w2.keys() and any(".layer.1." in k for k in w1)  # the stacked depth
    for k in w1:
        np.testing.assert_allclose(w2[k], w1[k], atol=2e-4, err_msg=k)
