"""Scale of the whole run: the runner with ``model.init`` on 1x, 10x, 100x the demo's crawl.

    .venv/bin/python bench/run_scale.py [--rungs 1,10,100] [--work DIR] [--keep]
        [--data ../shared/data] [--set SECTION.KEY=VALUE ...] [--json FILE]

Each rung is one ``python -m pipelines.run`` on generated web text in the demo's languages
(English, German, French, Spanish; WET files of the CommonCrawl shape), at 1x the demo's crawl:
about 21,000 English sentences to mine and ~1,000 in each other language, plus the demo's
planted pairs (``pipelines.demo_data`` on ``--data``: Tatoeba dev and PUD pairs hidden in web
text, its training pairs and its known alignment, the same at every rung). The filler sentences
are distinct at every size (``bench/scale_corpus.py``'s SentenceMaker: half of one real sentence
joined to half of another), each page framed by the synthetic sample's boilerplate lines
(``pipelines.synthetic``), so dedup, LID and the quality rules have real work.

The encoder is given (``model.init``: a random encoder in the LaBSE layout written locally by
``labse_model.tiny``, 64 wide and 2 layers unless ``--hidden``/``--layers``; the demo's is 128 and
4) and ``train.steps=0``, so the vocabulary, pretraining and training stages do not run: their
scale is ``bench/scale_encoder.py``'s. The labels come from the planted alignment
(``sources.label_from: eval``), so no person is needed; ``combine.sample_size`` is 600 x the
rung, and the CDS scorer runs at the tests' size (:data:`BENCH_SETS`).

Printed per stage and rung, from the runner's manifests (``_state/<stage>.manifest.json``) and
each stage's ``stats.json``: records in, wall seconds, seconds per 1,000 records in, peak RSS
(the stage's process tree) and the ratio of the per-record cost and of the peak to the 1x rung,
the peer run of this bench. Then the whole run: crawl sentences in, wall seconds, seconds per
1,000 crawl sentences, its peak RSS (sampled over the runner's process tree), the run folder's
size on disk, and the load average around it (other work on the machine inflates the seconds).
``--table FILE`` prints the table of an earlier ``--json FILE`` again. Results: bench/README.md,
"Scale of the whole run".
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.scale_corpus import (  # noqa: E402
    SentenceMaker,
    _wet_record,
    dir_bytes,
    load_pools,
    run_measured,
)

log = logging.getLogger("run_scale")
DATA = REPO.parent / "shared" / "data"
MB = 1 << 20
# Sentences per language at 1x: the demo mines ~21,000 English sentences (bench/README.md) and
# its other languages hold a few hundred planted ones; web text has more of each (CommonCrawl:
# German, French and Spanish ~5% of English each).
BASE = {"eng": 20_000, "deu": 1_000, "fra": 1_000, "spa": 1_000}
PAGE = 24  # content sentences per page
# Which count of a stage's stats.json is its input; the first count otherwise.
RECORDS = ("sentences", "pairs", "noisy_pairs", "fit_pairs", "rows")
# The CDS scorer at the tests' size (tests/pipelines/test_run_own_data.py): at the demo's (BART
# 128 wide, 4 + 4 epochs) cds_train alone took over 20 minutes of the 1x rung on a loaded
# 2-core machine. Its cost is per pair and per epoch at any size, so the ratios hold.
BENCH_SETS = [
    "cds.noisy_epochs=1",
    "cds.clean_epochs=1",
    "cds.model.d_model=32",
    "cds.model.ffn_dim=64",
    "cds.model.encoder_layers=1",
    "cds.model.decoder_layers=1",
]
# Mined pairs labelled per 1x (the demo's combine.sample_size), scaled with the rung: the labels
# come free from the planted alignment, and a fixed 600 of 10x the mined pairs held 1 planted
# pair at 10x (combine needs 5 GOOD).
SAMPLE = 600


def write_filler(out: Path, x: int, seed: int, pools: dict[str, list[str]]) -> dict:
    """WET files of ``x`` times :data:`BASE` distinct sentences, pages framed by boilerplate
    (64 MB per file at most, as CommonCrawl's ~1 GB segments split for a worker each)."""
    from pipelines.synthetic import BOILERPLATE

    maker = SentenceMaker({k: pools[k] for k in BASE}, seed + x)
    out.mkdir(parents=True, exist_ok=True)
    left = {lang: n * x for lang, n in BASE.items()}
    rng, docs, files, fh = random.Random(seed), 0, 0, None
    while any(left.values()):
        if fh is None or fh.tell() > 64 * MB:
            if fh:
                fh.close()
            fh = open(out / f"scale-{files:04d}.warc.wet.gz", "wb")
            files += 1
        # Languages interleaved in proportion, as a crawl segment mixes them.
        lang = rng.choices(list(left), weights=list(left.values()))[0]
        n = min(PAGE, left[lang])
        left[lang] -= n
        bp = BOILERPLATE[lang]
        body = maker.doc(lang, n)
        text = "\n".join([bp[0], bp[1], *body, bp[2], bp[4]]).encode("utf-8")
        fh.write(_wet_record(f"https://{lang}.run-scale.example.org/{docs}", text, docs))
        docs += 1
    fh.close()
    return {"sentences": sum(BASE.values()) * x, "docs": docs, "files": files}


def prepare(
    work: Path, data: Path, rungs: list[int], seed: int, shape: tuple[int, int]
) -> dict[int, Path]:
    """The demo's planted task and the encoder (once), and one input folder per rung."""
    from labse_common.config import load
    from labse_model.tiny import make_tiny_checkpoint
    from pipelines.demo_data import build

    demo = work / "demo"
    if not (demo / "stats.json").is_file():
        build(data, demo, load("sources", "demo").demo, overwrite=True)
    hidden, layers = shape
    model = work / f"encoder-{hidden}x{layers}"
    if not (model / "config.json").is_file():
        pairs = (demo / "pairs").glob("*.tsv")
        sents = [
            s for f in sorted(pairs) for ln in f.open(encoding="utf-8") for s in ln.split("\t")
        ]
        # Random weights in the LaBSE layout; 64-wide heads as BERT's.
        make_tiny_checkpoint(
            str(model), sentences=sents, hidden=hidden, layers=layers, heads=max(1, hidden // 64)
        )
    pools = load_pools(data)
    inputs = {}
    for x in rungs:
        inp = work / f"input-{x}x"
        if not (inp / "_meta.json").is_file():
            t0 = time.perf_counter()
            meta = write_filler(inp / "crawl", x, seed, pools)
            (inp / "_meta.json").write_text(json.dumps(meta))
            log.info("%dx input written in %.0f s: %s", x, time.perf_counter() - t0, meta)
        inputs[x] = inp
    return inputs


def run_config(work: Path, encoder: Path) -> Path:
    """The demo preset with the generated crawl and the demo builder's outputs as sources."""
    demo = work / "demo"
    cfg = {
        "extends": "demo",
        "sources": {
            "commoncrawl": ["crawl/*.warc.wet.gz", str(demo / "web" / "planted.warc.wet.gz")],
            "wikipedia": [],
            "text": [],
            "pairs": [str(demo / "pairs" / "*.{src}-{trg}.tsv")],
            "eval": [str(demo / "eval" / "*.{src}-{trg}.tsv")],
            "label_from": "eval",
            "demo": None,
        },
        "model": {"init": str(encoder)},
        "train": {"steps": 0},
    }
    path = work / "run_scale.yaml"
    path.write_text(json.dumps(cfg, indent=1))  # JSON is YAML
    return path


def stage_records(stage_dir: Path) -> int | None:
    """The input records of a stage from its stats.json (summed over sub-folders' where the
    stage writes one per language or pair); mine: the sentences of both sides."""
    files = [stage_dir / "stats.json"] if (stage_dir / "stats.json").is_file() else []
    files = files or sorted(stage_dir.glob("*/stats.json"))
    total = None
    for f in files:
        counts = json.loads(f.read_text()).get("counts", {})
        if "src_sentences" in counts:
            n = counts["src_sentences"]["in"] + counts["trg_sentences"]["in"]
        else:
            kind = next((k for k in RECORDS if k in counts), next(iter(counts), None))
            if kind is None:
                continue
            n = counts[kind]["in"]
        total = (total or 0) + n
    return total


def measure_rung(x: int, inp: Path, out: Path, cfg: Path, sets: list[str]) -> dict:
    if out.exists():
        shutil.rmtree(out)
    load0 = os.getloadavg()[0]
    cmd = [sys.executable, "-m", "pipelines.run", "--config", str(cfg), "--data", str(inp)]
    cmd += ["--output", str(out), *[a for s in sets for a in ("--set", s)]]
    # A rung that stops at a stage (e.g. combine refusing a sample with no GOOD label) keeps the
    # measurements of every stage that finished: hours of work are not thrown away.
    m = run_measured(cmd, allow_fail=True)
    if m["returncode"]:
        last = m["stderr_tail"].strip().splitlines()[-1:] or [""]
        log.warning("%dx: the runner stopped (exit %d): %s", x, m["returncode"], last[0])
    stages = read_stages(out)
    crawl = next(s["records"] for s in stages if s["stage"] == "commoncrawl")
    return {
        "x": x,
        "crawl_sentences": crawl,
        "seconds": m["seconds"],
        "cpu_seconds": sum(s["cpu_seconds"] or 0 for s in stages),
        "peak_rss_mb": m["peak_rss"] / MB,
        "disk_mb": dir_bytes(out) / MB,
        "load_before": load0,
        "load_after": os.getloadavg()[0],
        "stages": stages,
        "exit_status": m["returncode"],
    }


def read_stages(out: Path) -> list[dict]:
    """Each finished stage of the run folder ``out`` in the order it finished: its manifest's
    seconds, CPU seconds and peak RSS, its records in and its folder's size."""
    stages = []
    for man in sorted((out / "_state").glob("*.manifest.json"), key=lambda p: p.stat().st_mtime):
        d = json.loads(man.read_text())
        stages.append(
            {
                "stage": d["stage"],
                "records": stage_records(out / d["stage"]),
                "seconds": d.get("seconds"),
                "cpu_seconds": d.get("cpu_seconds"),
                "peak_rss_mb": d.get("peak_rss_mb"),
                "disk_mb": dir_bytes(out / d["stage"]) / MB,
            }
        )
    return stages


def per_k(seconds: float | None, records: int | None) -> float | None:
    return None if seconds is None or not records else 1000 * seconds / records


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a is not None and b else "-"


def marginal(r: dict, p: dict | None, n: int | None, pn: int | None) -> float | None:
    """Seconds per 1,000 records added since the previous rung ``p``: the per-record cost
    without the fixed start-up that dominates a small rung."""
    if p is None or not n or not pn or n <= pn or r["seconds"] is None or p["seconds"] is None:
        return None
    return 1000 * (r["seconds"] - p["seconds"]) / (n - pn)


def _row(name: str, x: int, r: dict, b: dict, n: int, bn: int, d: float | None) -> str:
    k, bk = per_k(r["seconds"], n), per_k(b["seconds"], bn)
    c, bc = per_k(r.get("cpu_seconds"), n), per_k(b.get("cpu_seconds"), bn)
    fmt = lambda v: f"{v:>9.3f}" if v is not None else f"{'-':>9}"  # noqa: E731
    return (
        f"{name:<15}{x:>5}{n or 0:>12,}{r['seconds'] or 0:>9.1f}{fmt(k)}{fmt(c)}"
        f"{r['peak_rss_mb'] or 0:>10,.0f}{r['disk_mb']:>10.1f}{_ratio(k, bk):>8}"
        f"{_ratio(c, bc):>8}{_ratio(r['peak_rss_mb'], b['peak_rss_mb']):>8}{fmt(d)}"
    )


def table(rungs: list[dict]) -> str:
    """Per stage: each rung's records, wall and CPU seconds per 1,000 records, peak RSS, disk,
    the ratios to the first rung (the peer) and the marginal seconds per 1,000 records since the
    rung before; then the whole run per 1,000 crawl sentences."""
    head = (
        f"{'stage':<15}{'x':>5}{'records in':>12}{'s':>9}{'s/1k':>9}{'cpu/1k':>9}"
        f"{'peak MiB':>10}{'disk MiB':>10}{'s/1k':>8}{'cpu/1k':>8}{'peak':>8}{'Δs/1k':>9}"
    )
    lines = [head]
    base = {s["stage"]: s for s in rungs[0]["stages"]}
    for name, b in base.items():
        prev = None
        for r in rungs:
            s = next((t for t in r["stages"] if t["stage"] == name), None)
            if s is not None:
                d = marginal(s, prev, s["records"], prev and prev["records"])
                lines.append(_row(name, r["x"], s, b, s["records"], b["records"], d))
                prev = s
    b, prev = rungs[0], None
    for r in rungs:
        n = r["crawl_sentences"]
        d = marginal(r, prev, n, prev and prev["crawl_sentences"])
        lines.append(
            _row("WHOLE RUN", r["x"], r, b, n, b["crawl_sentences"], d)
            + f"   load {r['load_before']:.1f} -> {r['load_after']:.1f}"
            + (f"   STOPPED (exit {r['exit_status']})" if r.get("exit_status") else "")
        )
        prev = r
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rungs", default="1,10,100", help="multiples of the demo's crawl (1,10,100)")
    ap.add_argument("--work", type=Path, default=REPO / "bench_out" / "run_scale")
    ap.add_argument("--keep", action="store_true", help="keep each rung's run folder")
    ap.add_argument("--data", type=Path, default=DATA, help="../shared/data (the demo's task)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hidden", type=int, default=64, help="encoder width (64; the demo's: 128)")
    ap.add_argument("--layers", type=int, default=2, help="encoder layers (2; the demo's: 4)")
    ap.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="runner override"
    )
    ap.add_argument("--json", type=Path, help="also write the measurements here")
    ap.add_argument("--table", type=Path, help="only print the table of an earlier --json")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if a.table:
        print(table(json.loads(a.table.read_text())))
        return 0
    try:
        rungs = sorted({int(r) for r in a.rungs.split(",")})
    except ValueError:
        rungs = []
    if not rungs or rungs[0] < 1:
        print(f"--rungs {a.rungs}: positive integers, comma-separated", file=sys.stderr)
        return 2
    a.work.mkdir(parents=True, exist_ok=True)
    inputs = prepare(a.work, a.data, rungs, a.seed, (a.hidden, a.layers))
    cfg = run_config(a.work, a.work / f"encoder-{a.hidden}x{a.layers}")
    done = []
    for x in rungs:
        out = a.work / f"run-{x}x"
        sets = [*BENCH_SETS, f"combine.sample_size={SAMPLE * x}", *a.set]
        done.append(measure_rung(x, inputs[x], out, cfg, sets))
        log.info("%dx: %.0f s, peak %.0f MiB", x, done[-1]["seconds"], done[-1]["peak_rss_mb"])
        if a.json:
            a.json.write_text(json.dumps(done, indent=1))
        if not a.keep:
            shutil.rmtree(out)
    print(table(done))
    return 0


if __name__ == "__main__":
    sys.exit(main())
