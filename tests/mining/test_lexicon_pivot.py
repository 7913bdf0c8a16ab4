"""Dictionaries for every pair to mine: one fit serves both orders of its
language pair, and a pair with no training pairs gets a pivot dictionary composed through a
language both sides were fitted with, p(fr|de) = sum over en of q(fr|en) q(en|de), q each
dictionary's rows raised to ``sharpen`` and renormalised."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from mining import lexicon, lexicon_file, lexicon_pivot

WORDS = 30
SPELL = {"de": "quel", "en": "zib", "fr": "mor"}  # word i of each language translates word i


def corpus(a: str, b: str, n: int, seed: int) -> list[tuple[str, str]]:
    """``n`` pairs of languages ``a`` and ``b``: the same word ids, shuffled on the target side,
    and a function word each side that co-occurs with everything (only EM tells it apart)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        ids = rng.sample(range(WORDS), rng.randint(3, 8))
        trg = [f"{SPELL[b]}{i}" for i in ids] + [f"{SPELL[b]}the"]
        rng.shuffle(trg)
        out.append((" ".join([f"{SPELL[a]}the", *(f"{SPELL[a]}{i}" for i in ids)]), " ".join(trg)))
    return out


def held_out(n: int, seed: int) -> tuple[list[str], list[str]]:
    """``n`` de-fr translations (the same word ids on both sides) that no fit saw."""
    pairs = corpus("de", "fr", n, seed)
    return [a for a, _ in pairs], [b for _, b in pairs]


@pytest.fixture(scope="module")
def fitted() -> lexicon.LexiconSet:
    # Training pairs for de-en and fr-en only, from different sentences: nothing pairs de with fr.
    return lexicon_pivot.fit_set(
        {"de-en": corpus("de", "en", 300, 1), "fr-en": corpus("fr", "en", 300, 2)}
    )


def probs(lex: lexicon.Lexicon, direction: str) -> dict[tuple[str, str], float]:
    """{(given word, explained word): p} of one direction of ``lex``."""
    table = lex.fwd if direction == "fwd" else lex.bwd
    given, explained = (
        (lex.src_vocab, lex.trg_vocab) if direction == "fwd" else (lex.trg_vocab, lex.src_vocab)
    )
    g_words = {i: w for w, i in given.items()}
    e_words = {i: w for w, i in explained.items()}
    return {
        (g_words[int(k // table.n_trg)], e_words[int(k % table.n_trg)]): float(p)
        for k, p in zip(table.keys, table.probs)
    }


def sharpened(table: dict[tuple[str, str], float], power: float) -> dict:
    """q(y|x) = p(y|x)^power / sum over y' of p(y'|x)^power, written out entry by entry."""
    totals: dict[str, float] = {}
    for (x, _), p in table.items():
        totals[x] = totals.get(x, 0.0) + p**power
    return {(x, y): p**power / totals[x] for (x, y), p in table.items()}


def composed_score(
    first: dict, second: dict, given: str, explained: str, power: float = 1.0
) -> float:
    """The IBM Model 1 score of ``explained`` given ``given`` under p(z|x) = sum_y q(z|y) q(y|x),
    written out word by word: ``first`` is p(y|x), ``second`` p(z|y), q each sharpened by
    ``power``."""
    first, second = sharpened(first, power), sharpened(second, power)
    by_x: dict[str, dict[str, float]] = {}
    for (x, y), p in first.items():
        by_x.setdefault(x, {})[y] = p
    xs = [lexicon.NULL, *lexicon.tokens(given)]
    logs = []
    for z in lexicon.tokens(explained):
        total = sum(p_y * second.get((y, z), 0.0) for x in xs for y, p_y in by_x.get(x, {}).items())
        logs.append(math.log(max(total / len(xs), lexicon.FLOOR)))
    return sum(logs) / len(logs)


def test_one_fit_gives_both_orders(fitted):
    de, fr = held_out(5, 9)
    en = [s.replace("quel", "zib") for s in de]
    de_en = fitted.for_pair("de", "en")
    en_de = fitted.for_pair("en", "de")
    assert en_de is not None and "de-en" in fitted.tables and "en-de" not in fitted.tables
    assert en_de.fwd is de_en.bwd and en_de.src_vocab is de_en.trg_vocab
    forward = fitted.score(de, en, pair=("de", "en"))
    backward = fitted.score(en, de, pair=("eng", "deu"))
    np.testing.assert_array_equal(forward["lex_fwd"], backward["lex_bwd"])
    np.testing.assert_array_equal(forward["lex_bwd"], backward["lex_fwd"])
    # en-de training pairs given beside de-en ones are fitted with them, as one pair
    both = lexicon_pivot.fit_set(
        {"de-en": corpus("de", "en", 100, 1), "en-de": corpus("en", "de", 50, 3)}
    )
    assert set(both.tables) == {"de-en"} and both.langs == {"de-en": 150}
    assert both.status("en-de") == "direct"


@pytest.mark.parametrize("power", [1.0, 2.0])
def test_a_pair_without_training_pairs_is_scored_by_the_composed_formula(fitted, power):
    pivoted = lexicon_pivot.add_pivots(
        lexicon.LexiconSet(dict(fitted.tables), dict(fitted.langs)), ["de-fr"], None, 0.0, power
    )
    assert pivoted.pivots == {"de-fr": "en"} and pivoted.status("fr-de") == "pivot"
    de_en, fr_en = pivoted.for_pair("de", "en"), pivoted.for_pair("fr", "en")
    de, fr = held_out(8, 11)
    fr[3] = fr[5]  # one decoy: a translation of another sentence
    got = pivoted.score(de, fr, pair=("de", "fr"))
    for k in range(len(de)):
        # p(fr|de) = sum_en q(fr|en) q(en|de);  p(de|fr) = sum_en q(de|en) q(en|fr)
        fwd = composed_score(probs(de_en, "fwd"), probs(fr_en, "bwd"), de[k], fr[k], power)
        bwd = composed_score(probs(fr_en, "fwd"), probs(de_en, "bwd"), fr[k], de[k], power)
        assert got["lex_fwd"][k] == pytest.approx(fwd, abs=1e-9)
        assert got["lex_bwd"][k] == pytest.approx(bwd, abs=1e-9)
    # the other order reads the same tables swapped
    back = pivoted.score(fr, de, pair=("fr", "de"))
    np.testing.assert_array_equal(back["lex_fwd"], got["lex_bwd"])


def test_the_pivot_dictionary_ranks_translations_above_decoys(fitted, tmp_path):
    # Saved and read back with the default pruning, as the miner reads it.
    pivoted = lexicon.LexiconSet(dict(fitted.tables), dict(fitted.langs))
    lexicon_pivot.add_pivots(pivoted, ["de-fr", "de-ja"])
    assert pivoted.absent == ["de-ja"]
    lexicon_file.save(pivoted, tmp_path / "lex.parquet", min_prob=1e-3)
    lex = lexicon_file.load(tmp_path / "lex.parquet")
    assert (lex.langs, lex.pivots, lex.absent) == (
        {"de-en": 300, "fr-en": 300},
        {"de-fr": "en"},
        ["de-ja"],
    )
    assert lex.for_pair("de", "ja") is None
    de, fr = held_out(60, 21)
    n = len(de)
    s_rows = np.repeat(np.arange(n), n)  # every de sentence against every fr sentence
    t_rows = np.tile(np.arange(n), n)
    pair = lex.for_pair("de", "fr")
    sc = pair.score_rows(pair.encode(de, "src"), pair.encode(fr, "trg"), s_rows, t_rows)
    both = (sc["lex_fwd"] + sc["lex_bwd"]).reshape(n, n)
    top = both.argmax(axis=1)
    assert (top == np.arange(n)).mean() >= 0.9, (top == np.arange(n)).mean()
    assert (np.diag(both)[:, None] >= both).all(axis=1).mean() >= 0.9


def test_sharpening_moves_the_composed_mass_from_function_words_to_partners(fitted):
    # The plain product spreads each word over the pivot's function word and what it explains;
    # squaring each factor first keeps more of the mass on the word's own translation.
    de_en, en_fr = fitted.for_pair("de", "en"), fitted.for_pair("en", "fr")
    plain = probs(lexicon_pivot.compose(de_en, en_fr, None, 0.0, 1.0), "fwd")
    sharp = probs(lexicon_pivot.compose(de_en, en_fr, None, 0.0, 2.0), "fwd")
    partner = [(f"quel{i}", f"mor{i}") for i in range(WORDS)]
    assert all(sharp[p] > plain[p] for p in partner)
    for lex in (plain, sharp):  # each given word's row is still a distribution
        totals: dict[str, float] = {}
        for (x, _), p in lex.items():
            totals[x] = totals.get(x, 0.0) + p
        assert max(abs(t - 1) for t in totals.values()) < 1e-9
