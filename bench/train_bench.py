"""Training throughput: the demo model with 1 vs 2 worker processes (torchrun, gloo on CPU).

Runs ``python -m labse_model train`` on Tatoeba pairs (every language) with the same global
batch, once with one process and once with ``--nproc-per-node 2``, and reads the run's
metrics.jsonl: sentences/s (first logging window dropped as warm-up) and the share of wall time
spent in the embedding gather (all_gather forward + all_reduce backward). On a GPU it also
measures the MFU of one BERT-base dual-encoder step in bf16; on CPU that part is skipped.

    .venv/bin/python bench/train_bench.py [--steps 60] [--threads 1]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "tatoeba"


def write_pairs(path: Path) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for eng in sorted(glob.glob(str(DATA / "train.*-eng.eng"))):
            lang = eng.split(".")[-2].split("-")[0]
            src = Path(eng[: -len("eng")] + lang).read_text(encoding="utf-8").splitlines()
            trg = Path(eng).read_text(encoding="utf-8").splitlines()
            f.writelines(f"{s}\t{t}\n" for s, t in zip(src, trg))


def run(pairs: Path, out: Path, nproc: int, steps: int, threads: int, vocab: str | None) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "labse_model",
        "train",
        "--config",
        "demo",
        "--pairs",
        str(pairs),
        "--output",
        str(out),
        "--max-steps",
        str(steps),
        "--nproc-per-node",
        str(nproc),
        "progress=false",
        f"threads={threads}",
        "log_every=10",
        f"save_every={steps}",
        "tensorboard=false",
    ]
    if vocab:
        cmd += ["--vocab", vocab]
    env = dict(os.environ, PYTHONPATH=str(REPO), LABSE_LOG_LEVEL="WARNING")
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"training run failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    recs = [json.loads(line) for line in open(out / "metrics.jsonl")][1:]  # drop warm-up
    return {
        "sentences_per_s": sum(x["sentences_per_s"] for x in recs) / len(recs),
        "gather_share": sum(x["gather_share"] for x in recs) / len(recs),
    }


def gpu_mfu(steps: int = 10) -> None:
    import torch

    from labse_model.loss import AdditiveMarginRankingLoss
    from labse_model.model import build_config, new_encoder

    if not torch.cuda.is_available():
        print("MFU: skipped (no GPU on this machine)")
        return
    dev = torch.device("cuda")
    cfg = build_config(501153, 0)  # BERT-base with LaBSE's vocabulary size
    model = new_encoder(cfg, seed=0).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    loss_fn = AdditiveMarginRankingLoss()
    b, seq = 256, 64  # per-GPU pairs; 2b sequences per step
    ids = torch.randint(1000, 30000, (2 * b, seq), device=dev)
    mask = torch.ones_like(ids)

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            emb = model(ids, mask)
        loss_fn(emb[:b], emb[b:]).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t) / steps
    # Matmul FLOPs, forward x3 for backward; embedding lookups excluded (no matmul).
    h, L, ff = cfg.hidden_size, cfg.num_hidden_layers, cfg.intermediate_size
    tokens = 2 * b * seq
    per_token = L * (2 * 4 * h * h + 2 * 2 * h * ff + 2 * 2 * seq * h) + 2 * h * h
    flops = 3 * per_token * tokens
    peak = float(os.environ.get("GPU_PEAK_TFLOPS", "989")) * 1e12  # H100 SXM dense bf16
    print(
        f"MFU (BERT-base, bf16, {2 * b} sequences x {seq} tokens): {flops / dt / peak:.1%}  "
        f"step {dt * 1e3:.1f} ms  (peak {peak / 1e12:.0f} TFLOP/s; set GPU_PEAK_TFLOPS)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--steps", type=int, default=60, help="optimizer steps per run (default 60)")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads per worker (default 1)")
    args = ap.parse_args()
    if not DATA.is_dir():
        sys.exit(f"Tatoeba data not found under {DATA}")
    sys.path.insert(0, str(REPO))
    from labse_model.tiny import train_wordpiece

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        pairs = tmp / "pairs.tsv"
        write_pairs(pairs)
        texts = [c for line in open(pairs, encoding="utf-8") for c in line.rstrip("\n").split("\t")]
        vocab = str(tmp / "vocab")
        train_wordpiece(texts, vocab, vocab_size=8000)  # one vocab for both runs
        one = run(pairs, tmp / "one", 1, args.steps, args.threads, vocab)
        two = run(pairs, tmp / "two", 2, args.steps, args.threads, vocab)
    print(f"demo model, global batch 64 pairs, {args.steps} steps, {args.threads} thread(s)/worker")
    print(f"{'workers':<10}{'sentences/s':>12}{'gather share':>14}")
    print(f"{'1':<10}{one['sentences_per_s']:>12.1f}{'-':>14}")
    print(f"{'2':<10}{two['sentences_per_s']:>12.1f}{two['gather_share']:>13.1%}")
    print(f"speed-up 2 vs 1 process: {two['sentences_per_s'] / one['sentences_per_s']:.2f}x")
    gpu_mfu()


if __name__ == "__main__":
    main()
