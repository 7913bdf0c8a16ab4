"""From word counts to the vocabulary files; and the whole stage in-process, without Beam.

``finish_vocab`` is the common tail of the Beam job (``pipelines.vocab``), of the learner CLI
(``python -m labse_model.vocab``) and of ``build_vocab``: learn, export, evaluate on held-out
sentences, and write ``vocab_stats.json`` and ``stats.json``.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from labse_common.config import to_dict
from labse_common.errors import InputError
from labse_common.sections.vocab import VocabConfig
from labse_common.stats import StageCounter, check_balanced, write_report
from labse_model.vocab.counting import WORDS, sentence_words
from labse_model.vocab.evaluate import coverage_by_lang
from labse_model.vocab.export import save_tokenizer
from labse_model.vocab.learner import LearnerParams, char_tokens, learn_vocab
from labse_model.vocab.smoothing import language_weights

log = logging.getLogger(__name__)

STAGE = "vocab"
COUNTS_FILE = "word_counts.parquet"
HELDOUT_FILE = "heldout.parquet"
SUMMARY_FILE = "languages.json"
LANGS = "languages"


def min_vocab_size_from_sample(
    sample: Iterable[str],
    n_langs: int,
    params: LearnerParams,
    smoothing: float,
    min_count: float,
    max_word_length: int,
    heldout_fraction: float = 0.0,
) -> tuple[int, int]:
    """A lower bound of the vocabulary size the learner will need for the whole corpus, from a
    sample of its sentences: (reserved + alphabet tokens, characters surely in the alphabet).

    Checked before counting, so a vocab_size that cannot hold the alphabet fails in seconds,
    not after the whole corpus was counted. Sound (never above the true need): a character is
    counted only if the sample alone guarantees it into the alphabet. Every smoothed weight
    w_l = p_l**(alpha-1) / sum_k p_k**alpha is at least n_langs**(alpha-1) (p_l <= 1, and the
    sum is largest for equal shares), and full-corpus counts are at least the sample's, so a
    word's smoothed count is at least w_min * its sample count: words reaching ``min_count``
    that way are surely learned from, and their characters whose count so bounded reaches
    ``char_min_count`` are surely in the alphabet (at most ``max_unique_chars`` of them).
    """
    w_min = max(1, n_langs) ** (smoothing - 1.0)
    words: Counter[str] = Counter()
    scratch = StageCounter()
    for text in sample:
        kind, value = sentence_words(text, scratch, max_word_length, heldout_fraction)
        if kind == "count":
            words.update(value)  # type: ignore[arg-type]
    reserved = set(params.reserved_tokens)
    chars: Counter[str] = Counter()
    for word, n in words.items():
        if (
            w_min * n >= min_count
            and len(word) <= params.learner.max_token_length
            and word not in reserved
        ):
            for ch in word:
                chars[ch] += n
    sure = sorted(ord(ch) for ch, n in chars.items() if w_min * n >= params.learner.char_min_count)
    n_res = len(params.reserved_tokens)
    if (
        len(sure) > params.learner.max_unique_chars
    ):  # which ones make the cut is unknown: 1 token each
        return n_res + params.learner.max_unique_chars, params.learner.max_unique_chars
    return n_res + char_tokens(np.array(sure, dtype=np.uint32), params), len(sure)


def language_summary(
    totals: Mapping[str, int], sentences: Mapping[str, int], types: Mapping[str, int], alpha: float
) -> dict[str, dict]:
    """Per language: sentences counted, word occurrences, raw share p_l, weight, smoothed share."""
    weights = language_weights(totals, alpha)
    n = sum(totals.values()) or 1
    out = {}
    for lang in sorted(set(totals) | set(sentences)):
        t = totals.get(lang, 0)
        w = weights.get(lang, 0.0)
        out[lang] = {
            "sentences": sentences.get(lang, 0),
            "word_occurrences": t,
            "word_types": types.get(lang, 0),
            "raw_share": t / n,
            "weight": w,
            "smoothed_share": w * t / n,
        }
    return out


def write_counts(
    path: str | Path, words: Sequence[str], counts: np.ndarray, raw: np.ndarray
) -> None:
    order = np.lexsort((np.array(words, dtype=object), -np.asarray(counts)))
    table = pa.table(
        {
            "word": pa.array([words[i] for i in order], pa.string()),
            "count": pa.array(np.asarray(counts, dtype=np.float64)[order]),
            "raw_count": pa.array(np.asarray(raw, dtype=np.int64)[order]),
        }
    )
    pq.write_table(table, str(path))


def read_counts(path: str | Path) -> tuple[list[str], np.ndarray]:
    table = pq.read_table(str(path), columns=["word", "count"])
    words = table.column("word").to_pylist()
    counts = table.column("count").to_numpy(zero_copy_only=False).astype(np.float64)
    return words, counts


def write_heldout(path: str | Path, heldout_by_lang: Mapping[str, Sequence[str]]) -> None:
    rows = [(lang, t) for lang, texts in sorted(heldout_by_lang.items()) for t in texts]
    table = pa.table(
        {
            "lang": pa.array([r[0] for r in rows], pa.string()),
            "text": pa.array([r[1] for r in rows], pa.string()),
        }
    )
    pq.write_table(table, str(path))


def read_heldout(path: str | Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    p = Path(path)
    if not p.exists():
        return out
    table = pq.read_table(str(p), columns=["lang", "text"])
    for lang, text in zip(table.column("lang").to_pylist(), table.column("text").to_pylist()):
        out.setdefault(lang, []).append(text)
    return out


def finish_vocab(
    words: Sequence[str],
    counts: np.ndarray,
    params: LearnerParams,
    out_dir: str | Path,
    counter: StageCounter,
    heldout_by_lang: Mapping[str, Sequence[str]] | None = None,
    summary: Mapping[str, dict] | None = None,
    extra: Mapping[str, Any] | None = None,
    source: str | None = None,
    flag: str | None = None,
) -> Path:
    """Learn, export and evaluate; write vocab_stats.json and a balanced stats.json. Nothing
    learned beyond the special tokens is an InputError naming ``source`` (``flag``)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    result = learn_vocab(list(words), counts, params)
    counter.merge(result.counts)
    if len(result.vocab) <= len(params.reserved_tokens):
        # A vocabulary of only [PAD], [UNK], ... tokenizes every sentence to [UNK]: text that is
        # only zero-width or control characters normalises to nothing, and that is the input's
        # fault, not a result (every command would otherwise go on with exit 0).
        raise InputError(
            source,
            "no usable word after normalisation (every sentence is empty "
            "or only zero-width/control characters): the vocabulary would hold only "
            f"the {len(params.reserved_tokens)} special tokens",
            flag,
        )
    tok = save_tokenizer(result.vocab, out)
    cov = coverage_by_lang(tok, heldout_by_lang or {})
    langs: dict[str, dict] = {}
    for lang in sorted(set(cov) | set(summary or {})):
        langs[lang] = {**(summary or {}).get(lang, {}), "heldout": cov.get(lang)}
    vocab_stats = {
        "vocab_size": len(result.vocab),
        "requested_vocab_size": params.vocab_size,
        "threshold": result.threshold,
        "fill_threshold": result.fill_threshold,
        "filled_tokens": result.filled,
        "learn_seconds": round(result.seconds, 3),
        "threshold_search": [[round(t, 6), n] for t, n in result.search],
        "learner": {
            "vocab_size": params.vocab_size,
            "reserved_tokens": params.reserved_tokens,
            **to_dict(params.learner),
            "lower_thresh": params.lower_thresh,
            "upper_thresh": params.upper_thresh,
            "max_search_steps": params.max_search_steps,
            "skip_unreachable_joiners": params.skip_unreachable_joiners,
        },
        **(extra or {}),
        "languages": langs,
    }
    (out / "vocab_stats.json").write_text(
        json.dumps(vocab_stats, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    report = counter.to_report(STAGE, vocab_size=len(result.vocab))
    problems = check_balanced(report)
    if problems:
        raise RuntimeError(f"vocab stats do not balance: {problems}")
    write_report(str(out / "stats.json"), report)
    return out


def _count_languages(
    sentences_by_lang: Mapping[str, Sequence[str]],
    cfg: VocabConfig,
    counter: StageCounter,
    heldout: dict[str, list[str]],
) -> tuple[dict[str, Counter[str]], dict[str, int]]:
    """Word counts and counted sentences per language; held-out sentences go to ``heldout``,
    a language without words is dropped (counted)."""
    per_lang: dict[str, Counter[str]] = {}
    sent_counts: dict[str, int] = {}
    for lang, sentences in sentences_by_lang.items():
        counter.add_in(LANGS)
        c: Counter[str] = Counter()
        n_sent = 0
        for text in sentences:
            kind, value = sentence_words(text, counter, cfg.max_word_length, cfg.heldout_fraction)
            if kind == "count":
                c.update(value)  # type: ignore[arg-type]
                n_sent += 1
            elif kind == "heldout":
                heldout.setdefault(lang, []).append(value)  # type: ignore[arg-type]
        if sum(c.values()) == 0:
            counter.add_dropped(LANGS, "empty")
            log.warning("language %s has no words to count", lang)
            continue
        counter.add_out(LANGS)
        per_lang[lang] = c
        sent_counts[lang] = n_sent
    return per_lang, sent_counts


def build_vocab(
    sentences_by_lang: Mapping[str, Sequence[str]],
    cfg: VocabConfig,
    out_dir: str | Path,
    heldout_by_lang: Mapping[str, Sequence[str]] | None = None,
    source: str | None = None,
) -> Path:
    """Build a vocabulary in-process (no Beam): count, smooth, learn, export, evaluate.

    ``sentences_by_lang`` maps a language code to its sentences; ``cfg`` is the ``vocab:``
    section as loaded (``labse_common.config.load("vocab", ...)``). Held-out sentences for
    ``vocab_stats.json`` come from ``heldout_by_lang`` and/or a hashed ``vocab.heldout_fraction``
    of the input, all of them evaluated (``max_heldout_per_lang`` bounds what the Beam job's
    workers keep).
    Returns ``out_dir``, which holds vocab.txt, tokenizer.json (plus the transformers config
    files), word_counts.parquet, heldout.parquet, languages.json, vocab_stats.json and
    stats.json: the same layout as ``python -m pipelines.vocab``.
    """
    params = LearnerParams(cfg.vocab_size, cfg.learner)
    counter = StageCounter()
    heldout: dict[str, list[str]] = {k: list(v) for k, v in (heldout_by_lang or {}).items()}
    per_lang, sent_counts = _count_languages(sentences_by_lang, cfg, counter, heldout)
    totals = {lang: sum(c.values()) for lang, c in per_lang.items()}
    weights = language_weights(totals, cfg.smoothing)
    smoothed: dict[str, float] = {}
    raw: dict[str, int] = {}
    for lang, c in per_lang.items():
        w = weights[lang]
        for word, n in c.items():
            smoothed[word] = smoothed.get(word, 0.0) + w * n
            raw[word] = raw.get(word, 0) + n
    words = [w for w, s in smoothed.items() if s >= cfg.min_count]
    below = sum(raw[w] for w, s in smoothed.items() if s < cfg.min_count)
    counter.add_dropped(WORDS, "below_min_count", below)
    counter.add_out(WORDS, sum(raw[w] for w in words))
    counts = np.array([smoothed[w] for w in words], dtype=np.float64)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_counts(out / COUNTS_FILE, words, counts, np.array([raw[w] for w in words]))
    write_heldout(out / HELDOUT_FILE, heldout)
    summary = language_summary(
        totals, sent_counts, {k: len(v) for k, v in per_lang.items()}, cfg.smoothing
    )
    (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    extra = {
        "smoothing": cfg.smoothing,
        "min_count": cfg.min_count,
        "max_word_length": cfg.max_word_length,
    }
    return finish_vocab(
        words,
        counts,
        params,
        out,
        counter,
        heldout,
        summary,
        extra,
        source=source
        or f"the sentences of {', '.join(sorted(sentences_by_lang)) or 'no language'}",
    )
