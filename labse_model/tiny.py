"""Small real checkpoints for tests and the demo: a cased WordPiece vocab and a random BERT.

Nothing here downloads anything: the vocabulary is learned with ``tokenizers`` from the
sentences given, the weights are BERT's random initialisation under a fixed seed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from tokenizers import BertWordPieceTokenizer
from transformers import BertTokenizerFast

from labse_model.model import build_config, new_encoder, save_encoder

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

# Used when the caller gives no sentences: a few scripts so the vocab is not Latin-only.
_FALLBACK_SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Tom doesn't know where Mary is.",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "Le renard brun rapide saute par-dessus le chien paresseux.",
    "El rápido zorro marrón salta sobre el perro perezoso.",
    "Быстрая коричневая лиса прыгает через ленивую собаку.",
    "敏捷的棕色狐狸跳过了懒狗。",
    "素早い茶色の狐がのろまな犬を飛び越える。",
    "빠른 갈색 여우가 게으른 개를 뛰어넘는다.",
    "तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है।",
    "الثعلب البني السريع يقفز فوق الكلب الكسول.",
    "Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο.",
]


def train_wordpiece(
    sentences: Iterable[str], out_dir: str, vocab_size: int = 8000
) -> BertTokenizerFast:
    """Learn a cased WordPiece vocab (LaBSE keeps case and accents) and save a BERT tokenizer."""
    wp = BertWordPieceTokenizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=False, lowercase=False
    )
    wp.train_from_iterator(
        sentences,
        vocab_size=vocab_size,
        min_frequency=1,
        special_tokens=SPECIAL_TOKENS,
        limit_alphabet=3000,
        show_progress=False,
    )
    os.makedirs(out_dir, exist_ok=True)
    wp.save_model(out_dir)
    tok = BertTokenizerFast(
        vocab=os.path.join(out_dir, "vocab.txt"),
        do_lower_case=False,
        strip_accents=False,
        tokenize_chinese_chars=True,
    )
    tok.save_pretrained(out_dir)
    return tok


def make_tiny_checkpoint(
    out_dir: str,
    sentences: Sequence[str] | None = None,
    hidden: int = 32,
    layers: int = 2,
    heads: int = 2,
    seed: int = 0,
) -> str:
    """Write a small random LaBSE-layout checkpoint (HF + sentence-transformers) to ``out_dir``."""
    tok = train_wordpiece(
        list(sentences) if sentences else _FALLBACK_SENTENCES, out_dir, vocab_size=4000
    )
    config = build_config(
        vocab_size=len(tok),
        pad_token_id=tok.pad_token_id,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
        max_position_embeddings=128,
    )
    save_encoder(new_encoder(config, seed=seed), tok, out_dir, max_seq_length=128)
    return out_dir
