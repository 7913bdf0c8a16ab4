"""Pair hard-rules benchmark: pairs per CPU second, ours against OpusFilter, same pairs, same run.

    .venv/bin/python bench/rules_bench.py [--repeat 2] [--langs deu cmn ...] [--json out.json]

Pairs: the Tatoeba dev/train samples of ../shared/data (16 languages paired with English), plus
for every real pair one corrupted copy (untranslated copy, truncated target, URL-only side,
changed number, repeated words, wrong-language target taken from another language's file,
misaligned target), repeated ``--repeat`` times. Each language pair is a separate job for both
systems (the script and language checks are declared per pair), run in this one process, one
after the other, twice (the first round warms caches; the second is reported).

ours   ``filters.bitext.pair_rules.PairRulesRunner`` with the demo preset's 10 rules, batches of 20k
peer   OpusFilter 3.3.1 (``opusfilter.filters``), the equivalent filters chained in the same
       order, each filtering the survivors of the previous one (as an OpusFilter ``filter``
       step): LengthFilter(char 3..1000), SimilarityFilter(char, 0.9) for identical/copy,
       LengthRatioFilter(char, 3), HtmlTagFilter, NonZeroNumeralsFilter(0.5),
       RepetitionFilter(3, 3..50), CharacterScoreFilter(script of each side, 0.3),
       FastTextFilter(the same lid.176.ftz, 0.5).

Speed unit: pairs per CPU second of this (single-threaded) process = pairs/s per core. Also
printed: the share of real Tatoeba pairs each keeps, the share of detectable corrupted pairs
(all kinds but the misaligned one) each drops, and the share of pairs on which they agree.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from importlib.metadata import version
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
TATOEBA = REPO.parent / "shared" / "data" / "tatoeba"
# OpusFilter's CharacterScoreFilter takes Unicode script names per side.
SCRIPT = {
    "ara": "Arabic",
    "cmn": "Han",
    "ell": "Greek",
    "hin": "Devanagari",
    "jpn": "Han",
    "kor": "Hangul",
    "rus": "Cyrillic",
}

from labse_common.langs import ISO3_TO_1, TATOEBA_LANGS  # noqa: E402  (after sys.path above)

LANGS = [lang for lang in TATOEBA_LANGS if lang != "eng"]  # English is the pivot
ISO1 = {lang: ISO3_TO_1[lang] for lang in LANGS}


def load_pairs(lang: str) -> list[tuple[str, str]]:
    out = []
    for split in ("train", "dev"):
        xx = (TATOEBA / f"{split}.{lang}-eng.{lang}").read_text(encoding="utf-8").splitlines()
        en = (TATOEBA / f"{split}.{lang}-eng.eng").read_text(encoding="utf-8").splitlines()
        out += list(zip(xx, en))
    return out


def corrupt(
    pairs: list[tuple[str, str]], other: list[str], rng: random.Random
) -> list[tuple[str, str]]:
    bad = []
    for i, (s, t) in enumerate(pairs):
        kind = i % 7
        if kind == 0:
            bad.append((s, s))
        elif kind == 1:
            bad.append((s, t[: max(1, len(t) // 4)]))
        elif kind == 2:
            bad.append(("https://example.com/page/" + str(i), t))
        elif kind == 3:
            bad.append((s + f" {i + 7}", t + f" {i + 8}"))
        elif kind == 4:
            w = t.split()[:1] or ["x"]
            bad.append((s, " ".join(w * 6)))
        elif kind == 5:
            bad.append((s, rng.choice(other)))
        else:
            bad.append((s, pairs[(i + 1) % len(pairs)][1]))
    return bad


def opus_chain(lang: str, lid_path: str) -> list:
    from opusfilter import filters as of

    scripts = [SCRIPT.get(lang, "Latin"), "Latin"]
    return [
        of.LengthFilter(min_length=3, max_length=1000, unit="char"),
        of.SimilarityFilter(threshold=0.9, unit="char", lowercase=True, require_all=False),
        of.LengthRatioFilter(threshold=3, unit="char"),
        of.HtmlTagFilter(),
        of.NonZeroNumeralsFilter(threshold=0.5),
        of.RepetitionFilter(threshold=3, min_length=3, max_length=50),
        of.CharacterScoreFilter(scripts=scripts, thresholds=[0.3, 0.3]),
        of.FastTextFilter(languages=[ISO1[lang], "en"], model_path=lid_path, thresholds=[0.5, 0.5]),
    ]


def run_opus(chain: list, pairs: list[tuple[str, str]]) -> set[int]:
    alive = list(range(len(pairs)))
    for f in chain:
        segs = [list(pairs[i]) for i in alive]
        keep = [f.accept(score) for score in f.score(segs)]
        alive = [i for i, k in zip(alive, keep) if k]
    return set(alive)


def run_ours(runner, pairs: list[tuple[str, str]], batch_rows: int = 20000) -> set[int]:
    import pyarrow as pa

    kept: set[int] = set()
    for start in range(0, len(pairs), batch_rows):
        chunk = pairs[start : start + batch_rows]
        b = pa.RecordBatch.from_pydict(
            {
                "src": [s for s, _ in chunk],
                "trg": [t for _, t in chunk],
                "i": list(range(start, start + len(chunk))),
            }
        )
        k, _ = runner.filter_batch(b)
        kept.update(k.column("i").to_pylist())
    return kept


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repeat", type=int, default=1, help="repeat the pair set this many times")
    ap.add_argument("--langs", nargs="+", default=LANGS, help="Tatoeba languages (with English)")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    if not TATOEBA.is_dir():
        print(f"error: Tatoeba sample not found under {TATOEBA}", file=sys.stderr)
        return 2
    try:
        import opusfilter  # noqa: F401
    except ImportError:
        print("error: pip install opusfilter (the bench extra)", file=sys.stderr)
        return 2
    from filters.bitext.pair_rules import PairRulesRunner
    from filters.langid import default_lid_model_path
    from labse_common.config import load

    cfg = load("pair_rules", "demo")
    lid = default_lid_model_path()
    rng = random.Random(0)
    data = {}
    for lang in args.langs:
        real = load_pairs(lang)
        others = [t for o in args.langs if o != lang for t, _ in load_pairs(o)[:50]]
        bad = corrupt(real, others, rng)
        # kind 6 (a misaligned real target) is not detectable by any rule: left out of "bad caught".
        flags = ([True] * len(real) + [i % 7 != 6 and None for i in range(len(bad))]) * args.repeat
        data[lang] = ((real + bad) * args.repeat, flags)
    results = {}
    for rnd in range(2):
        tot = {
            "pairs": 0,
            "ours_cpu": 0.0,
            "opus_cpu": 0.0,
            "ours_kept": 0,
            "opus_kept": 0,
            "agree": 0,
            "real": 0,
            "ours_real_kept": 0,
            "opus_real_kept": 0,
            "bad": 0,
            "ours_bad_dropped": 0,
            "opus_bad_dropped": 0,
        }
        for lang, (pairs, flags) in data.items():
            runner = PairRulesRunner(cfg, lang, "eng")
            chain = opus_chain(lang, lid)
            t0 = time.process_time()
            ours = run_ours(runner, pairs)
            t1 = time.process_time()
            peer = run_opus(chain, pairs)
            t2 = time.process_time()
            tot["pairs"] += len(pairs)
            tot["ours_cpu"] += t1 - t0
            tot["opus_cpu"] += t2 - t1
            tot["ours_kept"] += len(ours)
            tot["opus_kept"] += len(peer)
            tot["agree"] += len(pairs) - len(ours ^ peer)
            real = [i for i, f in enumerate(flags) if f]
            bad = [i for i, f in enumerate(flags) if f is None]
            tot["real"] += len(real)
            tot["bad"] += len(bad)
            tot["ours_real_kept"] += sum(i in ours for i in real)
            tot["opus_real_kept"] += sum(i in peer for i in real)
            tot["ours_bad_dropped"] += sum(i not in ours for i in bad)
            tot["opus_bad_dropped"] += sum(i not in peer for i in bad)
        results = tot
        if rnd == 0:
            print(f"warm-up round done ({tot['pairs']} pairs)", file=sys.stderr)
    n = results["pairs"]
    ours_ps, opus_ps = n / results["ours_cpu"], n / results["opus_cpu"]
    print(
        f"{n} pairs ({len(args.langs)} language pairs, half real Tatoeba, half corrupted), "
        f"opusfilter {version('opusfilter')}"
    )
    r = results
    print(
        "| system | CPU s | pairs/CPU-s (per core) | speed ours/peer | real pairs kept | corrupted pairs dropped |"
    )
    print("|---|---|---|---|---|---|")
    print(
        f"| ours: filters.bitext.pair_rules (10 rules) | {r['ours_cpu']:.2f} | {ours_ps:,.0f} | "
        f"{ours_ps / opus_ps:.2f}x | {r['ours_real_kept'] / r['real']:.1%} | "
        f"{r['ours_bad_dropped'] / r['bad']:.1%} |"
    )
    print(
        f"| OpusFilter 3.3.1 (8 equivalent filters) | {r['opus_cpu']:.2f} | {opus_ps:,.0f} | 1.00x | "
        f"{r['opus_real_kept'] / r['real']:.1%} | {r['opus_bad_dropped'] / r['bad']:.1%} |"
    )
    print(f"decisions agree on {results['agree'] / n:.1%} of the pairs")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {**results, "ours_pairs_per_cpu_s": ours_ps, "opus_pairs_per_cpu_s": opus_ps},
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
