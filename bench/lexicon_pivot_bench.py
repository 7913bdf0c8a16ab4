"""Pivot dictionaries against direct ones (issue 47, item 4): retrieval by lexical score alone.

Fits ``filters lexicon`` on de-en and fr-en training pairs only (Tatoeba train, plus PUD lines of
two disjoint ranges, so that no English line links a German to a French sentence), with
``--for-pairs de-fr``: de-fr gets a pivot dictionary through English. Then, on PUD lines
0..N-1, held out from every fit (line i of deu, fra and eng translate each other), each query
sentence ranks all N candidates of the other language by lex_fwd + lex_bwd. Reported per pair:
P@1 (the 1-best is the translation), and the recall at precision 0.9 and 0.95 when the 1-best
pairs are kept above a threshold on that score (the share of queries kept correctly).
``--shared``: the PUD training lines of de-en and fr-en share their English lines, as the
demo's training pairs do (still no de-fr pair is given).

    python bench/lexicon_pivot_bench.py [--data ../shared/data] [--n 200] [--top-k 5] [--shared]
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

import numpy as np

from filters.__main__ import main as filters_main
from mining import lexicon


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def fit_file(data: Path, n_held: int, dest: Path, shared: bool = False) -> int:
    """The training pairs (src, trg, src_lang, trg_lang, no header); returns how many. PUD
    lines after the held-out ones: disjoint halves for de and fr (no English line links a de
    to a fr sentence), or with ``shared`` all of them for both, as the demo's training pairs."""
    rows = []
    if shared:
        pud_ranges = {"deu": (n_held, 800), "fra": (n_held, 800)}
    else:
        pud_ranges = {"deu": (n_held, 500), "fra": (500, 800)}
    for code, short in (("deu", "de"), ("fra", "fr")):
        for folder, (a, b) in (("tatoeba", (0, None)), ("pud", pud_ranges[code])):
            src = _lines(data / folder / f"train.{code}-eng.{code}")[a:b]
            trg = _lines(data / folder / f"train.{code}-eng.eng")[a:b]
            rows += [(s, t, short, "en") for s, t in zip(src, trg)]
    dest.write_text("".join("\t".join(r) + "\n" for r in rows), encoding="utf-8")
    return len(rows)


def recall_at(score: np.ndarray, correct: np.ndarray, precision: float) -> float:
    """The largest share of queries kept correctly by a threshold on the 1-best's score whose
    kept pairs reach ``precision``."""
    order = np.argsort(-score, kind="stable")
    hits = np.cumsum(correct[order])
    prec = hits / np.arange(1, len(order) + 1)
    ok = prec >= precision
    return float(hits[ok].max() / len(score)) if ok.any() else 0.0


def retrieval(lex: lexicon.LexiconSet, src: str, trg: str, queries, candidates) -> dict:
    pair = lex.for_pair(src, trg)
    n = len(queries)
    s_rows, t_rows = np.repeat(np.arange(n), n), np.tile(np.arange(n), n)
    sc = pair.score_rows(
        pair.encode(queries, "src"), pair.encode(candidates, "trg"), s_rows, t_rows
    )
    floor = np.log(lexicon.FLOOR)
    both = np.nan_to_num(sc["lex_fwd"], nan=floor) + np.nan_to_num(sc["lex_bwd"], nan=floor)
    both = both.reshape(n, n)
    best = both.argmax(axis=1)
    correct = best == np.arange(n)
    top = both[np.arange(n), best]
    return {
        "pair": f"{src}-{trg}",
        "status": lex.status(f"{src}-{trg}"),
        "p_at_1": float(correct.mean()),
        "recall_p90": recall_at(top, correct, 0.9),
        "recall_p95": recall_at(top, correct, 0.95),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--n", type=int, default=200, help="held-out PUD lines (queries per pair)")
    ap.add_argument("--top-k", type=int, default=5, help="lexicon.pivot_top_k")
    ap.add_argument(
        "--shared", action="store_true", help="de-en and fr-en PUD training lines share English"
    )
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    data = Path(args.data)
    with tempfile.TemporaryDirectory() as tmp:
        fit = Path(tmp) / "fit.tsv"
        n_fit = fit_file(data, args.n, fit, args.shared)
        t0 = time.perf_counter()
        argv = ["lexicon", "--fit", str(fit), "--layout", "src-trg"]
        argv += ["--lang-columns", "col2", "col3", "--for-pairs", "de-fr", "fr-de", "de-en"]
        argv += ["--output", f"{tmp}/lex", "--set", f"pivot_top_k={args.top_k}"]
        argv += ["--set", "progress=false", "--log-level", "WARNING"]
        assert filters_main(argv) == 0
        seconds = time.perf_counter() - t0
        lex = lexicon.load(f"{tmp}/lex/lexicon.parquet")
    held = {
        code: _lines(data / "pud" / f"train.{code}-eng.{code}")[: args.n] for code in ("deu", "fra")
    }
    held["eng"] = _lines(data / "pud" / "train.deu-eng.eng")[: args.n]
    print(f"fitted on {n_fit} pairs ({lex.langs}), pivots {lex.pivots}, {seconds:.1f} s")
    print(f"{'pair':<8}{'dictionary':<12}{'P@1':>7}{'R@P.90':>8}{'R@P.95':>8}")
    for src, trg in (("deu", "eng"), ("eng", "deu"), ("fra", "eng"), ("eng", "fra"),
                     ("deu", "fra"), ("fra", "deu")):  # fmt: skip
        r = retrieval(lex, src[:2], trg[:2], held[src], held[trg])
        print(
            f"{r['pair']:<8}{r['status']:<12}{r['p_at_1']:>7.3f}"
            f"{r['recall_p90']:>8.3f}{r['recall_p95']:>8.3f}"
        )


if __name__ == "__main__":
    main()
