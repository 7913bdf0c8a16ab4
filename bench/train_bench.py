"""Training throughput: the demo model with 1 vs 2 worker processes (torchrun, gloo on CPU), and
with its sentences embedded in length groups (``train.length_groups``) vs one padded call.

Runs ``python -m labse_model train`` on Tatoeba pairs (every language; or ``--pairs``, e.g. a
demo run's ``inputs/train_pairs.tsv`` whose PUD pairs make the lengths uneven) with the same
global batch, and reads each run's metrics.jsonl: sentences/s (first logging window dropped as
warm-up), the share of wall time spent in the embedding gather (all_gather forward + all_reduce
backward) and the last logged loss.

- workers: one process against ``--nproc-per-node 2`` (the preset's ``length_groups``);
- length groups: one process with ``length_groups=1`` (the peer: the batch padded to its longest
  sentence, one model call) against the preset's value, alternated ``--repeats`` times. Both
  compute the same loss, so their last losses must agree.

On a GPU it also measures the MFU of one BERT-base dual-encoder step in bf16; on CPU that part is
skipped.

    .venv/bin/python bench/train_bench.py [--steps 60] [--threads 1] [--pairs FILE --init DIR]
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


def run(
    pairs: Path,
    out: Path,
    nproc: int,
    steps: int,
    threads: int,
    vocab: str | None,
    init: str | None = None,
    extra: tuple[str, ...] = (),
) -> dict:
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
    if init:
        cmd += ["--init", init]
    elif vocab:
        cmd += ["--vocab", vocab]
    cmd += list(extra)
    env = dict(os.environ, PYTHONPATH=str(REPO), LABSE_LOG_LEVEL="WARNING")
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"training run failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    recs = [json.loads(line) for line in open(out / "metrics.jsonl")][1:]  # drop warm-up
    return {
        "sentences_per_s": sum(x["sentences_per_s"] for x in recs) / len(recs),
        "gather_share": sum(x["gather_share"] for x in recs) / len(recs),
        "loss": recs[-1]["loss"],
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
    ap.add_argument(
        "--pairs",
        type=Path,
        help="pair TSV to train on (default: every Tatoeba training pair of ../shared/data)",
    )
    ap.add_argument(
        "--init", help="encoder to start from, with its vocabulary (default: a random one)"
    )
    ap.add_argument(
        "--repeats", type=int, default=2, help="alternations of the length-group pair (default 2)"
    )
    args = ap.parse_args()
    if args.pairs is None and not DATA.is_dir():
        sys.exit(f"Tatoeba data not found under {DATA}")
    if args.pairs is not None and not args.pairs.is_file():
        sys.exit(f"--pairs: no such file {args.pairs}")
    sys.path.insert(0, str(REPO))
    from labse_common.config import load
    from labse_model.tiny import train_wordpiece

    groups = load("train", "demo").length_groups
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        pairs = args.pairs or tmp / "pairs.tsv"
        if args.pairs is None:
            write_pairs(pairs)
        vocab = None
        if not args.init:
            texts = [
                c for ln in open(pairs, encoding="utf-8") for c in ln.rstrip("\n").split("\t")[:2]
            ]
            vocab = str(tmp / "vocab")
            train_wordpiece(texts, vocab, vocab_size=8000)  # one vocab for every run
        common = (args.steps, args.threads, vocab, args.init)
        one = run(pairs, tmp / "one", 1, *common)
        two = run(pairs, tmp / "two", 2, *common)
        plain, grouped = [], []
        for i in range(args.repeats):
            plain.append(run(pairs, tmp / f"g1-{i}", 1, *common, ("--set", "length_groups=1")))
            grouped.append(
                run(pairs, tmp / f"g-{i}", 1, *common, ("--set", f"length_groups={groups}"))
            )
    print(f"demo model, global batch 64 pairs, {args.steps} steps, {args.threads} thread(s)/worker")
    print(f"{'workers':<10}{'sentences/s':>12}{'gather share':>14}")
    print(f"{'1':<10}{one['sentences_per_s']:>12.1f}{'-':>14}")
    print(f"{'2':<10}{two['sentences_per_s']:>12.1f}{two['gather_share']:>13.1%}")
    print(f"speed-up 2 vs 1 process: {two['sentences_per_s'] / one['sentences_per_s']:.2f}x")
    print(f"{'length_groups':<14}{'sentences/s (each run)':>30}{'last loss':>12}")
    for name, rs in (("1 (peer)", plain), (str(groups), grouped)):
        rates = ", ".join(f"{r['sentences_per_s']:.1f}" for r in rs)
        print(f"{name:<14}{rates:>30}{rs[-1]['loss']:>12.4f}")
    best = max(r["sentences_per_s"] for r in grouped) / max(r["sentences_per_s"] for r in plain)
    print(f"speed-up length_groups={groups} vs one padded call (best of each): {best:.2f}x")
    gpu_mfu()


if __name__ == "__main__":
    main()
