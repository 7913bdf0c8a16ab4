"""How well a vocabulary covers each language: unknown rate and wordpieces per word."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tokenizers import Tokenizer


def coverage(tok: Tokenizer, sentences: Sequence[str], unk_token: str = "[UNK]") -> dict:
    """Words, wordpieces and [UNK]s of a tokenizer on some sentences (no special tokens).

    ``unk_rate`` is per word (BERT maps a whole word to one [UNK] when any piece is missing),
    ``wordpieces_per_word`` counts every piece, [UNK] included.
    """
    unk_id = tok.token_to_id(unk_token)
    words = pieces = unks = 0
    for enc in tok.encode_batch(list(sentences), add_special_tokens=False):
        word_ids = [w for w in enc.word_ids if w is not None]
        words += len(set(word_ids))
        pieces += len(enc.ids)
        unks += sum(1 for i in enc.ids if i == unk_id)
    return {
        "sentences": len(sentences),
        "words": words,
        "wordpieces": pieces,
        "unknown": unks,
        "unk_rate": unks / words if words else None,
        "wordpieces_per_word": pieces / words if words else None,
    }


def coverage_by_lang(tok: Tokenizer, sentences_by_lang: Mapping[str, Sequence[str]]) -> dict:
    return {lang: coverage(tok, sents) for lang, sents in sorted(sentences_by_lang.items())}
