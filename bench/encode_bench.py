"""Encoding throughput on CPU: our ``Encoder.encode`` against sentence-transformers' ``encode``.

Both run on the same randomly initialised checkpoint (written in the LaBSE layout, so
``SentenceTransformer(path)`` loads it) and the same sentences (Tatoeba, every language, both
sides). Runs alternate and the best of ``--repeats`` is kept, because this machine is shared.
Prints sentences/s for each, the ratio (goal >= 1.5x) and the largest embedding difference;
then the same for our encoder with ``quantize="int8"`` (int8 Linear layers), with the smallest
per-sentence cosine between its vectors and the float32 ones.

    .venv/bin/python bench/encode_bench.py [--sentences 4000] [--hidden 256 --layers 4]
"""

from __future__ import annotations

import argparse
import glob
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from labse_common.logs import setup_logging  # noqa: E402
from labse_model.encode import Encoder  # noqa: E402
from labse_model.model import build_config, new_encoder, save_encoder  # noqa: E402
from labse_model.tiny import train_wordpiece  # noqa: E402

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tatoeba"
log = logging.getLogger("encode_bench")


def load_sentences(n: int) -> list[str]:
    files = sorted(glob.glob(str(DATA / "train.*-eng.*")))
    if not files:
        sys.exit(f"Tatoeba data not found under {DATA}")
    sents = [line for f in files for line in Path(f).read_text(encoding="utf-8").splitlines()]
    rng = np.random.default_rng(0)
    return [sents[i] for i in rng.permutation(len(sents))[:n]]


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--sentences", type=int, default=4000, help="number of sentences (default 4000)"
    )
    ap.add_argument("--hidden", type=int, default=256, help="hidden size (768 = LaBSE)")
    ap.add_argument("--layers", type=int, default=4, help="transformer layers (12 = LaBSE)")
    ap.add_argument("--batch-size", type=int, default=64, help="batch size for both (default 64)")
    ap.add_argument(
        "--repeats", type=int, default=3, help="alternating runs; best kept (default 3)"
    )
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    ap.add_argument("--max-seq-length", type=int, default=128)
    args = ap.parse_args()
    setup_logging("WARNING")
    torch.set_num_threads(args.threads)
    from sentence_transformers import SentenceTransformer

    sents = load_sentences(args.sentences)
    with tempfile.TemporaryDirectory() as tmp:
        tok = train_wordpiece(sents, os.path.join(tmp, "vocab"), vocab_size=8000)
        cfg = build_config(
            len(tok),
            tok.pad_token_id,
            hidden_size=args.hidden,
            num_hidden_layers=args.layers,
            num_attention_heads=max(1, args.hidden // 64),
            intermediate_size=4 * args.hidden,
            max_position_embeddings=512,
        )
        path = os.path.join(tmp, "model")
        save_encoder(new_encoder(cfg, seed=0), tok, path, max_seq_length=args.max_seq_length)
        ours = Encoder.from_pretrained(path, device="cpu", max_seq_length=args.max_seq_length)
        int8 = Encoder.from_pretrained(
            path, device="cpu", max_seq_length=args.max_seq_length, quantize="int8"
        )
        st = SentenceTransformer(path, device="cpu")
        st.max_seq_length = args.max_seq_length
        # Warm-up all three (allocator, lazy init) on a few sentences.
        ours.encode(sents[:64], batch_size=args.batch_size)
        int8.encode(sents[:64], batch_size=args.batch_size)
        st.encode(sents[:64], batch_size=args.batch_size)
        best = {"ours": float("inf"), "int8": float("inf"), "st": float("inf")}
        for _ in range(args.repeats):
            t = time.perf_counter()
            a = ours.encode(sents, batch_size=args.batch_size)
            best["ours"] = min(best["ours"], time.perf_counter() - t)
            t = time.perf_counter()
            q = int8.encode(sents, batch_size=args.batch_size)
            best["int8"] = min(best["int8"], time.perf_counter() - t)
            t = time.perf_counter()
            b = st.encode(sents, batch_size=args.batch_size, convert_to_numpy=True)
            best["st"] = min(best["st"], time.perf_counter() - t)
    n = len(sents)
    print(
        f"model: hidden {args.hidden}, {args.layers} layers; {n} Tatoeba sentences; batch {args.batch_size}; {args.threads} thread(s)"
    )
    print(f"{'encoder':<34}{'sentences/s':>12}")
    print(f"{'labse_model Encoder.encode':<34}{n / best['ours']:>12.1f}")
    print(f"{'labse_model Encoder.encode int8':<34}{n / best['int8']:>12.1f}")
    print(f"{'sentence-transformers encode':<34}{n / best['st']:>12.1f}")
    print(f"ratio ours / sentence-transformers: {best['st'] / best['ours']:.2f}x   (goal >= 1.5x)")
    print(f"max |difference| of embeddings: {np.abs(a - b).max():.2e}")
    print(f"ratio ours int8 / sentence-transformers: {best['st'] / best['int8']:.2f}x")
    print(f"ratio ours int8 / ours float32: {best['ours'] / best['int8']:.2f}x")
    print(f"smallest cosine int8 vs float32 vector: {(a * q).sum(axis=1).min():.4f}")


if __name__ == "__main__":
    main()
