"""Write a learned vocabulary as BERT files that transformers and tokenizers load directly."""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from labse_model.vocab.learner import JOINER

# BERT's WordPiece maps a word longer than this to [UNK]; the counting stage uses the same cap.
MAX_INPUT_CHARS_PER_WORD = 100


def build_tokenizer(vocab: list[str], unk_token: str = "[UNK]") -> Tokenizer:
    """A cased BERT WordPiece tokenizer: same cleaning and splitting as the pre-tokeniser."""
    if len(set(vocab)) != len(vocab):
        raise ValueError("vocabulary has duplicate tokens")
    for tok in (unk_token, "[CLS]", "[SEP]"):
        if tok not in vocab:
            raise ValueError(f"vocabulary lacks {tok}")
    ids = {tok: i for i, tok in enumerate(vocab)}
    tok = Tokenizer(
        models.WordPiece(
            ids,
            unk_token=unk_token,
            continuing_subword_prefix=JOINER,
            max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD,
        )
    )
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=False, lowercase=False
    )
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])],
    )
    tok.decoder = decoders.WordPiece(prefix=JOINER)
    special = [t for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]") if t in ids]
    tok.add_special_tokens(special)
    return tok


def save_tokenizer(vocab: list[str], out_dir: str | Path) -> Tokenizer:
    """Write vocab.txt (id = line number), tokenizer.json and the transformers config files."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for t in vocab:
        if not t or any(c in t for c in "\n\r"):
            raise ValueError(f"token {t!r} cannot be written one per line")
    (out / "vocab.txt").write_text("".join(t + "\n" for t in vocab), encoding="utf-8")
    tok = build_tokenizer(vocab)
    tok.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": False,
        "strip_accents": False,
        "tokenize_chinese_chars": True,
        "unk_token": "[UNK]",
        "sep_token": "[SEP]",
        "pad_token": "[PAD]",
        "cls_token": "[CLS]",
        "mask_token": "[MASK]",
        "model_max_length": 512,
    }
    (out / "tokenizer_config.json").write_text(
        json.dumps(config, indent=2) + "\n", encoding="utf-8"
    )
    special = {
        k: config[k] for k in ("unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
    }
    (out / "special_tokens_map.json").write_text(
        json.dumps(special, indent=2) + "\n", encoding="utf-8"
    )
    return tok


def read_vocab(path: str | Path) -> list[str]:
    """Read vocab.txt back (one token per line)."""
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]
