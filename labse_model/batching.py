"""Tokenise with the Rust tokenizer directly and pad batches ourselves.

Going through ``tokenizers.Tokenizer`` (not the transformers wrapper) lets us tokenise a whole
chunk in one parallel call, know exact token lengths before batching (so we sort by length and
pad little), and see which sentences were truncated (so they are counted, not lost silently).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerBase


class SentenceTokenizer:
    """Turns sentences into [CLS] ... [SEP] id lists truncated to ``max_seq_length``."""

    def __init__(self, hf_tokenizer: PreTrainedTokenizerBase, max_seq_length: int) -> None:
        if max_seq_length < 3:
            raise ValueError("max_seq_length must be at least 3 ([CLS] x [SEP])")
        # A private copy: enabling truncation must not change the caller's tokenizer.
        self._tok = Tokenizer.from_str(hf_tokenizer.backend_tokenizer.to_str())
        self._tok.no_padding()
        self._tok.enable_truncation(max_length=max_seq_length)
        self.max_seq_length = max_seq_length
        self.pad_id = int(hf_tokenizer.pad_token_id or 0)
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)

    def encode(self, sentences: Sequence[str]) -> tuple[list[list[int]], int]:
        """Return the id lists and how many sentences were truncated."""
        encs = self._tok.encode_batch(list(sentences), add_special_tokens=True)
        truncated = sum(1 for e in encs if e.overflowing)
        return [e.ids for e in encs], truncated


def pad_batch(ids: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad id lists to the longest one: (input_ids, attention_mask), both int64."""
    n = len(ids)
    width = max((len(x) for x in ids), default=0)
    input_ids = np.full((n, width), pad_id, dtype=np.int64)
    mask = np.zeros((n, width), dtype=np.int64)
    for i, x in enumerate(ids):
        input_ids[i, : len(x)] = x
        mask[i, : len(x)] = 1
    return torch.from_numpy(input_ids), torch.from_numpy(mask)
