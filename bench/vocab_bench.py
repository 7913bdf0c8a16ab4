"""Benchmark: our wordpiece learner vs tokenizers' WordPieceTrainer, same smoothed counts.

    python bench/vocab_bench.py [--types 1000000] [--sizes 32000,200000] [--alpha 0.3]

Input: 17 languages of word types. Real text at this scale is not in ../shared/data, so the
word types are drawn from per-language character trigram models fitted on the Tatoeba sample
(real scripts and spelling statistics), with Zipfian frequencies and Zipfian language sizes
(English largest). The per-language counts are smoothed with alpha, and both learners get the
same smoothed counts: ours directly, tokenizers as text in which each word is repeated
round(count * scale) times (at least once), scale putting about ``--fed-words`` words through
it. Each learner runs in its own process, so peak memory (ru_maxrss) is its own; the reported
time for tokenizers includes its word counting, which ours does not need.

Quality: both vocabularies are put in the same BERT WordPiece tokenizer and measured on
held-out sentences drawn from the same models: unknown rate and wordpieces per word.
A second comparison runs on the real Tatoeba sample (train -> dev) at a small size.
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from labse_common.logs import setup_logging  # noqa: E402
from labse_common.sections.vocab import LearnerConfig  # noqa: E402
from labse_model.vocab.evaluate import coverage  # noqa: E402
from labse_model.vocab.export import build_tokenizer  # noqa: E402
from labse_model.vocab.learner import RESERVED_TOKENS, LearnerParams, learn_vocab  # noqa: E402
from labse_model.vocab.pretokenize import is_bert_punctuation, split_words  # noqa: E402
from labse_model.vocab.smoothing import smooth_counts  # noqa: E402

log = logging.getLogger("vocab_bench")
TATOEBA = Path(__file__).resolve().parents[2] / "shared" / "data" / "tatoeba"
SMALL = ("hin", "ell", "kor", "tur", "ara")
END = "\x00"


def _tatoeba(split: str) -> dict[str, list[str]]:
    if not TATOEBA.is_dir():
        sys.exit(f"Tatoeba sample not found at {TATOEBA}")
    out: dict[str, list[str]] = {}
    for f in sorted(TATOEBA.glob(f"{split}.*-eng.*")):
        out.setdefault(f.suffix[1:], []).extend(f.read_text("utf-8").splitlines())
    return out


class TrigramWords:
    """Character trigram model of one language's words, sampled vectorised with numpy."""

    def __init__(self, words: list[str], rng: np.random.Generator) -> None:
        self.rng = rng
        trans: Counter[tuple[str, str, str]] = Counter()
        for w in words:
            s = END + END + w + END
            for i in range(2, len(s)):
                trans[(s[i - 2], s[i - 1], s[i])] += 1
        ctxs = sorted({(a, b) for a, b, _ in trans})
        self.ctx_index = {c: i for i, c in enumerate(ctxs)}
        self.chars = sorted({c for _, _, c in trans})
        char_index = {c: i for i, c in enumerate(self.chars)}
        rows: dict[int, list[tuple[int, int]]] = {}
        for (a, b, c), n in trans.items():
            rows.setdefault(self.ctx_index[(a, b)], []).append((char_index[c], n))
        # Global increasing CDF: context k occupies (k, k+1]; sampling is one searchsorted.
        cdf, nxt = [], []
        for k in range(len(ctxs)):
            r = rows[k]
            tot = sum(n for _, n in r)
            acc = 0
            for c, n in r:
                acc += n
                cdf.append(k + acc / tot)
                nxt.append(c)
        self.cdf = np.array(cdf)
        self.cdf[np.searchsorted(self.cdf, np.arange(1, len(ctxs) + 1) - 1e-12)] = np.arange(
            1, len(ctxs) + 1
        )  # exact upper ends, so floating error never spills into the next context
        self.nxt = np.array(nxt)
        self.end_id = char_index[END]
        # (ctx, next char) -> next ctx
        keys, vals = [], []
        for (_a, b), i in self.ctx_index.items():
            for c in self.chars:
                if (b, c) in self.ctx_index:
                    keys.append(i * len(self.chars) + char_index[c])
                    vals.append(self.ctx_index[(b, c)])
        order = np.argsort(keys)
        self.t_keys = np.array(keys)[order]
        self.t_vals = np.array(vals)[order]

    def sample(self, n: int, max_len: int = 30) -> list[str]:
        ctx = np.full(n, self.ctx_index[(END, END)])
        out = np.full((n, max_len), -1)
        alive = np.ones(n, dtype=bool)
        for t in range(max_len):
            idx = np.flatnonzero(alive)
            if not idx.size:
                break
            u = self.rng.random(idx.size) * (1 - 1e-9)
            c = self.nxt[np.searchsorted(self.cdf, ctx[idx] + u, side="right")]
            stop = c == self.end_id
            out[idx[~stop], t] = c[~stop]
            alive[idx[stop]] = False
            go = idx[~stop]
            key = ctx[go] * len(self.chars) + c[~stop]
            pos = np.searchsorted(self.t_keys, key)
            ok = (pos < len(self.t_keys)) & (
                self.t_keys[np.minimum(pos, len(self.t_keys) - 1)] == key
            )
            ctx[go[ok]] = self.t_vals[pos[ok]]
            alive[go[~ok]] = False
        chars = np.array(self.chars)
        return ["".join(chars[row[row >= 0]]) for row in out]


def synthetic_counts(
    n_types: int, seed: int = 0
) -> tuple[dict[str, Counter], dict[str, list[str]]]:
    """Per-language word counts plus held-out sentences (lists of sampled words)."""
    rng = np.random.default_rng(seed)
    train = _tatoeba("train")
    langs = ["eng"] + sorted(k for k in train if k != "eng")
    size = 1.0 / np.arange(1, len(langs) + 1) ** 1.0  # Zipfian language sizes
    types_per_lang = np.maximum(1000, (size / size.sum() * n_types).astype(int))
    counts: dict[str, Counter] = {}
    heldout: dict[str, list[str]] = {}
    for lang, n in zip(langs, types_per_lang):
        words = [w for s in train[lang] for w in split_words(s) if not is_bert_punctuation(w[0])]
        model = TrigramWords(words, rng)
        seen: dict[str, None] = {}
        for _ in range(6):  # short words repeat: draw until n distinct types (or give up)
            seen.update(dict.fromkeys(w for w in model.sample(int(n * 1.5)) if w))
            if len(seen) >= n:
                break
        vocab = list(seen)[:n]
        ranks = np.arange(1, len(vocab) + 1)
        freq = np.maximum(1, (2e6 * size[langs.index(lang)] / ranks**1.05)).astype(int)
        counts[lang] = Counter(dict(zip(vocab, freq.tolist())))
        # Held-out text: new draws from the same frequency distribution.
        p = freq / freq.sum()
        sample = rng.choice(len(vocab), size=(300, 8), p=p)
        heldout[lang] = [" ".join(vocab[i] for i in row) for row in sample]
    return counts, heldout


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker(
    kind: str, counts_path: str, size: int, out_path: str, fed_words: int, decrement: str
) -> None:
    table = pq.read_table(counts_path)
    words = table.column("word").to_pylist()
    counts = table.column("count").to_numpy()
    base = _peak_mb()
    t0 = time.perf_counter()
    if kind == "ours":
        params = LearnerParams(size, LearnerConfig(decrement=decrement))
        vocab = learn_vocab(words, counts, params).vocab
    else:
        from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

        scale = fed_words / counts.sum()
        reps = np.maximum(1, np.rint(counts * scale)).astype(int)

        def lines():
            for w, r in zip(words, reps.tolist()):
                while r > 0:
                    k = min(r, 1000)
                    yield " ".join([w] * k)
                    r -= k

        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=False, lowercase=False
        )
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        trainer = trainers.WordPieceTrainer(
            vocab_size=size,
            special_tokens=list(RESERVED_TOKENS),
            limit_alphabet=20_000,
            show_progress=False,
        )
        tok.train_from_iterator(lines(), trainer=trainer, length=None)
        v = tok.get_vocab()
        vocab = sorted(v, key=v.get)
    secs = time.perf_counter() - t0
    Path(out_path).write_text(
        json.dumps({"seconds": secs, "peak_mb": _peak_mb(), "base_mb": base, "vocab": vocab}),
        encoding="utf-8",
    )


def run_worker(kind: str, counts_path: Path, size: int, tmp: Path, fed: int, dec: str) -> dict:
    out = tmp / f"{kind}-{size}.json"
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        kind,
        "--counts",
        str(counts_path),
        "--size",
        str(size),
        "--result",
        str(out),
        "--fed-words",
        str(fed),
        "--decrement",
        dec,
    ]
    subprocess.run(cmd, check=True)
    return json.loads(out.read_text("utf-8"))


def quality(vocab: list[str], heldout: dict[str, list[str]]) -> dict[str, dict]:
    tok = build_tokenizer(vocab)
    return {lang: coverage(tok, sents) for lang, sents in heldout.items()}


def compare(name: str, counts_path: Path, heldout, sizes, tmp: Path, fed: int, dec: str) -> None:
    for size in sizes:
        ours = run_worker("ours", counts_path, size, tmp, fed, dec)
        hf = run_worker("tokenizers", counts_path, size, tmp, fed, dec)
        qo, qh = quality(ours["vocab"], heldout), quality(hf["vocab"], heldout)
        small = [k for k in SMALL if k in qo]

        def mean(q, key, langs):
            return float(np.mean([q[k][key] for k in langs]))

        print(f"\n== {name}: vocab {size} ==")
        print(f"{'':28}{'ours':>12}{'tokenizers':>12}{'ratio':>8}")
        print(f"{'vocab size':28}{len(ours['vocab']):>12}{len(hf['vocab']):>12}")
        print(
            f"{'learn time (s)':28}{ours['seconds']:>12.2f}{hf['seconds']:>12.2f}"
            f"{ours['seconds'] / hf['seconds']:>8.2f}"
        )
        print(
            f"{'peak RSS (MB)':28}{ours['peak_mb']:>12.0f}{hf['peak_mb']:>12.0f}"
            f"{ours['peak_mb'] / hf['peak_mb']:>8.2f}"
        )
        for label, langs in (("small langs " + ",".join(small), small), ("all langs", list(qo))):
            for key in ("wordpieces_per_word", "unk_rate"):
                a, b = mean(qo, key, langs), mean(qh, key, langs)
                r = f"{a / b:>8.3f}" if b else f"{'-':>8}"
                print(f"{key + ' ' + label[:12]:28}{a:>12.4f}{b:>12.4f}{r}")
        a, b = qo.get("eng"), qh.get("eng")
        if a and b:
            print(
                f"{'wordpieces_per_word eng':28}{a['wordpieces_per_word']:>12.4f}"
                f"{b['wordpieces_per_word']:>12.4f}"
            )


def write_counts(path: Path, counts_by_lang, alpha: float) -> int:
    smoothed, _, _ = smooth_counts(counts_by_lang, alpha)
    words = list(smoothed)
    pq.write_table(pa.table({"word": words, "count": np.array([smoothed[w] for w in words])}), path)
    return len(words)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--types", type=int, default=1_000_000, help="synthetic word types in total")
    ap.add_argument("--sizes", default="32000,200000", help="vocabulary sizes to learn")
    ap.add_argument("--alpha", type=float, default=0.3, help="language smoothing exponent")
    ap.add_argument(
        "--fed-words",
        type=int,
        default=20_000_000,
        help="words of text fed to tokenizers (the smoothed counts, scaled)",
    )
    ap.add_argument(
        "--tatoeba-size",
        type=int,
        default=8000,
        help="vocabulary size for the real-text comparison (0 to skip)",
    )
    ap.add_argument(
        "--decrement",
        choices=["all", "selected"],
        default=LearnerConfig.decrement,
        help="our learner's prefix decrement rule (see labse_model/vocab/learner.py)",
    )
    ap.add_argument("--worker", choices=["ours", "tokenizers"], help=argparse.SUPPRESS)
    ap.add_argument("--counts", help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.counts, args.size, args.result, args.fed_words, args.decrement)
        return
    setup_logging("WARNING")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if args.tatoeba_size:
            train, dev = _tatoeba("train"), _tatoeba("dev")
            by_lang = {k: Counter(w for s in v for w in split_words(s)) for k, v in train.items()}
            n = write_counts(tmp / "tatoeba.parquet", by_lang, args.alpha)
            print(f"Tatoeba train: {n} word types, alpha {args.alpha}; evaluated on dev")
            compare(
                "Tatoeba (real)",
                tmp / "tatoeba.parquet",
                dev,
                [args.tatoeba_size],
                tmp,
                args.fed_words // 10,
                args.decrement,
            )
        t0 = time.perf_counter()
        counts, heldout = synthetic_counts(args.types)
        n = write_counts(tmp / "synthetic.parquet", counts, args.alpha)
        print(
            f"\nsynthetic: {n} word types over {len(counts)} languages "
            f"(generated in {time.perf_counter() - t0:.0f}s), alpha {args.alpha}"
        )
        sizes = [int(s) for s in args.sizes.split(",") if s]
        compare(
            "synthetic",
            tmp / "synthetic.parquet",
            heldout,
            sizes,
            tmp,
            args.fed_words,
            args.decrement,
        )


if __name__ == "__main__":
    main()
