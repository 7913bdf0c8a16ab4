"""MLM/TLM inputs: packing sentences, building translation pairs, and BERT masking.

Masking (LaBSE follows BERT): 20% of the real tokens of a sequence, at most 80, each chosen
position becomes [MASK] (80%), a random token (10%) or stays unchanged (10%). [CLS], [SEP] and
padding are never chosen. The number of positions is drawn per sequence as
``floor(0.2 * n + u)`` with ``u ~ U(0, 1)`` (mean exactly 20%), then clamped to ``[1, 80]``: an
independent Bernoulli draw per token would leave a third of 5-token sentences with nothing to
predict.

TLM positions are **continuous** across ``[CLS] a [SEP] b [SEP]`` (BERT's two-segment input), not
reset at ``b`` as XLM's ``reset_positions``. XLM needed the reset because its language
embeddings, not segments, told the halves apart; LaBSE drops language embeddings and keeps
BERT's token types (0 for ``a``, 1 for ``b``). Continuous positions keep position ``p`` meaning
the same thing in MLM, TLM and the fine-tuned single-sentence encoder, and stop the two halves
from sharing positions that only the token type can separate.

Packed TLM rows (``pack_rows``, ``pretrain.pack_pairs``): a pair is ~25 tokens against a 64- or
512-token row, so one pair per row is mostly padding. Several masked pairs share a row, each with
its own segment: attention stays inside the pair and its positions start at 0, so every pair
is encoded exactly as alone (tests/labse_model/test_masking.py). Packed monolingual sentences
get the same treatment with ``pretrain.sentence_segments`` (``pack_sentences(separate=True)``);
without it they attend to each other, as in BERT.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

IGNORE = -100


@dataclass
class MaskSpec:
    rate: float = 0.2
    max_per_seq: int = 80
    mask_share: float = 0.8
    random_share: float = 0.1
    mask_id: int = 4
    special_ids: tuple[int, ...] = (0, 1, 2, 3, 4)
    vocab_size: int = 0


def mask_tokens(
    input_ids: np.ndarray, real: np.ndarray, spec: MaskSpec, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Mask a (batch, length) id array; ``real`` marks maskable positions (not specials/pad).

    Returns (masked ids, labels) with labels IGNORE where nothing is predicted.
    """
    ids = input_ids.copy()
    labels = np.full_like(ids, IGNORE)
    n_real = real.sum(1)
    k = np.floor(spec.rate * n_real + rng.random(len(ids))).astype(np.int64)
    k = np.minimum(np.maximum(k, 1), spec.max_per_seq)
    k = np.minimum(k, n_real)  # a sequence without real tokens gets none
    # Random scores, non-maskable positions pushed last: the k smallest are the chosen ones.
    scores = rng.random(ids.shape)
    scores[~real] = 2.0
    order = np.argsort(scores, axis=1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(ids.shape[1])[None, :].repeat(len(ids), 0), axis=1)
    chosen = rank < k[:, None]
    labels[chosen] = ids[chosen]
    u = rng.random(ids.shape)
    to_mask = chosen & (u < spec.mask_share)
    to_rand = chosen & (u >= spec.mask_share) & (u < spec.mask_share + spec.random_share)
    ids[to_mask] = spec.mask_id
    if to_rand.any():
        # Random replacements come from the ordinary tokens only.
        n_special = max(spec.special_ids) + 1
        ids[to_rand] = rng.integers(n_special, spec.vocab_size, size=int(to_rand.sum()))
    return ids, labels


@dataclass
class PackedSeq:
    ids: list[int]
    types: list[int]
    sentences: int = 1
    segments: list[int] | None = None  # per token: 1, 2, ... per sentence (separate packing)


def pack_sentences(
    token_lists: Iterator[list[int]],
    max_len: int,
    cls_id: int,
    sep_id: int,
    stats: dict,
    separate: bool = False,
) -> Iterator[tuple[PackedSeq, int]]:
    """Greedy packing: ``[CLS] s1 [SEP] s2 [SEP] ...`` up to ``max_len`` tokens.

    ``token_lists`` yields word-piece ids without specials. Yields (sequence, sentences
    consumed so far): a sentence that does not fit starts the next sequence, so the count is
    where a resume continues. A sentence longer than ``max_len - 2`` is truncated (counted in
    ``stats["truncated"]``) and fills a sequence alone.

    ``separate``: ``[CLS] s1 [SEP] [CLS] s2 [SEP] ...``, each sentence its own segment
    (``PackedSeq.segments``), to be encoded as if alone: the shape the sentence encoder is
    fine-tuned and used on.
    """
    start = [] if separate else [cls_id]
    cur: list[int] = list(start)
    segs: list[int] = []
    n_in = 0
    consumed = 0
    budget = max_len - 2
    cost = 2 if separate else 1

    def emit() -> PackedSeq:
        return PackedSeq(cur, [0] * len(cur), n_in, segs if separate else None)

    for toks in token_lists:
        cut = len(toks) > budget
        toks = toks[:budget]
        if n_in and len(cur) + len(toks) + cost > max_len:
            yield emit(), consumed
            cur, segs, n_in = list(start), [], 0
        # Counted once the sentence joins a sequence, not when it is read ahead: the count seen
        # with a sequence must cover the sentences up to its cursor, or a resume from that
        # cursor counts the read-ahead sentence a second time.
        if cut:
            stats["truncated"] = stats.get("truncated", 0) + 1
        if separate:
            cur.append(cls_id)
        cur.extend(toks)
        cur.append(sep_id)
        n_in += 1
        segs.extend([n_in] * (len(toks) + 2))
        consumed += 1
    if n_in:
        yield emit(), consumed


def tlm_pair(
    a: list[int], b: list[int], max_len: int, cls_id: int, sep_id: int
) -> tuple[PackedSeq, bool]:
    """``[CLS] a [SEP] b [SEP]`` with token types 0/1; the longer side is cut first to fit."""
    budget = max_len - 3
    truncated = len(a) + len(b) > budget
    a, b = list(a), list(b)
    while len(a) + len(b) > budget:
        if len(a) >= len(b):
            a.pop()
        else:
            b.pop()
    ids = [cls_id, *a, sep_id, *b, sep_id]
    types = [0] * (len(a) + 2) + [1] * (len(b) + 1)
    return PackedSeq(ids, types, 2), truncated


def collate(
    seqs: Sequence[PackedSeq], pad_id: int, special_ids: Sequence[int]
) -> dict[str, np.ndarray]:
    """Right-pad to the longest sequence: ids, token types, attention mask, maskable positions."""
    width = max(len(s.ids) for s in seqs)
    ids = np.full((len(seqs), width), pad_id, dtype=np.int64)
    types = np.zeros_like(ids)
    att = np.zeros_like(ids)
    for i, s in enumerate(seqs):
        ids[i, : len(s.ids)] = s.ids
        types[i, : len(s.types)] = s.types
        att[i, : len(s.ids)] = 1
    real = (att == 1) & ~np.isin(ids, np.asarray(special_ids))
    out = {"input_ids": ids, "token_type_ids": types, "attention_mask": att, "real": real}
    if any(s.segments is not None for s in seqs):
        # Rows without segments are one segment; positions restart in each segment.
        seg = att.copy()
        pos = np.broadcast_to(np.arange(width), ids.shape).copy()
        for i, s in enumerate(seqs):
            if s.segments is not None:
                sg = np.asarray(s.segments)
                seg[i, : len(sg)] = sg
                starts = np.flatnonzero(np.diff(sg, prepend=-1))
                pos[i, : len(sg)] = np.arange(len(sg)) - np.repeat(
                    starts, np.diff(np.append(starts, len(sg)))
                )
        out["segment_ids"], out["position_ids"] = seg, pos
    return out


def pack_rows(arrays: dict[str, np.ndarray], max_len: int) -> dict[str, np.ndarray]:
    """Several short rows (already masked: ``input_ids``, ``token_type_ids``, ``attention_mask``,
    ``labels``) laid side by side in rows of ``max_len``, in order, first fit.

    Each packed row gets ``segment_ids`` (1, 2, ... per original row, 0 on padding) and
    ``position_ids`` restarting at 0 in every segment. With attention kept within a segment
    (:func:`segment_attention_mask`) the encoder computes exactly what it computes on the rows
    one by one; only the padding, a third of a demo TLM batch, is gone.
    """
    lengths = arrays["attention_mask"].sum(1)
    rows: list[list[int]] = []
    used = max_len + 1
    for i, n in enumerate(lengths):
        if used + n > max_len:
            rows.append([])
            used = 0
        rows[-1].append(i)
        used += int(n)
    width = int(max((sum(int(lengths[i]) for i in r) for r in rows), default=1))
    out = {
        k: np.zeros((len(rows), width), dtype=np.int64)
        for k in ("input_ids", "token_type_ids", "attention_mask", "position_ids", "segment_ids")
    }
    out["labels"] = np.full((len(rows), width), IGNORE, dtype=np.int64)
    for r, members in enumerate(rows):
        at = 0
        for seg, i in enumerate(members, start=1):
            n = int(lengths[i])
            for k in ("input_ids", "token_type_ids", "attention_mask", "labels"):
                out[k][r, at : at + n] = arrays[k][i, :n]
            out["position_ids"][r, at : at + n] = np.arange(n)
            out["segment_ids"][r, at : at + n] = seg
            at += n
    return out


def segment_attention_mask(
    segment_ids: torch.Tensor, attn_implementation: str, dtype: torch.dtype
) -> torch.Tensor:
    """(batch, 1, length, length) mask: a token attends to the tokens of its own segment.

    Padding (segment 0) attends to padding, so no query row is empty (an all-masked row is NaN
    in SDPA). Bool for SDPA; additive float for the eager implementation, which adds the mask.
    """
    allowed = (segment_ids[:, :, None] == segment_ids[:, None, :]).unsqueeze(1)
    if attn_implementation == "sdpa":
        return allowed
    if attn_implementation != "eager":
        raise ValueError(
            f"segment-packed rows need sdpa or eager attention, not {attn_implementation!r}"
        )
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(
        ~allowed, torch.finfo(dtype).min
    )
