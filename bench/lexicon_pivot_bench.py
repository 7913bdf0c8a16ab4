"""Pivot dictionaries against direct ones: retrieval by lexical score alone.

Fits ``filters lexicon`` on de-en and fr-en training pairs only (Tatoeba train, plus PUD lines of
two disjoint ranges, so that no English line links a German to a French sentence), with
``--for-pairs de-fr``: de-fr gets a pivot dictionary through English. Then, on PUD lines
0..N-1, held out from every fit (line i of deu, fra and eng translate each other), each query
sentence ranks all N candidates of the other language by lex_fwd + lex_bwd. Reported per pair:
P@1 (the 1-best is the translation), and the recall at precision 0.9 and 0.95 when the 1-best
pairs are kept above a threshold on that score (the share of queries kept correctly).
``--layout shared``: the PUD training lines of de-en and fr-en share their English lines, as the
demo's training pairs do (still no de-fr pair is given); ``--layout pud``: the same PUD lines
without Tatoeba. ``--direct-de-fr`` adds those PUD lines' de-fr pairs (line i of deu and fra), so
de-fr is fitted directly from as many lines: what a pivot could at best reach.

    python bench/lexicon_pivot_bench.py [--data ../shared/data] [--n 200] [--top-k 0]
        [--sharpen 2] [--layout disjoint|shared|pud] [--direct-de-fr]
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

import numpy as np

from filters.__main__ import main as filters_main
from mining import lexicon, lexicon_file


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def fit_file(
    data: Path, n_held: int, dest: Path, layout: str = "disjoint", de_fr: bool = False
) -> int:
    """The training pairs (src, trg, src_lang, trg_lang, no header); returns how many. PUD
    lines after the held-out ones, plus Tatoeba train: ``disjoint`` halves for de and fr (no
    English line links a de to a fr sentence), ``shared`` all of them for both, as the demo's
    training pairs; ``pud``: PUD lines only, all of them for both. ``de_fr`` adds the PUD
    lines' de-fr pairs, so de-fr is fitted directly: the ceiling a pivot is measured against."""
    rows = []
    pud_ranges = {"deu": (n_held, 500), "fra": (500, 800)}
    if layout != "disjoint":
        pud_ranges = {"deu": (n_held, 800), "fra": (n_held, 800)}
    folders = ("pud",) if layout == "pud" else ("tatoeba", "pud")
    for code, short in (("deu", "de"), ("fra", "fr")):
        for folder in folders:
            a, b = pud_ranges[code] if folder == "pud" else (0, None)
            src = _lines(data / folder / f"train.{code}-eng.{code}")[a:b]
            trg = _lines(data / folder / f"train.{code}-eng.eng")[a:b]
            rows += [(s, t, short, "en") for s, t in zip(src, trg)]
    if de_fr:
        a, b = (n_held, 500) if layout == "disjoint" else (n_held, 800)
        src = _lines(data / "pud" / "train.deu-eng.deu")[a:b]
        trg = _lines(data / "pud" / "train.fra-eng.fra")[a:b]
        rows += [(s, t, "de", "fr") for s, t in zip(src, trg)]
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


def stand_in_miner(lex, src: str, trg: str, pools: dict, weight: float, k: int = 16) -> dict:
    """The miner's use of the dictionaries, with a stand-in encoder (character 3-gram TF-IDF,
    cosine): each query's ``k`` nearest candidates by ratio margin, re-ranked by margin +
    ``weight`` * (lex_fwd + lex_bwd) as :mod:`mining.lexical_rerank` does, the 1-best kept. The
    pools are the held-out lines (the first ``n``, line i translating line i) plus UD sentences
    of each language that translate nothing; the queries' 1-best pairs are kept above a
    threshold on their margin, as ``mining.threshold`` does."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    vec = TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 3), sublinear_tf=True)
    vec.fit(pools[src] + pools[trg])
    sim = (vec.transform(pools[src]) @ vec.transform(pools[trg]).T).toarray()
    fwd = np.argsort(-sim, axis=1)[:, :k]
    r_src = np.take_along_axis(sim, fwd, 1).mean(1)
    r_trg = -np.sort(-sim.T, axis=1)[:, :k].mean(1)
    margin = np.take_along_axis(sim, fwd, 1) / ((r_src[:, None] + r_trg[fwd]) / 2)
    n_q, n_gold = len(fwd), pools["n"]
    pair = lex.for_pair(src[:2], trg[:2])
    sc = pair.score_rows(
        pair.encode(pools[src], "src"), pair.encode(pools[trg], "trg"),
        np.repeat(np.arange(n_q), k), fwd.ravel(),
    )  # fmt: skip
    floor = np.log(lexicon.FLOOR)
    both = np.nan_to_num(sc["lex_fwd"], nan=floor) + np.nan_to_num(sc["lex_bwd"], nan=floor)
    pick = (margin + weight * both.reshape(n_q, k)).argmax(axis=1)
    correct = fwd[np.arange(n_q), pick] == np.arange(n_q)  # distractors: never correct
    kept = margin[np.arange(n_q), pick]
    scale = n_q / n_gold  # recall_at counts over every query; the gold pairs are the first n
    return {
        "margin_p1": float((fwd[:n_gold, 0] == np.arange(n_gold)).mean()),
        "p_at_1": float(correct[:n_gold].mean()),
        "recall_p80": recall_at(kept, correct, 0.8) * scale,
        "recall_p90": recall_at(kept, correct, 0.9) * scale,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--n", type=int, default=200, help="held-out PUD lines (queries per pair)")
    ap.add_argument("--top-k", type=int, default=0, help="lexicon.pivot_top_k (0: no cap)")
    ap.add_argument("--sharpen", type=float, default=2.0, help="lexicon.pivot_sharpen")
    ap.add_argument(
        "--layout",
        choices=("disjoint", "shared", "pud"),
        default="disjoint",
        help="training lines: disjoint PUD halves for de-en and fr-en, shared PUD lines (both "
        "plus Tatoeba train), or PUD lines only (shared, no Tatoeba)",
    )
    ap.add_argument(
        "--direct-de-fr",
        action="store_true",
        help="also fit de-fr on the PUD training lines' de-fr pairs (the ceiling of a pivot)",
    )
    ap.add_argument(
        "--miner",
        type=float,
        metavar="WEIGHT",
        help="also the stand-in miner (character 3-gram encoder, 16 candidates re-ranked by "
        "margin + WEIGHT * lex, 800 UD distractors a language): P@1 and recall at precision "
        "0.8 and 0.9",
    )
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    data = Path(args.data)
    with tempfile.TemporaryDirectory() as tmp:
        fit = Path(tmp) / "fit.tsv"
        n_fit = fit_file(data, args.n, fit, args.layout, args.direct_de_fr)
        t0 = time.perf_counter()
        argv = ["lexicon", "--fit", str(fit), "--layout", "src-trg"]
        argv += ["--lang-columns", "col2", "col3", "--for-pairs", "de-fr", "fr-de", "de-en"]
        argv += ["--output", f"{tmp}/lex", "--set", f"pivot_top_k={args.top_k}"]
        argv += ["--set", f"pivot_sharpen={args.sharpen}"]
        argv += ["--set", "progress=false", "--log-level", "WARNING"]
        assert filters_main(argv) == 0
        seconds = time.perf_counter() - t0
        lex = lexicon_file.load(f"{tmp}/lex/lexicon.parquet")
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
    if args.miner is not None:
        pools = {c: held[c] + _lines(data / "ud" / f"{c}.txt")[:800] for c in held}
        pools["n"] = args.n
        print(f"stand-in miner, weight {args.miner}")
        print(f"{'pair':<8}{'margin P@1':>11}{'P@1':>7}{'R@P.80':>8}{'R@P.90':>8}")
        for src, trg in (("deu", "eng"), ("fra", "eng"), ("deu", "fra"), ("fra", "deu")):
            m = stand_in_miner(lex, src, trg, pools, args.miner)
            print(
                f"{src[:2]}-{trg[:2]:<5}{m['margin_p1']:>11.3f}{m['p_at_1']:>7.3f}"
                f"{m['recall_p80']:>8.3f}{m['recall_p90']:>8.3f}"
            )


if __name__ == "__main__":
    main()
