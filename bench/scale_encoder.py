"""Scale ladder of the encoder stages: pretraining, dual-encoder training and embedding, 1x..100x.

    nice -n 10 .venv/bin/python bench/scale_encoder.py [--base 10000] [--sizes 1 10 100]
        [--embed-sizes X ...] [--stages pretrain train embed] [--steps 50] [--threads 1]
        [--rows-per-file 100000] [--row-group-rows 0] [--pair-format tsv|parquet]
        [--data ../shared/data] [--workdir bench_out/scale_encoder] [--seed 0] [--json FILE]

Inputs of DISTINCT content at every size (``--base`` x size sentences and as many pairs), made
with the corpus ladder's generator (bench/scale_corpus.py: each sentence joins the first half of
one real UD/PUD/Tatoeba sentence with the second half of another of the same language, 17
languages, every sentence checked distinct) and the pair ladder's (bench/scale_bench.py
``PairMaker``: halves of two real Tatoeba/PUD translation pairs, 16 languages with English):

  sentences  DIR/<lang>/part-00000-NNNNN.parquet in the corpus jobs' layout (SENTENCE_SCHEMA of
             labse_common/formats.py, rows sorted by text, files of --rows-per-file rows, zstd,
             ONE row group per file by default, as the corpus jobs wrote them until
             2026-11-25 and as the recorded ladder runs used; the jobs now write groups of
             corpus.row_group_rows = 10,000: --row-group-rows 10000 matches them).
  pairs      DIR/<lang>/part-NNNNN.tsv (src, trg, src_lang, trg_lang: the TSV form the stage
             runner's train_pairs.tsv has), or Parquet (PAIR_SCHEMA) with --pair-format parquet.

A cased 8000-piece WordPiece (labse_model.tiny.train_wordpiece, as the tests build one) is learned
once from the smallest size's text, and a random encoder of the demo preset's shape is saved on it
for the embedding stage (its cost does not depend on the weights). Then each stage runs through
its real CLI as a child process with the demo preset (configs/demo.yaml) and ``--threads``
threads; its process tree is sampled every 0.2 s (peak of the summed RSS, raised to the
process's kernel high-water mark at exit, as bench/scale_corpus.py ``run_measured`` does, plus
CPU seconds):

  pretrain  python -m labse_model pretrain --sentences S --pairs P --stage-steps STEPS
            (MLM + TLM, one stacking stage at full depth): a FIXED number of steps
  train     python -m labse_model train --pairs P --max-steps STEPS: a FIXED number of steps
  embed     python -m labse_model encode --input S (float16 store, batch 64): EVERY sentence

Printed per stage and size: inputs, units (steps or sentences), wall and CPU seconds of the
process tree, set-up seconds, the cost per unit by CPU and by wall clock, peak RSS, disk written,
and the ratios of both costs and of peak RSS to the smallest size run (goal: costs within 1.2x,
RSS flat). The costs:

  training stages  CPU seconds per step between the first and the last step logged in
                   metrics.jsonl (logged every step here): the steady state, without the start-up
                   (imports, the input scan, model build, the first shuffle windows); by wall
                   clock, the median of the loop's own ``step_time_s``. Set-up = wall - the sum
                   of the step times.
  embedding        the encode command reports no time of its own: (CPU, or wall, seconds - those
                   of the same command on 64 sentences, its start-up) / sentences.

On a machine shared with other jobs a one-thread stage's CPU seconds move far less than its wall
seconds: the CPU ratios are the result, the wall ones the check. Each stage's stats.json must
balance and count every generated input. Generated inputs are kept in --workdir and reused when
the settings that shaped them match.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.scale_bench import ISO1, PairMaker, parallel_pools  # noqa: E402
from bench.scale_corpus import HighWater, SentenceMaker, dir_bytes, load_pools, reap  # noqa: E402

log = logging.getLogger("scale_encoder")
MB = 1 << 20
LANG1 = {**ISO1, "eng": "en"}  # ISO 639-3 -> the 639-1 folder names the corpus jobs write
STAGES = ("pretrain", "train", "embed")
STARTUP_ROWS = 64  # the encode start-up run: one batch


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and exit 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def fail(message: str) -> None:
    """A missing input or a bad setting: one line, exit 2."""
    print(f"bench/scale_encoder.py: error: {message}", file=sys.stderr)
    raise SystemExit(2)


# --- inputs -----------------------------------------------------------------------------------


def _clean(s: str) -> str:
    return s.replace("\t", " ").replace("\r", " ").replace("\n", " ")


def distinct_sentences(maker: SentenceMaker, lang: str, n: int) -> list[str]:
    """``n`` distinct generated sentences of ``lang`` (a repeat is drawn again)."""
    seen: set[str] = set()
    out: list[str] = []
    tries = 0
    while len(out) < n:
        s = _clean(maker.sentence(lang))
        tries += 1
        if tries > 20 * n + 1000:
            raise RuntimeError(f"{lang}: cannot make {n} distinct sentences from its pool")
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


def write_sentences(
    path: Path,
    n: int,
    seed: int,
    pools: dict[str, list[str]],
    rows_per_file: int,
    row_group_rows: int,
) -> dict:
    """``n`` distinct sentences, languages round-robin, as the corpus jobs write their output."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from labse_common.formats import SENTENCE_SCHEMA

    maker = SentenceMaker(pools, seed)
    langs = maker.langs
    files = 0
    for k, lang in enumerate(langs):
        count = n // len(langs) + (1 if k < n % len(langs) else 0)
        # sorted, as WriteSentenceShard writes a deduplicated group
        texts = sorted(distinct_sentences(maker, lang, count))
        code = LANG1.get(lang, lang)
        (path / code).mkdir(parents=True, exist_ok=True)
        for part, lo in enumerate(range(0, len(texts), rows_per_file)):
            chunk = texts[lo : lo + rows_per_file]
            m = len(chunk)
            docs = [f"{code}-{(lo + i) // 30}" for i in range(m)]
            t = pa.table(
                {
                    "text": chunk,
                    "lang": [code] * m,
                    "lang_score": [0.99] * m,
                    "quality_score": [0.9] * m,
                    "source": ["commoncrawl"] * m,
                    "doc_id": docs,
                    "url_or_title": [f"https://{code}.scale.example.org/{d}" for d in docs],
                    "locator": [""] * m,
                    "dup_count": [1] * m,
                },
                schema=SENTENCE_SCHEMA,
            )
            pq.write_table(
                t,
                path / code / f"part-00000-{part:05d}.parquet",
                compression="zstd",
                row_group_size=row_group_rows or None,
            )
            files += 1
    return {"sentences": n, "languages": len(langs), "files": files, "bytes": dir_bytes(path)}


def write_pairs(
    path: Path,
    n: int,
    seed: int,
    pools: dict[str, list[tuple[str, str]]],
    rows_per_file: int,
    fmt: str,
) -> dict:
    """``n`` distinct (xxx, eng) pairs, languages round-robin, one folder per source language."""
    maker = PairMaker(pools, seed)
    files = 0
    for k, lang in enumerate(maker.langs):
        count = n // len(maker.langs) + (1 if k < n % len(maker.langs) else 0)
        pairs = [tuple(map(_clean, maker.pair(lang))) for _ in range(count)]
        code = LANG1[lang]
        (path / code).mkdir(parents=True, exist_ok=True)
        for part, lo in enumerate(range(0, len(pairs), rows_per_file)):
            chunk = pairs[lo : lo + rows_per_file]
            f = path / code / f"part-{part:05d}.{fmt}"
            if fmt == "tsv":
                f.write_text("".join(f"{s}\t{t}\t{code}\ten\n" for s, t in chunk), "utf-8")
            else:
                import pyarrow as pa
                import pyarrow.parquet as pq

                from labse_common.formats import PAIR_SCHEMA

                t = pa.table(
                    {
                        "src": [s for s, _ in chunk],
                        "trg": [t for _, t in chunk],
                        "src_lang": [code] * len(chunk),
                        "trg_lang": ["en"] * len(chunk),
                    },
                    schema=PAIR_SCHEMA,
                )
                pq.write_table(t, f, compression="zstd")
            files += 1
    return {"pairs": n, "languages": len(maker.langs), "files": files, "bytes": dir_bytes(path)}


class Inputs:
    """The generated inputs of every size under the workdir (made once, reused while the
    settings that shaped them are the same)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.work = Path(args.workdir)
        self._pools: dict | None = None
        self._pair_pools: dict | None = None

    def settings(self, x: int) -> dict:
        a = self.args
        return {
            "n": a.base * x,
            "seed": a.seed + x,
            "rows_per_file": a.rows_per_file,
            "row_group_rows": a.row_group_rows,
            "pair_format": a.pair_format,
        }

    def get(self, x: int) -> tuple[Path, Path, dict]:
        d = self.work / f"in-{x}x"
        meta = d / "_meta.json"
        want = self.settings(x)
        if meta.exists() and json.loads(meta.read_text()).get("settings") == want:
            return d / "sentences", d / "pairs", json.loads(meta.read_text())
        if d.exists():
            shutil.rmtree(d)
        if self._pools is None:
            self._pools = load_pools(Path(self.args.data))
            self._pair_pools = parallel_pools(Path(self.args.data))
        t0 = time.perf_counter()
        n, seed = want["n"], want["seed"]
        s = write_sentences(
            d / "sentences", n, seed, self._pools, self.args.rows_per_file, self.args.row_group_rows
        )
        p = write_pairs(
            d / "pairs", n, seed, self._pair_pools, self.args.rows_per_file, self.args.pair_format
        )
        info = {"settings": want, "sentences": s, "pairs": p}
        meta.write_text(json.dumps(info))
        log.info("%dx inputs written in %.0f s: %s", x, time.perf_counter() - t0, info)
        return d / "sentences", d / "pairs", info


def texts_of(sentences: Path, pairs: Path) -> list[str]:
    """Every sentence and both sides of every pair of one (small) size."""
    import pyarrow.parquet as pq

    out: list[str] = []
    for f in sorted(sentences.rglob("*.parquet")):
        out += pq.read_table(f, columns=["text"]).column(0).to_pylist()
    for f in sorted(pairs.rglob("*.tsv")):
        for line in f.read_text("utf-8").splitlines():
            out += line.split("\t")[:2]
    for f in sorted(pairs.rglob("*.parquet")):
        t = pq.read_table(f, columns=["src", "trg"])
        out += t.column(0).to_pylist() + t.column(1).to_pylist()
    return out


def make_vocab_and_model(work: Path, sentences: Path, pairs: Path, key: dict) -> tuple[Path, Path]:
    """The WordPiece of the smallest size's text and a random demo-shaped encoder on it."""
    vocab, model = work / "vocab", work / "embed-model"
    meta = work / "_vocab_meta.json"
    if meta.exists() and json.loads(meta.read_text()) == key and (model / "config.json").exists():
        return vocab, model
    for d in (vocab, model):
        if d.exists():
            shutil.rmtree(d)
    from labse_common.config import load
    from labse_model.model import random_encoder, save_encoder
    from labse_model.tiny import train_wordpiece

    t0 = time.perf_counter()
    size = load("vocab", "demo").vocab_size
    tok = train_wordpiece(texts_of(sentences, pairs), str(vocab), vocab_size=size)
    encoder = random_encoder(load("model", "demo"), tok, seed=0)
    save_encoder(encoder, tok, str(model), max_seq_length=128)
    meta.write_text(json.dumps(key))
    log.info(
        "vocab (%d pieces) and demo-shaped encoder made in %.0f s",
        len(tok),
        time.perf_counter() - t0,
    )
    return vocab, model


# --- measuring one child -----------------------------------------------------------------------


def _tree(p: psutil.Process) -> tuple[int, float]:
    """(summed RSS, summed user+system CPU seconds) of ``p`` and its live descendants."""
    rss, cpu = 0, 0.0
    for q in [p, *p.children(recursive=True)]:
        try:
            rss += q.memory_info().rss
            t = q.cpu_times()
            cpu += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    return rss, cpu


def logged_steps(metrics: Path) -> int:
    """Steps with a ``step_time_s`` record in metrics.jsonl so far (0 before the loop)."""
    try:
        return sum(1 for line in metrics.read_text().splitlines() if '"step_time_s"' in line)
    except OSError:
        return 0


def run_sampled(cmd: list[str], metrics: Path | None = None) -> dict:
    """Run ``cmd``; sample its process tree every 0.2 s (peak RSS; CPU seconds, and with
    ``metrics`` the CPU at the first and the last logged step): bench/scale_corpus.py
    ``run_measured`` with CPU time added. The total CPU is the exact ``RUSAGE_CHILDREN``
    difference."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    ps = psutil.Process(proc.pid)
    err: list[bytes] = []
    reader = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)
    reader.start()
    peak, hw = 0, HighWater()
    marks: list[tuple[int, float]] = []  # (steps logged, CPU seconds) when the count changed
    while not reap(proc):
        rss, cpu = _tree(ps)
        hw.sample(ps)
        peak = max(peak, rss)
        if metrics is not None:
            n = logged_steps(metrics)
            if n and (not marks or n != marks[-1][0]):
                marks.append((n, cpu))
        time.sleep(0.2)
    reader.join()
    dt = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err[0].decode()[-3000:]}")
    cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    # One process: its high-water mark is its peak (scale_corpus.HighWater).
    out = {
        "seconds": dt,
        "peak_rss": max(peak, hw.largest()),
        "sampled_peak_rss": peak,
        "cpu_seconds": cpu,
    }
    if len(marks) >= 2 and marks[-1][0] > marks[0][0]:
        (a, ca), (b, cb) = marks[0], marks[-1]
        out.update(cpu_per_step=(cb - ca) / (b - a), cpu_window_steps=[a, b])
    return out


# --- the stages -------------------------------------------------------------------------------


def stage_command(
    stage: str,
    sentences: Path,
    pairs: Path,
    out: Path,
    vocab: Path,
    model: Path,
    args: argparse.Namespace,
) -> list[str]:
    base = [sys.executable, "-m", "labse_model"]
    loop = [
        "--set",
        f"threads={args.threads}",
        "--set",
        "log_every=1",
        "--set",
        "progress=false",
        "--set",
        "tensorboard=false",
    ]
    if stage == "pretrain":
        return [
            *base,
            "pretrain",
            "--config",
            "demo",
            "--sentences",
            str(sentences),
            "--pairs",
            str(pairs),
            "--vocab",
            str(vocab),
            "--output",
            str(out),
            "--stage-steps",
            str(args.steps),
            *loop,
        ]
    if stage == "train":
        return [
            *base,
            "train",
            "--config",
            "demo",
            "--pairs",
            str(pairs),
            "--vocab",
            str(vocab),
            "--output",
            str(out),
            "--max-steps",
            str(args.steps),
            *loop,
        ]
    return [
        *base,
        "encode",
        "--model",
        str(model),
        "--input",
        str(sentences),
        "--output",
        str(out),
        "--dtype",
        "float16",
        "--batch-size",
        "64",
        "--device",
        "cpu",
        "--overwrite",
        "--no-progress",
    ]


def step_times(out: Path, steps: int) -> list[float]:
    """``step_time_s`` of every step in metrics.jsonl (log_every=1)."""
    times: dict[int, float] = {}
    for line in (out / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if "step_time_s" in rec:
            times[int(rec["step"])] = float(rec["step_time_s"])
    if sorted(times) != list(range(1, steps + 1)):
        raise SystemExit(
            f"{out}/metrics.jsonl: step times of steps {sorted(times)[:5]}..., expected 1..{steps}"
        )
    return [times[s] for s in range(1, steps + 1)]


def check_counts(stage: str, out: Path, info: dict) -> list[str]:
    """Problems with the stage's stats.json: unbalanced, or not every generated input counted."""
    from labse_common.stats import check_balanced

    st = json.loads((out / "stats.json").read_text())
    problems = check_balanced(st)
    c = st["counts"]
    want = {
        "pretrain": {"sentences": info["sentences"]["sentences"], "pairs": info["pairs"]["pairs"]},
        "train": {"pairs": info["pairs"]["pairs"]},
        "embed": {"sentences": info["sentences"]["sentences"]},
    }[stage]
    for unit, n in want.items():
        got = c.get(unit, {}).get("in")
        if got != n:
            problems.append(f"{unit} in {got} != {n} generated")
    return problems


def run_stage(
    stage: str,
    x: int,
    sentences: Path,
    pairs: Path,
    info: dict,
    vocab: Path,
    model: Path,
    startup: dict,
    args: argparse.Namespace,
) -> dict:
    out = Path(args.workdir) / f"{stage}-out-{x}x"
    if out.exists():
        shutil.rmtree(out)  # a fresh run: the training stages resume from an old checkpoint
    n = info["sentences"]["sentences"] if stage != "train" else info["pairs"]["pairs"]
    log.info("%s %dx (%d %s) ...", stage, x, n, "pairs" if stage == "train" else "sentences")
    cmd = stage_command(stage, sentences, pairs, out, vocab, model, args)
    m = run_sampled(cmd, None if stage == "embed" else out / "metrics.jsonl")
    problems = check_counts(stage, out, info)
    if problems:
        raise SystemExit(f"{stage} {x}x: stats.json of {out} does not add up: {problems}")
    row = {
        "stage": stage,
        "x": x,
        "sentences": info["sentences"]["sentences"],
        "pairs": info["pairs"]["pairs"],
        **m,
        "disk_written": dir_bytes(out),
    }
    if stage == "embed":
        row.update(
            units=n,
            unit_name="sentences",
            per_unit_name="us/sentence",
            startup_seconds=startup["seconds"],
            startup_cpu_seconds=startup["cpu_seconds"],
            per_unit_cpu=1e6 * (m["cpu_seconds"] - startup["cpu_seconds"]) / n,
            per_unit_wall=1e6 * (m["seconds"] - startup["seconds"]) / n,
            setup_seconds=None,
        )
    else:
        st = step_times(out, args.steps)
        if "cpu_per_step" not in m:
            raise SystemExit(
                f"{stage} {x}x: steps too fast to sample their CPU time (0.2 s); raise --steps"
            )
        row.update(
            units=args.steps,
            unit_name="steps",
            per_unit_name="s/step",
            per_unit_cpu=m["cpu_per_step"],
            per_unit_wall=statistics.median(st),
            steps_seconds=sum(st),
            mean_step_s=sum(st) / len(st),
            first_step_s=st[0],
            max_step_s=max(st),
            setup_seconds=m["seconds"] - sum(st),
        )
    log.info("%s %dx: %s", stage, x, {k: v for k, v in row.items() if k != "stage"})
    return row


def embed_startup(work: Path, sentences: Path, model: Path, args: argparse.Namespace) -> dict:
    """Wall and CPU seconds of the encode command on one batch: its start-up (imports, model
    load), taken off every embedding run's own."""
    import pyarrow.parquet as pq

    d = work / "startup"
    if d.exists():
        shutil.rmtree(d)
    (d / "in").mkdir(parents=True)
    first = sorted(sentences.rglob("*.parquet"))[0]
    t = pq.read_table(first).slice(0, STARTUP_ROWS)
    pq.write_table(t, d / "in" / "part-00000-00000.parquet", compression="zstd")
    m = run_sampled(stage_command("embed", d / "in", d / "in", d / "out", model, model, args))
    log.info(
        "encode start-up (%d sentences): %.1f s wall, %.1f s CPU, peak RSS %.0f MiB",
        t.num_rows,
        m["seconds"],
        m["cpu_seconds"],
        m["peak_rss"] / MB,
    )
    return {**m, "sentences": t.num_rows}


# --- the ladder -------------------------------------------------------------------------------


def add_ratios(rows: list[dict]) -> None:
    for stage in STAGES:
        mine = [r for r in rows if r["stage"] == stage]
        if not mine:
            continue
        base = min(mine, key=lambda r: r["x"])  # ratios to the smallest size run
        for r in mine:
            r["ratio_per_unit_cpu"] = r["per_unit_cpu"] / base["per_unit_cpu"]
            r["ratio_per_unit_wall"] = r["per_unit_wall"] / base["per_unit_wall"]
            r["ratio_peak_rss"] = r["peak_rss"] / base["peak_rss"]


COLUMNS = (
    "stage",
    "x",
    "inputs",
    "units",
    "wall s",
    "CPU s",
    "set-up s",
    "per unit (CPU)",
    "per unit (wall)",
    "peak RSS MiB",
    "disk MiB",
    "CPU/unit vs 1x",
    "wall/unit vs 1x",
    "RSS vs 1x",
)


def cells(r: dict) -> list[str]:
    emb = r["stage"] == "embed"
    unit = "us/sent" if emb else "s/step"

    def cost(v: float) -> str:
        return f"{v:,.1f} {unit}" if emb else f"{v:.3f} {unit}"

    inputs = r["pairs"] if r["stage"] == "train" else r["sentences"]
    setup = "-" if r["setup_seconds"] is None else f"{r['setup_seconds']:.1f}"
    return [
        r["stage"],
        str(r["x"]),
        f"{inputs:,}",
        f"{r['units']:,} {r['unit_name']}",
        f"{r['seconds']:.1f}",
        f"{r['cpu_seconds']:.1f}",
        setup,
        cost(r["per_unit_cpu"]),
        cost(r["per_unit_wall"]),
        f"{r['peak_rss'] / MB:,.0f}",
        f"{r['disk_written'] / MB:.1f}",
        f"{r['ratio_per_unit_cpu']:.2f}",
        f"{r['ratio_per_unit_wall']:.2f}",
        f"{r['ratio_peak_rss']:.2f}",
    ]


def table(rows: list[dict], markdown: bool = False) -> str:
    body = [cells(r) for r in rows]
    if markdown:
        lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        return "\n".join(lines + ["| " + " | ".join(c) + " |" for c in body])
    w = [max(len(h), *(len(c[i]) for c in body)) for i, h in enumerate(COLUMNS)]
    fmt = [f"{{:<{w[0]}}}", *(f"{{:>{k}}}" for k in w[1:])]
    return "\n".join(
        "  ".join(f.format(v) for f, v in zip(fmt, line)) for line in [list(COLUMNS), *body]
    )


def check_args(args: argparse.Namespace) -> None:
    if args.base < 1000:
        fail(f"--base {args.base}: must be >= 1000 (17 languages, batches of 64)")
    for flag, xs in (("--sizes", args.sizes), ("--embed-sizes", args.embed_sizes or [])):
        bad = [x for x in xs if x < 1]
        if bad:
            fail(f"{flag} {bad[0]}: sizes are multiples of --base, >= 1")
        if len(set(xs)) != len(xs):
            fail(f"{flag}: a size is given twice ({' '.join(map(str, xs))})")
    if args.steps < 1:
        fail(f"--steps {args.steps}: must be >= 1")
    if args.threads < 1:
        fail(f"--threads {args.threads}: must be >= 1")
    if args.rows_per_file < 1 or args.row_group_rows < 0:
        fail("--rows-per-file must be >= 1 and --row-group-rows >= 0")
    data = Path(args.data)
    missing = [s for s in ("ud", "pud", "tatoeba") if not (data / s).is_dir()]
    if missing:
        fail(
            f"--data {data}: no {', '.join(m + '/' for m in missing)} there (the bench needs "
            "../shared/data's UD, PUD and Tatoeba text)"
        )


def main(argv: list[str] | None = None) -> int:
    ap = Parser(
        prog="bench/scale_encoder.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--base", type=int, default=10_000, help="sentences (and pairs) at 1x (default 10000)"
    )
    ap.add_argument(
        "--sizes",
        nargs="+",
        type=int,
        default=[1, 10, 100],
        help="multiples of --base pretraining and training run on",
    )
    ap.add_argument(
        "--embed-sizes",
        nargs="+",
        type=int,
        help="multiples of --base embedding runs on (default: --sizes; embedding "
        "is the one stage whose time grows with the input)",
    )
    ap.add_argument(
        "--stages",
        nargs="+",
        choices=STAGES,
        default=list(STAGES),
        help="stages to measure (default: all three)",
    )
    ap.add_argument(
        "--steps",
        type=int,
        default=50,
        help="optimizer steps of pretraining and of training at every size",
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="CPU threads of every stage (torch, OpenMP, tokenizers; default 1)",
    )
    ap.add_argument(
        "--rows-per-file",
        type=int,
        default=100_000,
        help="rows per sentence Parquet file and per pair file (the demo preset's "
        "corpus.rows_per_file)",
    )
    ap.add_argument(
        "--row-group-rows",
        type=int,
        default=0,
        help="rows per Parquet row group of the sentence files; 0 = one per file "
        "(the recorded runs); 10000 = as the corpus jobs write them now",
    )
    ap.add_argument(
        "--pair-format",
        choices=["tsv", "parquet"],
        default="tsv",
        help="pair shards: TSV (as the runner's train_pairs.tsv) or Parquet",
    )
    ap.add_argument(
        "--data",
        default=str(REPO.parent / "shared" / "data"),
        help="../shared/data (ud/, pud/, tatoeba/)",
    )
    ap.add_argument(
        "--workdir",
        default=str(REPO / "bench_out" / "scale_encoder"),
        help="generated inputs (kept, reused) and the stage outputs",
    )
    ap.add_argument("--seed", type=int, default=0, help="seed of the generated text")
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args(argv)
    check_args(args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    t = str(args.threads)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "RAYON_NUM_THREADS"):
        os.environ[var] = t  # the children's thread pools (torch also from the configs' threads)
    os.environ["TOKENIZERS_PARALLELISM"] = "false" if args.threads == 1 else "true"

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    embed_sizes = args.embed_sizes or args.sizes
    plan = [
        (s, x) for s in args.stages for x in sorted(embed_sizes if s == "embed" else args.sizes)
    ]
    inputs = Inputs(args)
    smallest = min(x for _, x in plan)
    s1, p1, _ = inputs.get(smallest)
    vocab, model = make_vocab_and_model(work, s1, p1, {"from": inputs.settings(smallest)})
    startup = embed_startup(work, s1, model, args) if "embed" in args.stages else {}
    load0 = os.getloadavg()
    rows = []
    for stage, x in plan:
        sp, pp, info = inputs.get(x)
        rows.append(run_stage(stage, x, sp, pp, info, vocab, model, startup, args))
    add_ratios(rows)
    load1 = os.getloadavg()
    print(table(rows))
    print()
    print(table(rows, markdown=True))
    print(
        f"load average (1/5/15 min) at start {load0[0]:.1f}/{load0[1]:.1f}/{load0[2]:.1f}, "
        f"at end {load1[0]:.1f}/{load1[1]:.1f}/{load1[2]:.1f}; {args.threads} thread(s) per stage"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "rows": rows,
                    "embed_startup": startup,
                    "load_start": load0,
                    "load_end": load1,
                    "args": vars(args),
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
