"""CDS scoring throughput at the demo model size, per CPU core.

Ours: ``CdsScorer.score_all`` (length-bucketed batches, two forward passes per pair: θ_noisy and
θ_clean; four with ``--bidirectional``) on Tatoeba pairs, one torch thread. The model is the
demo preset's BART with a 4000-piece WordPiece learned from the same Tatoeba sentences; its
weights are the random initialisation (speed does not depend on what the weights learned).

Same-run peer: the same two models scored the straightforward way, one pair at a time with
``model(..., labels=...).loss`` (what a per-pair scoring loop does). The ratio ours/peer is the
same-run result.

Published figures (NOT same run, NOT the same machine or model): bicleaner-ai's README gives
about 600 pairs/s on one CPU core for its lite model, about 1.8 pairs/s on CPU and about 200
pairs/s on a V100 GPU for its full model. They are printed as ratios for orientation only.

    .venv/bin/python bench/cds_bench.py [--pairs 2000] [--peer-pairs 200] [--bidirectional]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from filters.bitext.cds.model import new_model  # noqa: E402
from filters.bitext.cds.score import CdsScorer  # noqa: E402
from filters.bitext.cliutil import quiet_transformers  # noqa: E402
from labse_common.config import load  # noqa: E402
from labse_model.tiny import train_wordpiece  # noqa: E402

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tatoeba"
PUBLISHED = {  # bicleaner-ai README figures, pairs per second
    "bicleaner-ai lite, 1 CPU core": 600.0,
    "bicleaner-ai full, CPU": 1.8,
    "bicleaner-ai full, V100 GPU": 200.0,
}


def load_pairs(n: int) -> tuple[list[str], list[str]]:
    src, trg = [], []
    for f in sorted(glob.glob(str(DATA / "train.*-eng.eng"))):
        base = f[: -len(".eng")]  # .../train.deu-eng
        lang = base.rsplit(".", 1)[1].split("-")[0]
        src += Path(f"{base}.{lang}").read_text(encoding="utf-8").splitlines()
        trg += Path(f).read_text(encoding="utf-8").splitlines()
    if not src:
        sys.exit(f"Tatoeba data not found under {DATA}")
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(src))[:n]
    return [src[i] for i in idx], [trg[i] for i in idx]


def timed(fn) -> tuple[float, float]:
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def naive_scores(scorer: CdsScorer, src: list[str], trg: list[str]) -> list[float]:
    """Per-pair loop: tokenise, two forward passes with labels, mean loss difference."""
    tok = scorer.tokenizer
    noisy, clean = scorer.fwd
    start = clean.config.decoder_start_token_id
    out = []
    with torch.inference_mode():
        for s, t in zip(src, trg):
            ids = tok(s, return_tensors="pt", truncation=True, max_length=scorer.max_length)[
                "input_ids"
            ]
            lab = tok(
                text_target=t, return_tensors="pt", truncation=True, max_length=scorer.max_length
            )["input_ids"]
            if lab[0, 0] == start:
                lab = lab[:, 1:]
            ids, lab = ids.to(scorer.device), lab.to(scorer.device)
            out.append(
                float(noisy(input_ids=ids, labels=lab).loss - clean(input_ids=ids, labels=lab).loss)
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--pairs", type=int, default=2000, help="pairs scored by ours (default 2000)")
    ap.add_argument(
        "--peer-pairs",
        type=int,
        default=200,
        help="pairs scored by the per-pair peer (default 200)",
    )
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument(
        "--threads", type=int, default=1, help="torch CPU threads (default 1: per-core figures)"
    )
    ap.add_argument(
        "--repeats", type=int, default=3, help="best of N alternating runs (shared machine)"
    )
    ap.add_argument(
        "--bidirectional", action="store_true", help="also time the 4-model scorer (dual_xent)"
    )
    ap.add_argument(
        "--device",
        default="cpu",
        choices=["cpu", "cuda"],
        help="cuda: GPU row (skipped without a GPU)",
    )
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    quiet_transformers()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: no GPU visible")
    torch.set_num_threads(args.threads)
    cfg = load("cds", "demo")
    src, trg = load_pairs(args.pairs)
    with tempfile.TemporaryDirectory() as d:
        tok = train_wordpiece(src + trg, d, vocab_size=cfg.vocab_size)
    models = [new_model(tok, cfg.model, seed=s) for s in range(4)]
    n_params = sum(p.numel() for p in models[0].parameters())
    fwd = CdsScorer(
        tok,
        models[0],
        models[1],
        max_length=cfg.model.max_length,
        device=args.device,
        batch_size=args.batch_size,
    )
    bi = CdsScorer(
        tok,
        *models,
        max_length=cfg.model.max_length,
        device=args.device,
        batch_size=args.batch_size,
    )
    # Warm-up (allocator, kernels), then alternate ours and the peer; keep each one's best.
    fwd.score(src[:64], trg[:64])
    naive_scores(fwd, src[:8], trg[:8])
    np.testing.assert_allclose(  # the peer computes the same score
        naive_scores(fwd, src[:16], trg[:16]), fwd.score(src[:16], trg[:16]), rtol=1e-3, atol=1e-4
    )
    best = {}
    for _ in range(args.repeats):
        runs = {
            "ours (CdsScorer, fwd)": (lambda: fwd.score_all(src, trg), len(src)),
            "peer: per-pair loop, same models": (
                lambda: naive_scores(fwd, src[: args.peer_pairs], trg[: args.peer_pairs]),
                args.peer_pairs,
            ),
        }
        if args.bidirectional:
            runs["ours (CdsScorer, fwd+bwd, dual_xent)"] = (
                lambda: bi.score_all(src, trg),
                len(src),
            )
        for name, (fn, n) in runs.items():
            wall, cpu = timed(fn)
            rate = (n / wall, n / max(cpu, 1e-9))
            if name not in best or rate[1] > best[name][1]:
                best[name] = rate
    dev = (
        f"{args.device}, {args.threads} thread(s)"
        if args.device == "cpu"
        else torch.cuda.get_device_name()
    )
    print(
        f"\nCDS scoring, demo model ({n_params / 1e6:.2f}M parameters per model), {len(src)} Tatoeba pairs, "
        f"batch {args.batch_size}, {dev}, best of {args.repeats}\n"
    )
    print("| system | pairs/s (wall) | pairs per CPU-s |")
    print("|---|---|---|")
    for name, (w, c) in best.items():
        print(f"| {name} | {w:.1f} | {c:.1f} |")
    ours = best["ours (CdsScorer, fwd)"]
    peer = best["peer: per-pair loop, same models"]
    print(
        f"| **ratio ours/peer (same run)** | {ours[0] / peer[0]:.2f} | **{ours[1] / peer[1]:.2f}** |"
    )
    print(
        "\nAgainst PUBLISHED bicleaner-ai figures (not same run, other machine and model; orientation only):\n"
    )
    print("| published figure | pairs/s | ours / published |")
    print("|---|---|---|")
    mine = ours[0] if args.device == "cuda" else ours[1]
    ratios = {}
    for name, rate in PUBLISHED.items():
        gpu = "GPU" in name
        if gpu != (args.device == "cuda"):
            print(f"| {name} | {rate:g} | n/a ({'no GPU run' if gpu else 'GPU run'}) |")
            continue
        ratios[name] = mine / rate
        print(f"| {name} | {rate:g} | {mine / rate:.2f} |")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"best": best, "published_ratios": ratios, "params": n_params, "device": dev},
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
