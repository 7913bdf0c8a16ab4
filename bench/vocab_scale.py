"""Vocabulary at the paper's size: 501,153 wordpieces from 10M sentences, against tokenizers.

    .venv/bin/python bench/vocab_scale.py [--workdir bench_out/vocab_scale] [--sentences 10000000]
        [--small 1000000] [--repo DIR] [--json PATH] [--skip-tokenizers] [--seed 0]
        [--min-count C] [-- EXTRA JOB FLAGS...]

Input: DISTINCT multilingual sentences written as ``WORKDIR/sentences/<lang>/part-*.parquet``
(zstd, a ``text`` column, several files per language), generated once and reused. Sentences
come from bench/scale_corpus.py's generator (first half of one real UD/PUD/Tatoeba sentence +
second half of another of the same language, 17 languages). That generator alone repeats the
pools' ~170k word types, and no learner can make 501,153 pieces out of them (the largest
vocabulary our learner reaches on them, at threshold 1, is 173k), while real text keeps
adding words (names, numbers, compounds, typos) as it grows. So, in the space-separated
languages, each alphabetic word is replaced with probability ``--novel-rate`` by a novel word:
the first half of one pool word + the second half of another (real letters and morphemes),
chosen by a Zipf(``--novel-zipf``) rank over the pool's squared word count, so word types grow
with the corpus as in real text (Heaps' law) with a frequent head and a long tail of hapaxes.
Language sizes are Zipfian (``--lang-skew``; English first, about a third of all sentences),
so alpha 0.3 smoothing matters. The smaller rung is a prefix of the same input (the first
files of every language, same mix), linked as ``WORKDIR/rungs/<N>/<lang>/``.

Systems, each in its own child process, timed from start to exit, with peak memory the peak
of the summed RSS of its process tree (bench/scale_corpus.py's ``_tree_rss``, sampled every
0.2 s):

* ours: the whole job, ``python -m pipelines.vocab --config paper --vocab-size 501153
  --set min_count=C`` (Beam counting on the local runner, alpha 0.3 smoothing, min-count,
  then our learner), run in ``--repo``; ``vocab.txt`` must have exactly 501,153 lines. The
  peak is also split at the learner's start (found from the job's log) into counting and
  learning; the RSS trace is kept as ``WORKDIR/ours-<N>.trace.json``.
* ours-memshuffle (``--shuffle-peer``): the same job with ``--set shuffle=memory``, the word
  counts through Beam's shuffle, which the local runner holds in RAM (what the job did before
  its file shuffle): the counting phase's time and peak of both, and whether both wrote the
  same ``word_counts.parquet`` (md5).
* tokenizers: ``WordPieceTrainer(vocab_size=501153)`` with the same reserved tokens, the same
  BERT normaliser and ``BertPreTokenizer``, ``limit_alphabet`` = the paper's alphabet budget,
  trained with ``train_from_iterator`` over the same Parquet files. It does no language
  smoothing (it learns from raw counts) and has no min-count (min_frequency 0).

Printed: rung, system, seconds, microseconds per sentence, peak RSS, vocabulary size, the
ratios ours/tokenizers per rung and big/small per system, and the held-out wordpieces per word
and unknown rate of both vocabularies on generated sentences that neither saw.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import random
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from scale_corpus import (  # noqa: E402
    _NO_SPACE,
    DATA,
    MB,
    SentenceMaker,
    _tree_rss,
    dir_bytes,
    load_pools,
)

log = logging.getLogger("vocab_scale")
PAPER_VOCAB = 501_153
#: Our job with vocab.shuffle=memory: the counts through Beam's shuffle, held in RAM locally.
MEM_PEER = "ours-memshuffle"
# The paper preset's alphabet budget (configs/paper.yaml vocab.learner.max_unique_chars); the
# peer gets the same, so neither learner is starved of characters the other keeps.
ALPHABET = 30_000
RESERVED = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")  # labse_model.vocab.learner's
# A large prime: rank r of the novel-word Zipf maps to (r * P) mod n^2, a bijection on the
# n^2 (head, tail) pairs when gcd(P, n) = 1 (any n < P), which scatters neighbouring ranks.
_P = 1_000_003
_WORD = re.compile(r"^\w+$")


# --- input ---------------------------------------------------------------------------------


class NovelWords:
    """Novel words of one language: head of one pool word + tail of another, Zipf-ranked."""

    def __init__(self, words: list[str], zipf: float, rng: np.random.Generator) -> None:
        self.heads = [w[: max(1, len(w) // 2)] for w in words]
        self.tails = [w[len(w) // 2 :] for w in words]
        self.n = len(words)
        self.zipf = zipf
        self.rng = rng
        self.buf: list[int] = []

    def draw(self) -> str:
        if not self.buf:  # numpy draws in batches: a per-word numpy call would dominate
            r = self.rng.zipf(self.zipf, 65_536)
            r = r[r <= self.n * self.n] - 1
            self.buf = ((r * _P) % (self.n * self.n)).tolist()
        idx = self.buf.pop()
        return self.heads[idx // self.n] + self.tails[idx % self.n]


class LangStream:
    """The deterministic sentence stream of one language (same seed -> same sentences)."""

    def __init__(
        self,
        maker: SentenceMaker,
        pools: dict[str, list[str]],
        lang: str,
        seed: int,
        novel_rate: float,
        novel_zipf: float,
    ) -> None:
        self.maker, self.lang = maker, lang
        # Own random streams per language: a language's sentences do not depend on the others'
        # sizes, so rungs and reruns with another mix keep the same text.
        maker.rng = random.Random(f"{seed}-{lang}")
        self.rnd = random.Random(f"{seed}-{lang}-novel").random
        self.rate = novel_rate if lang not in _NO_SPACE else 0.0
        words = sorted({w for s in pools[lang] for w in s.split() if _WORD.match(w) and len(w) > 1})
        self.novel = NovelWords(words, novel_zipf, np.random.default_rng([seed, len(words)]))
        self.seen: set[int] = set()  # hashes of the sentences written: distinct by construction

    def _one(self) -> str:
        s = self.maker.sentence(self.lang)
        if not self.rate:
            return s
        toks = s.split(" ")
        for i, t in enumerate(toks):
            if self.rnd() < self.rate and t.isalpha():
                toks[i] = self.novel.draw()
        return " ".join(toks)

    def take(self, n: int) -> list[str]:
        out: list[str] = []
        while len(out) < n:
            s = self._one()
            h = hash(s)
            if h not in self.seen:
                self.seen.add(h)
                out.append(s)
        return out


def lang_order(pools: dict[str, list[str]]) -> list[str]:
    """English first (the largest, as in web data), then by pool size: big pools get big shares,
    so no language is asked for far more distinct sentences than its pool can give."""
    return ["eng"] + sorted((k for k in pools if k != "eng"), key=lambda k: (-len(pools[k]), k))


def lang_counts(langs: list[str], n: int, skew: float) -> dict[str, int]:
    """Sentences per language for a rung of n: Zipfian shares, largest remainder rounding."""
    w = np.array([1.0 / (i + 1) ** skew for i in range(len(langs))])
    exact = w / w.sum() * n
    base = np.floor(exact).astype(int)
    for i in np.argsort(-(exact - base))[: n - int(base.sum())]:
        base[i] += 1
    return dict(zip(langs, base.tolist()))


def _splits(n: int, rows_per_file: int) -> list[int]:
    """Rows per file for n rows: at least 2 files (several files per language), near-equal."""
    k = max(2, math.ceil(n / rows_per_file)) if n >= 2 else 1
    return [n // k + (1 if i < n % k else 0) for i in range(k)]


def generate(
    work: Path, pools: dict[str, list[str]], rungs: list[int], a: argparse.Namespace
) -> dict[str, Any]:
    """Write the input (reused when its parameters match) and link one prefix folder per rung."""
    langs = lang_order(pools)
    sent_dir, meta_f = work / "sentences", work / "sentences" / "_meta.json"
    params = {
        "rungs": rungs,
        "seed": a.seed,
        "novel_rate": a.novel_rate,
        "novel_zipf": a.novel_zipf,
        "lang_skew": a.lang_skew,
        "rows_per_file": a.rows_per_file,
        "langs": langs,
    }
    if meta_f.exists() and json.loads(meta_f.read_text())["params"] == params:
        meta = json.loads(meta_f.read_text())
        log.info("reusing the input in %s (%d sentences)", sent_dir, meta["sentences"])
    else:
        shutil.rmtree(sent_dir, ignore_errors=True)
        t0 = time.perf_counter()
        per_rung = {r: lang_counts(langs, r, a.lang_skew) for r in rungs}
        maker = SentenceMaker(pools, a.seed)
        files: dict[str, list[dict]] = {}
        for lang in langs:
            stream = LangStream(maker, pools, lang, a.seed, a.novel_rate, a.novel_zipf)
            (sent_dir / lang).mkdir(parents=True)
            files[lang], done = [], 0
            # File boundaries at every rung's count, so each rung is whole files.
            for r in rungs:
                for rows in _splits(per_rung[r][lang] - done, a.rows_per_file):
                    if rows == 0:
                        continue
                    f = sent_dir / lang / f"part-{len(files[lang]):05d}.parquet"
                    table = pa.table({"text": pa.array(stream.take(rows), pa.string())})
                    pq.write_table(table, f, compression="zstd")
                    done += rows
                    files[lang].append({"name": f.name, "rows": rows, "upto": done})
            log.info("%s: %d sentences, %d files", lang, done, len(files[lang]))
        meta = {
            "params": params,
            "per_rung": {str(r): c for r, c in per_rung.items()},
            "files": files,
            "sentences": max(rungs),
            "bytes": dir_bytes(sent_dir),
            "seconds": time.perf_counter() - t0,
        }
        meta_f.write_text(json.dumps(meta))
        log.info(
            "input written in %.0f s: %d sentences, %.0f MiB of Parquet",
            meta["seconds"],
            meta["sentences"],
            meta["bytes"] / MB,
        )
    rung_dirs = {}
    for r in rungs:
        if r == max(rungs):
            rung_dirs[r] = sent_dir
            continue
        d = work / "rungs" / str(r)
        shutil.rmtree(d, ignore_errors=True)
        for lang, fl in meta["files"].items():
            (d / lang).mkdir(parents=True)
            for f in fl:
                if f["upto"] <= meta["per_rung"][str(r)][lang]:
                    (d / lang / f["name"]).symlink_to(sent_dir / lang / f["name"])
        rung_dirs[r] = d
    meta["dirs"] = {str(r): str(d) for r, d in rung_dirs.items()}
    return meta


def heldout_sentences(
    pools: dict[str, list[str]], n: int, a: argparse.Namespace
) -> dict[str, list[str]]:
    """Sentences neither system trained on: the same generator under another seed."""
    maker = SentenceMaker(pools, a.seed + 7919)
    return {
        lang: LangStream(maker, pools, lang, a.seed + 7919, a.novel_rate, a.novel_zipf).take(n)
        for lang in lang_order(pools)
    }


def iter_texts(input_dir: Path) -> Iterator[list[str]]:
    """Batches of sentences from every ``<lang>/*.parquet`` under input_dir (symlinks too)."""
    for f in sorted(input_dir.glob("*/*.parquet")):
        for batch in pq.ParquetFile(f).iter_batches(batch_size=8192, columns=["text"]):
            yield batch.column(0).to_pylist()


# --- measuring -----------------------------------------------------------------------------


def run_traced(cmd: list[str], cwd: Path) -> dict[str, Any]:
    """scale_corpus.run_measured, with a chosen cwd (``-m pipelines.vocab`` must resolve in
    ``--repo``; run_measured always runs in its own repo) and a trace: every stderr line and
    the tree RSS with their times, so the peak can be placed in a phase of the job."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace"
    )
    ps, lines, trace = psutil.Process(proc.pid), [], []

    def read() -> None:
        for ln in proc.stderr:
            lines.append((time.perf_counter() - t0, ln.rstrip("\n")))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    while proc.poll() is None:
        trace.append((time.perf_counter() - t0, *_tree_rss(ps)))  # (t, tree sum, largest)
        time.sleep(0.2)
    reader.join()
    dt = time.perf_counter() - t0
    if proc.returncode:
        tail = "\n".join(ln for _, ln in lines[-60:])
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{tail}")
    return {
        "seconds": dt,
        "peak_rss": max((r for _, r, _ in trace), default=0),
        "peak_proc_rss": max((r for _, _, r in trace), default=0),
        "trace": trace,
        "stderr": lines,
    }


def _peak_between(trace: list[tuple[float, int, int]], t0: float, t1: float) -> int:
    """Peak of the tree's summed RSS between two times of the trace."""
    return max((r for t, r, _ in trace if t0 <= t <= t1), default=0)


def run_ours(
    inp: Path, out: Path, n: int, a: argparse.Namespace, sets: tuple[str, ...] = ()
) -> dict[str, Any]:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [
        sys.executable,
        "-m",
        "pipelines.vocab",
        "--input",
        str(inp),
        "--output",
        str(out),
        "--config",
        "paper",
        "--vocab-size",
        str(PAPER_VOCAB),
        "--smoothing",
        "0.3",
        "--log-level",
        "INFO",
    ]
    if a.min_count is not None:
        cmd += ["--set", f"min_count={a.min_count}"]
    for kv in sets:
        cmd += ["--set", kv]
    cmd += a.extra
    log.info("ours, %d sentences: %s", n, " ".join(cmd))
    m = run_traced(cmd, a.repo)
    vocab = (out / "vocab.txt").read_text(encoding="utf-8").split("\n")
    vocab = vocab[:-1] if vocab and vocab[-1] == "" else vocab
    stats = json.loads((out / "vocab_stats.json").read_text())
    job_counts = json.loads((out / "stats.json").read_text())["counts"]
    # Phases from the job's own log: the learner logs "trie built in X s" once its trie is
    # built, so the learner began X s before that line; everything before is Beam counting.
    learn_start = None
    for t, ln in m["stderr"]:
        hit = re.search(r"learner: .*trie built in ([\d.]+)s", ln)
        if hit:
            learn_start = t - float(hit.group(1))
            break
    phases = {}
    if learn_start is not None:
        phases = {
            "count_seconds": learn_start,
            "count_peak_rss": _peak_between(m["trace"], 0, learn_start),
            "learn_peak_rss": _peak_between(m["trace"], learn_start, m["seconds"]),
        }
    (out.parent / f"{out.name}.trace.json").write_text(
        json.dumps({"rss": m["trace"], "stderr": m["stderr"][-400:]})
    )
    langs = json.loads((out / "languages.json").read_text())
    # How many word types each min_count would have kept: word_counts.parquet holds the
    # smoothed count of every type at or above the one used.
    smoothed = pq.read_table(out / "word_counts.parquet", columns=["count"]).column(0).to_numpy()
    at_min = {c: int((smoothed >= c).sum()) for c in (1, 2, 3, 5, 10)}
    return {
        "seconds": m["seconds"],
        "peak_rss": m["peak_rss"],
        "peak_proc_rss": m["peak_proc_rss"],
        "vocab_size": len(vocab),
        "disk_written": dir_bytes(out),
        "learn_seconds": stats.get("learn_seconds"),
        "threshold": stats.get("threshold"),
        "job_counts": job_counts,
        "threshold_search": stats.get("threshold_search"),
        "min_count": a.min_count if a.min_count is not None else "paper preset",
        "languages": langs,
        "types_at_min_count": at_min,
        **phases,
        "vocab_file": str(out / "vocab.txt"),
        "counts_md5": hashlib.md5((out / "word_counts.parquet").read_bytes()).hexdigest(),
    }


def worker_tokenizers(inp: Path, out: Path) -> None:
    """The peer, in this (child) process: WordPieceTrainer over the same Parquet files."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    # The same cased BERT rules as ours (labse_model/vocab/pretokenize.py mirrors these).
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=False, lowercase=False
    )
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=PAPER_VOCAB,
        special_tokens=list(RESERVED),
        limit_alphabet=ALPHABET,
        show_progress=False,
    )
    t0 = time.perf_counter()
    tok.train_from_iterator(iter_texts(inp), trainer=trainer)
    secs = time.perf_counter() - t0
    v = tok.get_vocab()
    out.mkdir(parents=True, exist_ok=True)
    (out / "vocab.txt").write_text("".join(t + "\n" for t in sorted(v, key=v.get)), "utf-8")
    (out / "result.json").write_text(json.dumps({"train_seconds": secs}))


def run_tokenizers(inp: Path, out: Path, n: int) -> dict[str, Any]:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker-tokenizers",
        str(inp),
        "--worker-out",
        str(out),
    ]
    log.info("tokenizers, %d sentences", n)
    m = run_traced(cmd, REPO)
    vocab = (out / "vocab.txt").read_text(encoding="utf-8").splitlines()
    res = json.loads((out / "result.json").read_text())
    return {
        "seconds": m["seconds"],
        "peak_rss": m["peak_rss"],
        "vocab_size": len(vocab),
        "disk_written": dir_bytes(out),
        "train_seconds": res["train_seconds"],
        "vocab_file": str(out / "vocab.txt"),
    }


def quality(vocab_file: str, heldout: dict[str, list[str]]) -> dict[str, Any]:
    """vocab_bench's quality(): the vocabulary in the same BERT WordPiece tokenizer."""
    from labse_model.vocab.evaluate import coverage
    from labse_model.vocab.export import build_tokenizer

    vocab = Path(vocab_file).read_text(encoding="utf-8").split("\n")
    tok = build_tokenizer([t for t in vocab if t])
    per = {lang: coverage(tok, s) for lang, s in heldout.items()}
    mean = {
        k: float(np.mean([p[k] for p in per.values()])) for k in ("wordpieces_per_word", "unk_rate")
    }
    return {"mean": mean, "per_lang": per}


# --- report --------------------------------------------------------------------------------


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"{'rung':>11}  {'system':<16}{'seconds':>9}{'us/sent':>9}{'peak RSS MiB':>14}"
        f"{'vocab':>9}{'disk MiB':>10}{'wp/word':>9}{'unk':>8}"
    ]
    for r in rows:
        q = r.get("quality", {}).get("mean", {})
        wpw, unk = q.get("wordpieces_per_word"), q.get("unk_rate")
        lines.append(
            f"{r['sentences']:>11,}  {r['system']:<16}{r['seconds']:>9.1f}"
            f"{r['us_per_sentence']:>9.1f}{r['peak_rss'] / MB:>14,.0f}{r['vocab_size']:>9,}"
            f"{r['disk_written'] / MB:>10.1f}{'-' if wpw is None else f'{wpw:.3f}':>9}"
            f"{'-' if unk is None else f'{unk:.4f}':>8}"
        )
    return "\n".join(lines)


def ratios(rows: list[dict[str, Any]], small: int, big: int) -> dict[str, Any]:
    by = {(r["system"], r["sentences"]): r for r in rows}
    out: dict[str, Any] = {
        "ours_over_tokenizers": {},
        "big_over_small": {},
        "files_over_memory": {},
    }
    for n in (small, big):
        o, t, m = by.get(("ours", n)), by.get(("tokenizers", n)), by.get((MEM_PEER, n))
        if o and t:
            out["ours_over_tokenizers"][n] = {
                "time": o["seconds"] / t["seconds"],
                "peak_rss": o["peak_rss"] / t["peak_rss"],
            }
        if o and m and "count_seconds" in o and "count_seconds" in m:
            out["files_over_memory"][n] = {
                "count_seconds": o["count_seconds"] / m["count_seconds"],
                "count_peak_rss": o["count_peak_rss"] / m["count_peak_rss"],
                "same_counts": o["counts_md5"] == m["counts_md5"],
            }
    for sysname in ("ours", "tokenizers", MEM_PEER):
        s, b = by.get((sysname, small)), by.get((sysname, big))
        if s and b:
            out["big_over_small"][sysname] = {
                "seconds": b["seconds"] / s["seconds"],
                "us_per_sentence": b["us_per_sentence"] / s["us_per_sentence"],
                "peak_rss": b["peak_rss"] / s["peak_rss"],
            }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--workdir",
        type=Path,
        default=REPO / "bench_out" / "vocab_scale",
        help="generated input (reused), job outputs, traces (default: %(default)s)",
    )
    ap.add_argument(
        "--sentences",
        type=int,
        default=10_000_000,
        help="sentences of the big rung, the whole generated input (default: %(default)s)",
    )
    ap.add_argument(
        "--small",
        type=int,
        default=1_000_000,
        help="sentences of the small rung, a prefix of the same input; 0 = no small "
        "rung (default: %(default)s)",
    )
    ap.add_argument(
        "--repo",
        type=Path,
        default=REPO,
        help="checkout whose `python -m pipelines.vocab` is measured, e.g. a git "
        "worktree of the committed code (default: this script's repo)",
    )
    ap.add_argument("--json", type=Path, help="also write every figure here")
    ap.add_argument(
        "--skip-tokenizers",
        action="store_true",
        help="measure ours only (no HuggingFace tokenizers peer)",
    )
    ap.add_argument("--skip-ours", action="store_true", help="measure the peer only")
    ap.add_argument(
        "--shuffle-peer",
        action="store_true",
        help="also run our job with vocab.shuffle=memory (Beam's shuffle, which the "
        "local runner holds in RAM) as system 'ours-memshuffle', against ours "
        "with the default file shuffle",
    )
    ap.add_argument("--seed", type=int, default=0, help="seed of the generated sentences")
    ap.add_argument(
        "--min-count",
        type=float,
        default=1.0,
        help="our job's vocab.min_count (passed as --set min_count=C; default: "
        "%(default)s). The paper preset's 10 is meant for billions of "
        "sentences: here it leaves too few word types for 501,153 pieces "
        "(the JSON's types_at_min_count shows how many each value keeps)",
    )
    ap.add_argument(
        "--novel-rate",
        type=float,
        default=0.3,
        help="share of alphabetic words replaced by novel words in space-separated "
        "languages (default: %(default)s)",
    )
    ap.add_argument(
        "--novel-zipf",
        type=float,
        default=1.05,
        help="Zipf exponent of the novel words' ranks (default: %(default)s)",
    )
    ap.add_argument(
        "--lang-skew",
        type=float,
        default=1.2,
        help="language i (English first) gets a share ~ 1/i**skew (default: %(default)s)",
    )
    ap.add_argument(
        "--rows-per-file",
        type=int,
        default=250_000,
        help="at most this many sentences per Parquet file (default: %(default)s)",
    )
    ap.add_argument(
        "--heldout",
        type=int,
        default=200,
        help="held-out sentences per language for wordpieces/word; 0 = skip (default: %(default)s)",
    )
    ap.add_argument("--data", type=Path, default=DATA, help="../shared/data (ud/, pud/, tatoeba/)")
    ap.add_argument(
        "extra", nargs="*", help="after --: flags passed to our job (e.g. Beam options)"
    )
    ap.add_argument("--worker-tokenizers", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker_tokenizers:
        worker_tokenizers(a.worker_tokenizers, a.worker_out)
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    a.repo = a.repo.resolve()
    t_all = time.perf_counter()
    pools = load_pools(a.data)
    rungs = sorted({a.sentences, *([a.small] if a.small else [])})
    meta = generate(a.workdir, pools, rungs, a)
    held = heldout_sentences(pools, a.heldout, a) if a.heldout else {}
    rows: list[dict[str, Any]] = []
    for n in rungs:
        inp = Path(meta["dirs"][str(n)])
        systems = ([] if a.skip_ours else ["ours"]) + ([] if a.skip_tokenizers else ["tokenizers"])
        systems += [MEM_PEER] if a.shuffle_peer else []
        for sysname in systems:
            out = a.workdir / f"{sysname}-{n}"
            if sysname == "tokenizers":
                r = run_tokenizers(inp, out, n)
            else:
                r = run_ours(inp, out, n, a, ("shuffle=memory",) if sysname == MEM_PEER else ())
            r.update(system=sysname, sentences=n, us_per_sentence=1e6 * r["seconds"] / n)
            if sysname != "tokenizers" and r["vocab_size"] != PAPER_VOCAB:
                log.error("ours: vocab.txt has %d lines, not %d", r["vocab_size"], PAPER_VOCAB)
            if held:
                r["quality"] = quality(r["vocab_file"], held)
            log.info(
                "%s %d: %.1f s, peak %.0f MiB, vocab %d",
                sysname,
                n,
                r["seconds"],
                r["peak_rss"] / MB,
                r["vocab_size"],
            )
            rows.append(r)
            if a.json:  # written after every run: a long run killed midway keeps its figures
                a.json.write_text(json.dumps({"rows": rows}, indent=1, default=str))
    rat = ratios(rows, rungs[0], rungs[-1])
    print(table(rows))
    for n, v in rat["ours_over_tokenizers"].items():
        print(f"ours/tokenizers at {n:,}: time {v['time']:.2f}, peak RSS {v['peak_rss']:.2f}")
    for s, v in rat["big_over_small"].items():
        print(
            f"{s} {rungs[-1]:,}/{rungs[0]:,}: seconds {v['seconds']:.2f}, us/sentence "
            f"{v['us_per_sentence']:.2f}, peak RSS {v['peak_rss']:.2f}"
        )
    for n, v in rat["files_over_memory"].items():
        print(
            f"ours file shuffle / Beam's in-memory shuffle at {n:,}: counting time "
            f"{v['count_seconds']:.2f}, counting peak RSS {v['count_peak_rss']:.2f}, same "
            f"word_counts.parquet: {v['same_counts']}"
        )
    for r in rows:
        if r["system"] != "tokenizers" and "count_seconds" in r:
            print(
                f"{r['system']} {r['sentences']:,}: counting {r['count_seconds']:.0f} s (peak "
                f"{r['count_peak_rss'] / MB:,.0f} MiB), learner {r['learn_seconds']:.0f} s, "
                f"learner+export+eval peak {r['learn_peak_rss'] / MB:,.0f} MiB, learner word "
                f"types in {r['job_counts']['word_types']['in']:,}, "
                f"threshold {r['threshold']:.3g}"
            )
    total = time.perf_counter() - t_all
    print(
        f"input {meta['sentences']:,} sentences ({meta['bytes'] / MB:,.0f} MiB Parquet, "
        f"generated in {meta['seconds']:.0f} s); whole run {total:.0f} s"
    )
    if a.json:
        a.json.write_text(
            json.dumps(
                {"rows": rows, "ratios": rat, "input": meta, "total_seconds": total},
                indent=1,
                default=str,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
