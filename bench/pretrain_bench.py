"""Pretraining benchmarks (figures in bench/README.md).

    .venv/bin/python bench/pretrain_bench.py ablation [--stage-steps 300,600] [--ft-steps 300] [--set KEY=VALUE]
    .venv/bin/python bench/pretrain_bench.py stacking [--steps 300] [--layers 2 --stages 2]
    .venv/bin/python bench/pretrain_bench.py logits-memory
    .venv/bin/python bench/pretrain_bench.py reader-memory [--sizes 1000000,10000000]
    .venv/bin/python bench/pretrain_bench.py lexical-baseline

* ``ablation``: the paper's ablation in miniature on ../shared/data/tatoeba. The demo preset
  pretrains (MLM on both sides of the train split per language, plus with ``--corpus-dev`` the
  dev sentences shuffled per side as the demo's corpus stages produce them; TLM on the train
  pairs), then
  the dual encoder is fine-tuned with the demo ``train:`` settings twice, from the pretrained
  encoder and from random init on the same vocabulary. Prints the Tatoeba dev accuracy curve of
  both (every ``--curve-every`` steps, from the checkpoints), the wall time of each part, and
  the pretraining tokens/s per stacking stage (ratio stage 1 / stage 2 from the same run).
* ``stacking``: held-out MLM loss against wall time, progressive stacking (``--layers`` deep,
  ``--stages`` stages, steps split as the paper's 400k/800k/1.8M) against the full depth from
  step 0, same steps and data: the time each needs to reach the
  loss the slower one ends at (the stacking speed-up, a ratio within one run of this script).
* ``logits-memory``: peak memory of the MLM loss (forward + backward) for the paper's
  501,153-token vocabulary at sequence length 512, logits at the 80 masked positions only
  against logits at every position (each in its own process; resident-set high-water mark).
* ``lexical-baseline``: the ablation's data without any encoder: a word-translation table from
  Dice co-occurrence on the train pairs scores the dev pairs (what the data supports).
* ``reader-memory``: resident memory of the streaming reader over Parquet pair shards of 1M and
  10M pairs (scan + 200 global batches of 64 from 4 lanes), each in its own process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.pretrain_fixtures import DATA, dev_accuracy, write_tatoeba_inputs  # noqa: E402

PY = sys.executable
ENV = dict(os.environ, PYTHONPATH=str(REPO))


def _run(cmd: list[str], log: Path) -> float:
    t0 = time.perf_counter()
    with open(log, "w") as f:
        r = subprocess.run(cmd, cwd=REPO, env=ENV, stdout=f, stderr=subprocess.STDOUT)
    if r.returncode:
        raise SystemExit(f"failed ({r.returncode}): {' '.join(cmd)}; see {log}")
    return time.perf_counter() - t0


def _metrics(run: Path) -> list[dict]:
    return [json.loads(x) for x in open(run / "metrics.jsonl")]


def _curve(run: Path) -> list[tuple[int, float]]:
    from labse_model import checkpoint as ckpt

    out = []
    for step, path in sorted(ckpt.list_checkpoints(str(run / "checkpoints"))):
        out.append((step, dev_accuracy(path)["average"]))
    return out


def ablation(args) -> None:
    work = Path(args.work or tempfile.mkdtemp(prefix="pretrain-bench-"))
    inputs = write_tatoeba_inputs(work / "inputs", corpus_dev=args.corpus_dev)
    pre = work / "pre"
    common = ["progress=false", f"threads={args.threads}", "tensorboard=false"]
    pre_set = [x.removeprefix("pretrain.") for x in args.set if not x.startswith("train.")]
    ft_set = [x.removeprefix("train.") for x in args.set if not x.startswith("pretrain.")]
    t_pre = 0.0
    if not (pre / "model" / "config.json").exists():
        t_pre = _run(
            [
                PY,
                "-m",
                "labse_model",
                "pretrain",
                "--config",
                "demo",
                "--sentences",
                inputs["sentences"],
                "--pairs",
                inputs["pairs"],
                "--vocab",
                inputs["vocab"],
                "--output",
                str(pre),
                "--stage-steps",
                args.stage_steps,
                *common,
                *pre_set,
            ],
            work / "pre.log",
        )
    keep = str(args.ft_steps // args.curve_every + 2)
    times = {}
    for name, init in (
        ("pretrained", ["--init", str(pre / "model")]),
        ("random", ["--vocab", inputs["vocab"]]),
    ):
        out = work / f"ft-{name}"
        if not (out / "model" / "config.json").exists():
            times[name] = _run(
                [
                    PY,
                    "-m",
                    "labse_model",
                    "train",
                    "--config",
                    "demo",
                    "--pairs",
                    inputs["pairs"],
                    *init,
                    "--output",
                    str(out),
                    "--max-steps",
                    str(args.ft_steps),
                    f"save_every={args.curve_every}",
                    f"keep_checkpoints={keep}",
                    *common,
                    *ft_set,
                ],
                work / f"ft-{name}.log",
            )
    print(f"work dir: {work}")
    m = _metrics(pre)
    print("\npretraining (demo preset, stage steps", args.stage_steps, ")")
    print(
        f"{'stage':>6}{'tokens/s':>12}{'train MLM loss':>16}{'held-out MLM loss':>19}{'held-out TLM acc':>18}"
    )
    by_stage: dict[int, list[dict]] = {}
    for r in m:
        by_stage.setdefault(r["stage"], []).append(r)
    rates = {}
    for s, recs in sorted(by_stage.items()):
        recs_w = recs[1:] or recs  # first window of a stage holds the warm-up / stacking
        rates[s] = sum(r["tokens_per_s"] for r in recs_w) / len(recs_w)
        ev = [r for r in recs if "eval_mlm_loss" in r]
        last = ev[-1] if ev else {}
        print(
            f"{s:>6}{rates[s]:>12.0f}{recs[-1].get('mlm_loss', float('nan')):>16.3f}"
            f"{last.get('eval_mlm_loss', float('nan')):>19.3f}{last.get('eval_tlm_accuracy', float('nan')):>18.3f}"
        )
    if len(rates) > 1:
        print(f"tokens/s ratio stage 0 / stage {max(rates)}: {rates[0] / rates[max(rates)]:.2f}")
    curves = {name: _curve(work / f"ft-{name}") for name in ("pretrained", "random")}
    print("\nTatoeba dev average accuracy (16 languages -> eng) during fine-tuning")
    print(f"{'step':>6}{'pretrained init':>17}{'random init':>13}")
    for (s, a), (_s, b) in zip(curves["pretrained"], curves["random"], strict=False):
        print(f"{s:>6}{a:>17.3f}{b:>13.3f}")
    final = {n: dev_accuracy(str(work / f"ft-{n}" / "model")) for n in curves}
    print(
        f"final: pretrained {final['pretrained']['average']:.3f}  random {final['random']['average']:.3f}  "
        f"gain {100 * (final['pretrained']['average'] - final['random']['average']):.1f} points"
    )
    if t_pre or times:
        print(
            f"wall time: pretraining {t_pre:.0f} s, fine-tuning {times.get('pretrained', 0):.0f} s "
            f"(pretrained) / {times.get('random', 0):.0f} s (random); pretraining + fine-tuning "
            f"{(t_pre + times.get('pretrained', 0)) / 60:.1f} min"
        )
    print(
        "per language (pretrained / random):",
        ", ".join(
            f"{k} {final['pretrained'][k]:.2f}/{final['random'][k]:.2f}"
            for k in final["random"]
            if k != "average"
        ),
    )


def stacking(args) -> None:
    work = Path(args.work or tempfile.mkdtemp(prefix="stacking-bench-"))
    inputs = write_tatoeba_inputs(work / "inputs")
    # Steps per stage in the paper's proportions (400k : 800k : 1.8M), the last `stages` of them.
    weights = [2, 4, 9][-args.stages :] if args.stages <= 3 else [1] * args.stages
    split = [args.steps * w // sum(weights) for w in weights]
    split[-1] += args.steps - sum(split)
    shape = [f"model.num_hidden_layers={args.layers}"]
    runs = {
        "stacking": ["--stage-steps", ",".join(map(str, split)), *shape],
        "full depth": ["--stage-steps", str(args.steps), *shape],
    }
    print(f"model: {args.layers} layers; stacking {args.stages} stages, steps {split}")
    curves = {}
    for name, extra in runs.items():
        out = work / name.replace(" ", "-")
        t0 = time.perf_counter()
        _run(
            [
                PY,
                "-m",
                "labse_model",
                "pretrain",
                "--config",
                "demo",
                "--sentences",
                inputs["sentences"],
                "--vocab",
                inputs["vocab"],
                "--output",
                str(out),
                *extra,
                "tlm_batch_size=0",
                "eval_every=20",
                "log_every=20",
                "progress=false",
                f"threads={args.threads}",
                "tensorboard=false",
                f"save_every={args.steps}",
            ],
            work / f"{out.name}.log",
        )
        wall = time.perf_counter() - t0
        m = [r for r in _metrics(out) if "eval_mlm_loss" in r]
        # Wall time per step from the run's own step times (excludes start-up and scan).
        clock, t = [], 0.0
        per = {r["step"]: r for r in _metrics(out)}
        prev = 0
        for r in m:
            if r["step"] == 0:
                clock.append((0, 0.0, r["eval_mlm_loss"]))
                continue
            steps = r["step"] - prev
            t += steps * per[r["step"]]["step_time_s"]
            prev = r["step"]
            clock.append((r["step"], t, r["eval_mlm_loss"]))
        curves[name] = clock
        print(f"{name}: {wall:.0f} s wall, final held-out MLM loss {m[-1]['eval_mlm_loss']:.3f}")
    target = max(c[-1][2] for c in curves.values())
    print(f"\ntime to reach held-out MLM loss {target:.3f} (sum of step times):")
    reach = {}
    for name, c in curves.items():
        hit = next(((s, t) for s, t, loss in c if loss <= target), None)
        reach[name] = hit
        print(
            f"  {name:<11} step {hit[0] if hit else '-'}  {hit[1] if hit else float('nan'):.1f} s"
        )
    if all(reach.values()):
        print(f"stacking speed-up: {reach['full depth'][1] / reach['stacking'][1]:.2f}x")


_LOGITS = r"""
import resource, sys, torch
from transformers import BertConfig
from transformers.models.bert.modeling_bert import BertOnlyMLMHead
torch.set_num_threads(2)
mode, V, L, H = sys.argv[1], 501153, 512, 768
head = BertOnlyMLMHead(BertConfig(vocab_size=V, hidden_size=H))
hidden = torch.randn(1, L, H, requires_grad=True)
labels = torch.full((1, L), -100); labels[0, torch.randperm(L)[:80]] = torch.randint(5, V, (80,))
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
if mode == "masked":
    sel = labels != -100
    loss = torch.nn.functional.cross_entropy(head(hidden[sel]), labels[sel])
else:
    logits = head(hidden)
    loss = torch.nn.functional.cross_entropy(logits.view(-1, V), labels.view(-1), ignore_index=-100)
loss.backward()
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024)
"""


def logits_memory(args) -> None:
    out = {}
    for mode in ("masked", "full"):
        r = subprocess.run([PY, "-c", _LOGITS, mode], capture_output=True, text=True, env=ENV)
        if r.returncode:
            print(f"{mode}: failed: {r.stderr[-500:]}")
            continue
        out[mode] = float(r.stdout.strip().splitlines()[-1])
        print(
            f"{mode:>7} logits: peak +{out[mode]:.0f} MiB over the model (forward + backward, batch 1 x 512)"
        )
    if len(out) == 2:
        print(f"full / masked: {out['full'] / max(out['masked'], 1):.1f}x")


_READER = r"""
import resource, sys
from labse_model import stream
from labse_model.lanes import Lane
from labse_model.distributed import DistInfo
groups = stream.expand_inputs([sys.argv[1]])
res = stream.scan_distributed(groups, stream.PAIRS, 100000, 0.0, 0, DistInfo())
lanes = [Lane(res, stream.PAIRS, j, 4, 0, 4).records(0) for j in range(4)]
n = 0
for _ in range(200):
    for it in lanes:
        for _ in range(16):
            next(it); n += 1
print(res.total_rows(), n, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def reader_memory(args) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    work = Path(args.work or tempfile.mkdtemp(prefix="reader-bench-"))
    for size in (int(s) for s in args.sizes.split(",")):
        d = work / f"pairs-{size}"
        if not d.exists():
            d.mkdir(parents=True)
            per = 1_000_000
            for k in range(0, size, per):
                n = min(per, size - k)
                ids = np.arange(k, k + n).astype(str)
                src = pc.binary_join_element_wise("Satz Nummer ", ids, " ist hier.", "")
                trg = pc.binary_join_element_wise("Sentence number ", ids, " is here.", "")
                pq.write_table(
                    pa.table({"src": src, "trg": trg}),
                    d / f"part-{k // per:05d}.parquet",
                    row_group_size=100_000,
                )
        r = subprocess.run(
            [PY, "-c", _READER, str(d / "*.parquet")], capture_output=True, text=True, env=ENV
        )
        if r.returncode:
            print(r.stderr[-800:])
            continue
        rows, n, rss = r.stdout.split()
        print(
            f"{int(rows):>11,} pairs in {len(list(d.glob('*.parquet')))} shards: peak RSS {float(rss):.0f} MiB "
            f"(scan + {n} records from 4 lanes)"
        )


def lexical_baseline(args) -> None:
    """No neural model: a word-translation table from Dice co-occurrence on the train pairs."""
    import collections
    import math
    import re

    import numpy as np

    from tests.support.pretrain_fixtures import _lines, tatoeba_langs

    def words(s: str) -> set[str]:
        # Han and kana are written without spaces: each character is a word.
        return set(
            re.findall(r"[\u3040-\u30ff\u3400-\u9fff]|[^\W\u3040-\u30ff\u3400-\u9fff]+", s.lower())
        )

    accs = {}
    for lang in tatoeba_langs(DATA):
        xs = [words(s) for s in _lines(DATA / f"train.{lang}-eng.{lang}")]
        ys = [words(s) for s in _lines(DATA / f"train.{lang}-eng.eng")]
        cx, cy = (
            collections.Counter(w for x in xs for w in x),
            collections.Counter(w for y in ys for w in y),
        )
        cxy = collections.Counter((a, b) for x, y in zip(xs, ys, strict=True) for a in x for b in y)

        def dice(a: str, b: str, cxy=cxy, cx=cx, cy=cy) -> float:
            if (a, b) in cxy:
                return 2 * cxy[(a, b)] / (cx[a] + cy[b])
            return 1.0 if a == b else 0.0  # names, numbers

        dx = [words(s) for s in _lines(DATA / f"dev.{lang}-eng.{lang}")]
        dy = [words(s) for s in _lines(DATA / f"dev.{lang}-eng.eng")]
        idf = {w: math.log(len(ys) / (1 + cy[w])) for y in dy for w in y}
        score = np.array(
            [
                [
                    sum(idf[b] * max((dice(a, b) for a in x), default=0.0) for b in y)
                    / math.sqrt(1 + sum(idf[b] for b in y))
                    for y in dy
                ]
                for x in dx
            ]
        )
        accs[lang] = float((score.argmax(1) == np.arange(len(dx))).mean())
    print(
        "Tatoeba dev accuracy of a Dice word-translation table from the train pairs (no encoder):"
    )
    print(
        ", ".join(f"{k} {v:.2f}" for k, v in accs.items()),
        f"\naverage {np.mean(list(accs.values())):.3f}",
    )


def main() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a "Loading weights" bar per checkpoint scored
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("ablation", help="pretrained vs random init, dev accuracy curves")
    a.add_argument("--stage-steps", default="300,600")
    a.add_argument("--ft-steps", type=int, default=300)
    a.add_argument("--curve-every", type=int, default=50)
    a.add_argument(
        "--corpus-dev",
        action="store_true",
        help="MLM also reads the dev sentences, each side shuffled (unaligned), as the demo's corpus "
        "stages produce them; pairs and vocabulary stay train-only",
    )
    a.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override for the runs (repeatable): model.* for both, pretrain.* for "
        "pretraining only, train.* for both fine-tunings only",
    )
    s = sub.add_parser("stacking", help="time to a held-out MLM loss, stacking vs full depth")
    s.add_argument("--steps", type=int, default=300)
    s.add_argument(
        "--layers", type=int, default=2, help="encoder depth (demo: 2; 4 or 8 show more)"
    )
    s.add_argument("--stages", type=int, default=2, help="stacking stages (layers must divide)")
    sub.add_parser("logits-memory", help="masked-only vs full logits peak memory, 501k vocab")
    sub.add_parser("lexical-baseline", help="dev accuracy of a word-translation table (no encoder)")
    r = sub.add_parser("reader-memory", help="streaming reader RSS at 1M and 10M pairs")
    r.add_argument("--sizes", default="1000000,10000000")
    for p in (a, s, r):
        p.add_argument("--work", help="work directory (reused: finished runs are not redone)")
        p.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    if not DATA.is_dir() and args.cmd in ("ablation", "stacking", "lexical-baseline"):
        raise SystemExit(f"Tatoeba data not found under {DATA}")
    {
        "ablation": ablation,
        "stacking": stacking,
        "logits-memory": logits_memory,
        "reader-memory": reader_memory,
        "lexical-baseline": lexical_baseline,
    }[args.cmd](args)


if __name__ == "__main__":
    main()
