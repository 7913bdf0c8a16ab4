"""Vocabulary learner, smoothing arithmetic and pre-tokeniser (no Beam, no real data needed)."""

from __future__ import annotations

import random
from collections import defaultdict

import numpy as np
import pytest
from tokenizers.normalizers import BertNormalizer
from tokenizers.pre_tokenizers import BertPreTokenizer

from labse_common.sections.vocab import LearnerConfig
from labse_model.vocab.learner import (
    JOINER,
    LearnerParams,
    _assemble,
    _learn_with_thresh,
    _prepare_input,
    _SubstringTrie,
    learn_vocab,
)
from labse_model.vocab.pretokenize import pretokenize, split_words
from labse_model.vocab.smoothing import language_weights, smooth_counts, smoothed_shares
from tests.support.paths import SHARED_DATA as DATA

# --- smoothing -------------------------------------------------------------------------------


def test_smoothing_hand_computed():
    # N = 1000, p = (0.9, 0.1). alpha = 0.5: sqrt(.9) = 3 sqrt(.1), so q = (3/4, 1/4);
    # w_a = 0.75 * 1000 / 900 = 5/6, w_b = 0.25 * 1000 / 100 = 2.5.
    counts = {"a": {"x": 600, "y": 300}, "b": {"x": 40, "z": 60}}
    smoothed, raw, w = smooth_counts(counts, 0.5)
    assert w["a"] == pytest.approx(5 / 6) and w["b"] == pytest.approx(2.5)
    assert smoothed == pytest.approx({"x": 600 * 5 / 6 + 40 * 2.5, "y": 250.0, "z": 150.0})
    assert raw == {"x": 640, "y": 300, "z": 60}
    assert sum(smoothed.values()) == pytest.approx(1000.0)  # total mass is kept
    assert smoothed_shares({"a": 900, "b": 100}, 0.5) == pytest.approx({"a": 0.75, "b": 0.25})
    # alpha = 1 is the identity; alpha = 0 gives each language the same mass.
    assert language_weights({"a": 900, "b": 100}, 1.0) == pytest.approx({"a": 1.0, "b": 1.0})
    assert language_weights({"a": 900, "b": 100}, 0.0) == pytest.approx({"a": 5 / 9, "b": 5.0})
    # An empty language gets no weight (and no division by zero).
    assert language_weights({"a": 10, "e": 0}, 0.3) == pytest.approx({"a": 1.0})
    with pytest.raises(ValueError):
        language_weights({"a": 1}, 1.5)


# --- pre-tokeniser ---------------------------------------------------------------------------

EDGE_TEXTS = [
    "a\x00b\u200bc  d\x85e \u3000f\x1cg",
    "hello—world «x» 東京タワー 𠀋𠀍",
    "x\ufffdy\t\nz",
    "Café naïve ÉCOLE $5.00 a^b `q` ~tilde~",
    "",
    "   ",
    "ქართული ენა, हिन्दी। Ελληνικά; 한국어!",
]


def test_pretokenizer_matches_tokenizers_bert():
    texts = list(EDGE_TEXTS)
    tatoeba = DATA / "tatoeba"
    if tatoeba.is_dir():
        for f in sorted(tatoeba.glob("dev.*")):
            texts += f.read_text(encoding="utf-8").splitlines()
    norm = BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=False, lowercase=False
    )
    pre = BertPreTokenizer()
    for t in texts:
        ref = [w for w, _ in pre.pre_tokenize_str(norm.normalize_str(t))]
        assert split_words(t) == ref, t


def test_pretokenizer_reports_cleaning():
    r = pretokenize("ab\x00c\u200b d\ud800e")
    assert r.words == ["abc", "de"]
    assert r.control_removed == 2 and r.surrogates_removed == 1
    assert pretokenize("北京 is big").words == ["北", "京", "is", "big"]
    assert pretokenize("Ünïcödé").words == ["Ünïcödé"]  # cased, accents kept


# --- learner: faithful to the reference algorithm ----------------------------------------------


def _greedy_starts(word: str, vocab: set[str]) -> list[int] | None:
    starts, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):
            piece = word[start:end] if start == 0 else JOINER + word[start:end]
            if piece in vocab:
                break
        else:
            return None
        starts.append(start)
        start = end
    return starts


def _reference(
    word_counts: dict[str, int], thresh: float, iters: int, counts: dict[str, float] | None = None
) -> set[str]:
    """A plain re-statement of the tensorflow/text algorithm, written for this test.

    ``counts`` (if given) receives the last iteration's count of every kept token.
    """
    chars = {c for w in word_counts for c in w}
    base = chars | {JOINER + c for c in chars}
    vocab = set(base)
    max_len = max(len(w) for w in word_counts)
    for it in range(iters):
        sub: list[dict[str, float]] = [defaultdict(float) for _ in range(max_len + 1)]
        for word, n in word_counts.items():
            starts = list(range(len(word))) if it == 0 else _greedy_starts(word, vocab)
            if starts is None:
                continue
            for s in starts:
                for e in range(s + 1, len(word) + 1):
                    sub[e - s][word[s:e] if s == 0 else JOINER + word[s:e]] += n
        kept = set()
        if counts is not None:
            counts.clear()
        for length in range(max_len, 0, -1):
            for tok, n in list(sub[length].items()):
                if n >= thresh:
                    kept.add(tok)
                    if counts is not None:
                        counts[tok] = n
                prefix, body = (JOINER, tok[2:]) if tok.startswith(JOINER) else ("", tok)
                for i in range(1, length):
                    sub[i][prefix + body[:i]] -= n
        vocab = kept | base
    return vocab


def _random_words(rng: random.Random, n: int) -> dict[str, int]:
    stems = ["walk", "talk", "run", "läuf", "играть", "日本", "ab", "ba"]
    ends = ["", "s", "ed", "ing", "er", "ers", "t", "ung"]
    out: dict[str, int] = {}
    for _ in range(n):
        w = rng.choice(stems) + rng.choice(ends)
        if rng.random() < 0.3:
            w = rng.choice(stems) + w
        out[w] = out.get(w, 0) + rng.randint(1, 20)
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_learner_matches_reference_algorithm(seed):
    rng = random.Random(seed)
    wc = _random_words(rng, 300)
    words = list(wc)
    params = LearnerParams(
        10_000, LearnerConfig(num_iterations=3), reserved_tokens=(), skip_unreachable_joiners=False
    )
    stats: dict[str, int] = {}
    w, c, alphabet = _prepare_input(words, np.array([wc[x] for x in words], float), params, stats)
    trie = _SubstringTrie(w, c, params.learner.max_token_length)  # no unreachable forms skipped
    for thresh in (3, 10, 25, 60):
        for iters in (1, 3):
            params.learner.num_iterations = iters
            in_vocab, eff = _learn_with_thresh(trie, thresh, params)
            mine = set(_assemble(trie, in_vocab, eff, params, alphabet, None))
            assert mine == _reference(wc, thresh, iters), (thresh, iters)


def test_learner_size_order_and_characters():
    rng = random.Random(5)
    wc = _random_words(rng, 2000)
    for w in ["漢字", "ひらがな", "ё"]:
        wc[w] = 1
    target = 80
    res = learn_vocab(list(wc), list(wc.values()), LearnerParams(vocab_size=target))
    v = res.vocab
    assert v[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert len(v) == len(set(v))
    assert len(v) == target  # filled up to exactly the requested size
    chars = {ch for w in wc for ch in w}
    assert chars <= set(v)
    # Every character has its ## form, except CJK ideographs (always split off by BERT).
    assert {JOINER + ch for ch in chars if ch not in "漢字日本"} <= set(v)
    assert not {"##漢", "##字"} & set(v)
    assert len(v) > 5 + 2 * len(chars)  # some multi-character pieces were learned
    # A bigger budget learns more: the threshold falls.
    res2 = learn_vocab(list(wc), list(wc.values()), LearnerParams(vocab_size=150))
    assert len(res2.vocab) > len(v) and res2.threshold < res.threshold


@pytest.mark.parametrize("seed", [3, 4])
def test_fill_to_exact_size_matches_reference(seed):
    # A wide slack window makes the search stop well short of the target, so the fill rule
    # does real work: the vocabulary at the chosen threshold, kept whole, plus the missing
    # tokens of the lower threshold's vocabulary, most frequent first (ties by string).
    rng = random.Random(seed)
    wc = _random_words(rng, 400)
    n_chars = len({ch for w in wc for ch in w})
    target = 2 * n_chars + 60
    params = LearnerParams(
        target,
        LearnerConfig(num_iterations=3, slack_ratio=0.3),
        reserved_tokens=(),
        skip_unreachable_joiners=False,
    )
    res = learn_vocab(list(wc), list(wc.values()), params)
    assert res.fill_threshold is not None and res.fill_threshold < res.threshold
    below = _reference(wc, res.threshold, 3)
    above_counts: dict[str, float] = {}
    above = _reference(wc, res.fill_threshold, 3, above_counts)
    assert len(below) < target < len(above)
    assert res.filled == target - len(below) > 0
    extra = sorted(above - below, key=lambda t: (-above_counts[t], t))
    assert set(res.vocab) == below | set(extra[: res.filled])
    assert len(res.vocab) == target == len(set(res.vocab))
    assert res.vocab[-res.filled :] == extra[: res.filled]  # appended in count order


def test_learner_bad_input_is_counted():
    words = ["ok", "fine", "x" * 60, "[UNK]", "nan", "zero", "rare☃"]
    counts = [5, 5, 9, 9, float("nan"), 0, 1]
    p = LearnerParams(40, LearnerConfig(char_min_count=2))
    res = learn_vocab(words, counts, p)
    c = res.counts
    assert c["word_types/dropped/too_long_for_learner"] == 1
    assert c["word_types/dropped/reserved"] == 1
    assert c["word_types/dropped/non_positive_count"] == 2
    assert c["word_types/dropped/rare_characters"] == 1  # r, a, ☃ are below the floor
    assert c["word_types/in"] == 7 and c["word_types/out"] == 2
    assert "☃" not in res.vocab and "o" in res.vocab
    assert learn_vocab([], [], LearnerParams(vocab_size=10)).vocab[:5] == list(p.reserved_tokens)
    with pytest.raises(ValueError, match="smaller than the reserved tokens"):
        learn_vocab(["abcdefgh"], [100], LearnerParams(vocab_size=12))


@pytest.mark.slow
def test_learner_result_does_not_depend_on_row_order():
    # Float sums over words in input order made ties fall differently for a shuffled input
    # (4 of 5 shuffles changed this vocabulary before the learner sorted its input).
    rng = random.Random(0)
    stems = ["walk", "talk", "run", "läuf", "играть", "日本", "ab", "ba", "x", "yz"]
    ends = ["", "s", "ed", "ing", "er", "ers", "t", "ung"]
    wc: dict[str, float] = {}
    for _ in range(20_000):
        w = rng.choice(stems) + rng.choice(ends) + rng.choice(stems) + rng.choice(ends)
        wc[w] = wc.get(w, 0.0) + rng.random() * 3
    words = list(wc)
    counts = np.array([wc[w] for w in words])
    params = LearnerParams(vocab_size=300)
    base = learn_vocab(words, counts, params).vocab
    for seed in range(5):
        idx = list(range(len(words)))
        random.Random(seed).shuffle(idx)
        assert learn_vocab([words[i] for i in idx], counts[idx], params).vocab == base, seed


def test_learner_params_read_the_vocab_learner_section():
    from dataclasses import fields

    from labse_common.config import load

    section = load("vocab", "demo", ["learner.max_unique_chars=7"]).learner
    params = LearnerParams(100, section)
    assert params.learner is section and params.learner.max_unique_chars == 7
    assert LearnerParams(100).learner == LearnerConfig()
    # No key of the section is declared again (with a default of its own) beside it.
    assert not {f.name for f in fields(LearnerParams)} & {f.name for f in fields(LearnerConfig)}
