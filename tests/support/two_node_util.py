"""Shared by the two-node tests: synthetic translation pairs, an S3-compatible server holding
them, and one `python -m labse_model <stage> --nnodes 2` launcher per node on loopback."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.support.paths import REPO as ROOT
from tests.support.scaleout_util import env, s3_args, s3_available, s3_client, s3_server


def synthetic_pairs(n: int = 160) -> str:
    """Synthetic translation pairs: a fixed word mapping, so the task is learnable."""
    rng = np.random.default_rng(0)
    src_words = [f"wort{chr(97 + i % 26)}{i}" for i in range(60)]
    trg_words = [f"word{chr(122 - i % 26)}{i}" for i in range(60)]
    lines = []
    for _ in range(n):
        idx = rng.choice(60, size=int(rng.integers(3, 8)), replace=False)
        lines.append(
            " ".join(src_words[i] for i in idx) + "\t" + " ".join(trg_words[i] for i in idx) + "\n"
        )
    return "".join(lines)


def write_vocab(vocab: Path, vocab_size: int = 400) -> str:
    """One vocabulary for every run of a test: WordPiece learning breaks ties differently run
    to run."""
    if not (vocab / "tokenizer.json").exists():
        from labse_model.tiny import train_wordpiece

        texts = [t for line in synthetic_pairs().splitlines() for t in line.split("\t")]
        train_wordpiece(texts, str(vocab), vocab_size=vocab_size)
    return str(vocab)


@contextlib.contextmanager
def s3_objects(log_dir: Path, bucket: str, objects: dict[str, bytes]) -> Iterator[dict[str, str]]:
    """A moto S3 server holding ``objects`` in ``bucket``; yields the environment that points
    the labse_model CLIs at it (skips the test when moto/boto3 are missing)."""
    why = s3_available()
    if why:
        pytest.skip(why)
    with s3_server(log_dir) as endpoint:
        client = s3_client(endpoint)
        client.create_bucket(Bucket=bucket)
        for key, body in objects.items():
            client.put_object(Bucket=bucket, Key=key, Body=body)
        # One way for code outside Beam pipelines: Beam flags in LABSE_BEAM_OPTIONS.
        yield {"LABSE_BEAM_OPTIONS": " ".join(s3_args(endpoint)), "LABSE_DIST_TIMEOUT_S": "30"}


def start_node(
    cmd: list[str], rank: int, port: int, rdzv_id: str, extra_env: dict, log: Path
) -> subprocess.Popen:
    """One node of a two-node job: ``cmd`` plus the launcher flags, in its own session (so
    kill_group ends the launcher and its workers)."""
    cmd = [
        *cmd,
        "--nnodes",
        "2",
        "--node-rank",
        str(rank),
        "--nproc-per-node",
        "1",
        "--rdzv-endpoint",
        f"127.0.0.1:{port}",
        "--rdzv-backend",
        "c10d",
        "--rdzv-id",
        rdzv_id,
    ]
    with open(log, "ab") as f:
        return subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=env(**extra_env),
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def read_metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in open(out / "metrics.jsonl")]
