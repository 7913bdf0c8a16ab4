"""Dictionaries for every language pair to mine: one fit per language pair of the
training pairs (:func:`fit_set`), and for a pair with none a pivot dictionary composed through a
language both its sides were fitted with (:func:`add_pivots`, :func:`compose`):

    p(fr|de) = sum over en of q(fr|en) q(en|de),   q(y|x) = p(y|x)^a / sum over y' of p(y'|x)^a

one sparse product per direction, pruned to each word's ``top_k`` likeliest entries >=
``min_prob``. Each factor is sharpened first (``sharpen`` a, 2 by default; 1: the plain
product): an IBM Model 1 row spreads some mass over the function words its word co-occurs with,
and the product of two such rows spreads it over the whole vocabulary of the pivot's function
words, so every candidate sentence gets a little of it and the true translation stands out
less. Squaring moves the mass to each word's likeliest partners: on held-out PUD de-fr it ranks
the translation first for 0.565 of the queries instead of 0.49 (English shared by the two fits)
and 0.355 instead of 0.305 (no English line shared), bench/README.md. :mod:`mining.lexicon`
reads, writes and scores the result (a :class:`~mining.lexicon.LexiconSet`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import numpy as np

from mining.lexicon import NULL, Lexicon, LexiconSet, _reverse, _Table, fit

log = logging.getLogger(__name__)


def fit_set(
    groups: dict[str, list[tuple[str, str]]],
    iterations: int = 5,
    max_tokens: int = 64,
    chunk: int = 4096,
) -> LexiconSet:
    """One :func:`fit` per language pair of ``groups`` ("de-en" -> its pairs; ``""``: pairs
    whose languages are unknown, fitted as one shared table). A pair given in both orders is
    fitted once, its reversed pairs swapped: de-en pairs teach en-de as much as de-en."""
    if not any(groups.values()):
        raise ValueError("no pair with a token on both sides to learn a lexicon from")
    merged: dict[str, list[tuple[str, str]]] = {}
    for key, pairs in groups.items():
        if key and key not in merged and _reverse(key) in merged:
            merged[_reverse(key)] += [(b, a) for a, b in pairs]
        else:
            merged.setdefault(key, []).extend(pairs)
    tables, langs = {}, {}
    for key, pairs in merged.items():
        log.info("fitting the %s dictionaries on %d pairs", key or "shared", len(pairs))
        tables[key] = fit(pairs, iterations, max_tokens, chunk)
        if key:
            tables[key].langs = {key: tables[key].pairs}
            langs[key] = tables[key].pairs
    return LexiconSet(tables, langs)


def pivot_for(langs: dict[str, int], src: str, trg: str) -> str | None:
    """The language both ``src`` and ``trg`` were fitted with (either order), the one with the
    most pairs on its weaker side; None when there is none."""
    counts: dict[str, dict[str, int]] = {}
    for key, n in langs.items():
        a, b = key.split("-")
        counts.setdefault(a, {})[b] = counts.setdefault(b, {})[a] = n
    shared = set(counts.get(src, {})) & set(counts.get(trg, {})) - {src, trg}
    if not shared:
        return None
    return max(sorted(shared), key=lambda p: min(counts[src][p], counts[trg][p]))


def sharpened(matrix, power: float):
    """``matrix`` (given word x explained word, CSR) with each row raised to ``power`` and
    normalised to sum 1 (``power`` 1: the rows as they are)."""
    from scipy import sparse

    if power == 1:
        return matrix
    m = matrix.copy()
    m.data = m.data**power
    totals = np.asarray(m.sum(axis=1)).ravel()
    return sparse.diags(1.0 / np.where(totals > 0, totals, 1.0)) @ m


def _compose_tables(
    a: _Table,
    a_explained: dict[str, int],
    b: _Table,
    b_given: dict[str, int],
    top_k,
    min_prob,
    sharpen: float = 2.0,
) -> _Table:
    """p(z|x) = sum over y of q(z|y) q(y|x), q = p sharpened (:func:`sharpened`): ``a`` gives
    y from x, ``b`` z from y; the y of the two tables are matched by spelling. Each x keeps its
    ``top_k`` likeliest z >= ``min_prob`` (None, 0: all)."""
    from scipy import sparse

    am = sharpened(a.matrix().tocsr(), sharpen).tocsr()
    bm = sharpened(b.matrix().tocsr(), sharpen).tocsr()
    # (a's y ids) x (b's y ids): 1 where both name the same word
    pairs = [(i, b_given[w]) for w, i in a_explained.items() if w in b_given and w != NULL]
    ai = np.asarray([i for i, j in pairs if i < am.shape[1] and j < bm.shape[0]], np.int64)
    bi = np.asarray([j for i, j in pairs if i < am.shape[1] and j < bm.shape[0]], np.int64)
    link = sparse.csr_matrix((np.ones(len(ai)), (ai, bi)), shape=(am.shape[1], bm.shape[0]))
    c = (am @ link @ bm).tocoo()
    rows, cols, vals = c.row.astype(np.int64), c.col.astype(np.int64), c.data
    keep = vals >= min_prob if min_prob else vals > 0
    rows, cols, vals = rows[keep], cols[keep], vals[keep]
    if top_k:
        order = np.lexsort((-vals, rows))
        rows, cols, vals = rows[order], cols[order], vals[order]
        start = np.searchsorted(rows, rows)  # first entry of each entry's row
        keep = np.arange(len(rows)) - start < top_k
        rows, cols, vals = rows[keep], cols[keep], vals[keep]
    keys = rows * b.n_trg + cols
    order = np.argsort(keys)
    return _Table(keys[order], vals[order], b.n_trg)


def compose(
    first: Lexicon,
    second: Lexicon,
    top_k: int | None = None,
    min_prob: float = 1e-3,
    sharpen: float = 2.0,
) -> Lexicon:
    """The pivot dictionaries of src -> trg from ``first`` (src -> pivot) and ``second`` (pivot
    -> trg): forward p(t|s) = sum_p q(t|p) q(p|s), backward p(s|t) = sum_p q(s|p) q(p|t), with
    q each factor sharpened by ``sharpen`` and the result pruned as :func:`_compose_tables`
    says. It fits on no pair (``pairs`` 0)."""
    fwd = _compose_tables(
        first.fwd, first.trg_vocab, second.fwd, second.src_vocab, top_k, min_prob, sharpen
    )
    bwd = _compose_tables(
        second.bwd, second.src_vocab, first.bwd, first.trg_vocab, top_k, min_prob, sharpen
    )
    return Lexicon(first.src_vocab, second.trg_vocab, fwd, bwd, 0)


def add_pivots(
    lexicons: LexiconSet,
    wanted: Iterable[str],
    top_k: int | None = None,
    min_prob: float = 1e-3,
    sharpen: float = 2.0,
) -> LexiconSet:
    """``lexicons`` with a pivot dictionary for each pair of ``wanted`` ("de-fr", normalised)
    that no fitted pair covers (either order), through :func:`pivot_for`'s language; the pairs
    with no such language are recorded ``absent``."""
    for key in wanted:
        if lexicons.status(key) != "absent":
            continue
        src, trg = key.split("-")
        via = pivot_for(lexicons.langs, src, trg) if "" not in lexicons.tables else None
        if via is None:
            lexicons.absent.append(key)
            log.warning("lexicon: no dictionary for %s (no language fitted with both sides)", key)
            continue
        first = lexicons.for_pair(src, via)
        second = lexicons.for_pair(via, trg)
        assert first is not None and second is not None  # pivot_for found both
        lexicons.tables[key] = compose(first, second, top_k, min_prob, sharpen)
        lexicons.pivots[key] = via
        log.info("lexicon: %s composed through %s", key, via)
    return lexicons
