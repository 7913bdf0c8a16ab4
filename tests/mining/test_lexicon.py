"""IBM Model 1 dictionaries (mining.lexicon): what EM learns, how pairs are scored, the file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mining import lexicon, lexicon_file
from tests.support.lexicon_toy import SRC_WORDS, TRG_WORDS, toy_corpus
from tests.support.paths import SHARED_DATA


@pytest.fixture(scope="module")
def toy() -> lexicon.Lexicon:
    return lexicon.fit(toy_corpus(600), iterations=5)


def best_translation(lex: lexicon.Lexicon, word: str) -> str:
    words = {i: w for w, i in lex.trg_vocab.items()}
    row = lex.fwd.matrix()[lex.src_vocab[word]].toarray().ravel()
    return words[int(np.argmax(row))]


def p_fwd(lex: lexicon.Lexicon, s: str, t: str) -> float:
    return float(lex.fwd.matrix()[lex.src_vocab[s], lex.trg_vocab[t]])


def test_em_learns_each_words_translation(toy):
    assert [best_translation(toy, w) for w in SRC_WORDS] == TRG_WORDS
    # the function word is explained by its own partner, not by every content word
    assert best_translation(toy, "quelthe") == "zibthe"
    assert all(p_fwd(toy, s, t) > 3 * p_fwd(toy, s, "zibthe") for s, t in zip(SRC_WORDS, TRG_WORDS))
    # p(.|s) is a distribution for every source word
    sums = np.bincount(toy.fwd.keys // toy.fwd.n_trg, weights=toy.fwd.probs)
    assert np.allclose(sums[sums > 0], 1.0)


def test_translations_score_above_mismatched_pairs(toy):
    held = toy_corpus(200, seed=1)
    src = [a for a, _ in held]
    trg = [b for _, b in held]
    right = toy.score(src, trg)
    wrong = toy.score(src, trg[1:] + trg[:1])
    for name in ("lex_fwd", "lex_bwd"):
        assert (right[name] > wrong[name]).mean() > 0.97, name


def test_scores_are_the_ibm1_likelihood_per_token(toy):
    """The vectorised score against the formula written out pair by pair."""
    held = [*toy_corpus(20, seed=4), ("quel1 quel2 unknownword", "zib2 zib1 zib9")]

    def by_hand(src: str, trg: str) -> float:
        given = ["<null>", *lexicon.tokens(src)]
        logs = []
        for t in lexicon.tokens(trg):
            p = sum(
                p_fwd(toy, s, t) if s in toy.src_vocab and t in toy.trg_vocab else 0.0
                for s in given
            )
            logs.append(np.log(max(p / len(given), lexicon.FLOOR)))
        return float(np.mean(logs))

    got = toy.score([a for a, _ in held], [b for _, b in held])["lex_fwd"]
    assert np.allclose(got, [by_hand(a, b) for a, b in held], atol=1e-9)


def test_the_chunk_size_does_not_change_the_fit():
    pairs = toy_corpus(300, seed=2)
    a = lexicon.fit(pairs, iterations=3, chunk=7)
    b = lexicon.fit(pairs, iterations=3, chunk=4096)
    assert np.array_equal(a.fwd.keys, b.fwd.keys)
    assert np.allclose(a.fwd.probs, b.fwd.probs, atol=1e-12)
    assert np.allclose(a.bwd.probs, b.bwd.probs, atol=1e-12)


def test_save_and_load_give_the_same_scores(toy, tmp_path):
    held = toy_corpus(50, seed=3)
    src, trg = [a for a, _ in held], [b for _, b in held]
    written = lexicon_file.save(toy, tmp_path / "lex.parquet", min_prob=0.0)
    assert written == len(toy.fwd.keys) + len(toy.bwd.keys)
    back = lexicon_file.load(tmp_path / "lex.parquet")
    assert back.pairs == toy.pairs == 600
    before, after = toy.score(src, trg), back.score(src, trg)
    for name in before:
        assert np.allclose(before[name], after[name], atol=1e-5), name
    # min_prob drops the small entries
    assert lexicon_file.save(toy, tmp_path / "pruned.parquet", min_prob=0.05) < written


def test_a_side_without_words_scores_nan_and_unknown_words_score_low(toy):
    s = toy.score(["quel1 quel2", "", "quel1"], ["zib1 zib2", "zib1", "wholly unknown"])
    assert np.isfinite(s["lex_fwd"][0]) and np.isfinite(s["lex_bwd"][0])
    # "zib1" given no source word is still scored (against NULL); an empty side has nothing to
    # explain: NaN, which the combined model imputes
    assert np.isfinite(s["lex_fwd"][1]) and np.isnan(s["lex_bwd"][1])
    assert s["lex_fwd"][2] == pytest.approx(np.log(lexicon.FLOOR))


def test_tokens_fold_case_and_accents_and_split_cjk():
    assert lexicon.tokens("Élan, CAFÉ-au-lait 42!") == ["elan", "cafe", "au", "lait", "42"]
    assert lexicon.tokens("我爱你 ok") == ["我", "爱", "你", "ok"]
    assert lexicon.tokens("") == [] and lexicon.tokens(None) == []


def test_no_usable_pair_is_an_error():
    with pytest.raises(ValueError, match="no pair"):
        lexicon.fit([("...", "!!!"), ("", "word")])


def test_a_table_without_the_columns_is_not_a_lexicon(tmp_path):
    pq.write_table(pa.table({"src": ["a"]}), tmp_path / "x.parquet")
    with pytest.raises(ValueError, match="not a lexicon"):
        lexicon_file.load(tmp_path / "x.parquet")


# --- real text --------------------------------------------------------------------------------


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


@pytest.mark.skipif(
    not (SHARED_DATA / "pud").is_dir(), reason="../shared/data/pud is absent (real PUD pairs)"
)
def test_on_real_pairs_translations_outscore_neighbouring_sentences():
    """Fitted on Tatoeba's 700 German-English training pairs and 600 PUD pairs, the features
    tell the 200 other PUD pairs from the same German sentences given the next line's English
    (same article, same topic: the kind of error a weak encoder makes)."""
    from sklearn.metrics import roc_auc_score

    tat = SHARED_DATA / "tatoeba"
    pud = SHARED_DATA / "pud"
    de, en = _lines(pud / "train.deu-eng.deu"), _lines(pud / "train.deu-eng.eng")
    fit_pairs = list(zip(_lines(tat / "train.deu-eng.deu"), _lines(tat / "train.deu-eng.eng")))
    fit_pairs += list(zip(de[:600], en[:600]))
    lex = lexicon.fit(fit_pairs)
    src, trg = de[600:800], en[600:800]
    right = lex.score(src, trg)
    wrong = lex.score(src, trg[1:] + trg[:1])
    y = np.r_[np.ones(len(src)), np.zeros(len(src))]
    for name in ("lex_fwd", "lex_bwd"):
        auc = roc_auc_score(y, np.r_[right[name], wrong[name]])
        assert auc > 0.8, (name, auc)  # measured: 0.858 and 0.883 with 1,300 pairs to learn from
