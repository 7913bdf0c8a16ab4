"""Labelled noisy pair sets from true translations, for tests, calibration drills and benches.

Each BAD pair is made from true pairs in one of the ways mined bitext goes wrong:

* ``misaligned`` — a source with another pair's target;
* ``truncated`` — a source with the first part (at most half the words) of its translation;
* ``wrong_language`` — a source with a sentence in a third language as the target;
* ``untranslated`` — the source copied to the target side.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

KINDS = ("misaligned", "truncated", "wrong_language", "untranslated")
GOOD = "GOOD"
BAD = "BAD"


@dataclass
class LabelledPairs:
    src: list[str]
    trg: list[str]
    label: list[str]  # GOOD | BAD
    kind: list[str]  # "true" or one of KINDS
    lang: list[str]  # the source language

    def __len__(self) -> int:
        return len(self.src)

    def take(self, idx: Sequence[int]) -> LabelledPairs:
        return LabelledPairs(
            *([getattr(self, f)[i] for i in idx] for f in ("src", "trg", "label", "kind", "lang"))
        )


def _truncate(text: str, rng: np.random.Generator) -> str | None:
    words = text.split()
    if len(words) < 4:
        return None
    keep = int(rng.integers(1, len(words) // 2 + 1))
    return " ".join(words[:keep])


def make_noisy(
    pairs: Mapping[str, tuple[Sequence[str], Sequence[str]]],
    bad_share: float,
    seed: int = 0,
    kinds: Sequence[str] = KINDS,
) -> LabelledPairs:
    """Turn a ``bad_share`` of each language's true pairs into BAD ones (kinds in turn).

    ``pairs`` maps a source language to (sources, targets) that translate line by line; a
    ``wrong_language`` target is a source sentence of another language (needs two languages).
    The result is shuffled; ``kind`` says how each BAD pair was made.
    """
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown noise kind(s) {sorted(unknown)}; known: {KINDS}")
    rng = np.random.default_rng(seed)
    langs = sorted(pairs)
    out = LabelledPairs([], [], [], [], [])
    for lang in langs:
        src, trg = list(pairs[lang][0]), list(pairs[lang][1])
        if len(src) != len(trg):
            raise ValueError(f"{lang}: {len(src)} sources but {len(trg)} targets")
        n = len(src)
        order = rng.permutation(n)
        n_bad = int(round(bad_share * n))
        others = [x for x in langs if x != lang]
        for j, i in enumerate(order):
            x, y, kind = src[i], trg[i], "true"
            if j < n_bad:
                kind = kinds[j % len(kinds)]
                if kind == "truncated":
                    cut = _truncate(y, rng)
                    kind = "misaligned" if cut is None else kind
                    y = cut if cut is not None else y
                if kind == "wrong_language" and not others:
                    kind = "misaligned"
                if kind == "misaligned":
                    k = int(rng.integers(n - 1))  # any other row
                    y = trg[k + (k >= i)]
                elif kind == "wrong_language":
                    other = others[int(rng.integers(len(others)))]
                    osrc = pairs[other][0]
                    y = osrc[int(rng.integers(len(osrc)))]
                elif kind == "untranslated":
                    y = x
            out.src.append(x)
            out.trg.append(y)
            out.label.append(GOOD if kind == "true" else BAD)
            out.kind.append(kind)
            out.lang.append(lang)
    return out.take(rng.permutation(len(out)).tolist())


def read_tatoeba(
    data_dir: str, langs: Sequence[str], split: str = "train"
) -> dict[str, tuple[list[str], list[str]]]:
    """``{lang: (lang sentences, English sentences)}`` from ``{split}.LANG-eng.{LANG,eng}``."""
    out = {}
    for lang in langs:
        base = f"{data_dir}/{split}.{lang}-eng"
        with open(f"{base}.{lang}", encoding="utf-8") as f:
            src = [ln.rstrip("\n") for ln in f]
        with open(f"{base}.eng", encoding="utf-8") as f:
            trg = [ln.rstrip("\n") for ln in f]
        if len(src) != len(trg):
            raise ValueError(f"{base}: {len(src)} vs {len(trg)} lines")
        out[lang] = (src, trg)
    return out
