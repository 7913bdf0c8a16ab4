"""MLM/TLM inputs: masking statistics, packing, TLM layout, packed TLM rows."""

from __future__ import annotations

import numpy as np
import pytest

from labse_model.masking import (
    IGNORE,
    MaskSpec,
    collate,
    mask_tokens,
    pack_rows,
    pack_sentences,
    tlm_pair,
)

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
SPECIALS = (PAD, UNK, CLS, SEP, MASK)
SPEC = MaskSpec(mask_id=MASK, special_ids=SPECIALS, vocab_size=1000)


def _random_seqs(rng: np.random.Generator, n: int, max_len: int = 200) -> list:
    from labse_model.masking import PackedSeq

    seqs = []
    for _ in range(n):
        k = int(rng.integers(1, max_len - 2))
        ids = [CLS, *rng.integers(5, 1000, size=k).tolist(), SEP]
        seqs.append(PackedSeq(ids, [0] * len(ids)))
    return seqs


def test_masking_statistics_over_many_sequences():
    rng = np.random.default_rng(0)
    seqs = _random_seqs(rng, 3000, max_len=500)  # some long enough to hit the 80 cap
    arrays = collate(seqs, PAD, SPEC.special_ids)
    ids, labels = mask_tokens(arrays["input_ids"], arrays["real"], SPEC, rng)
    chosen = labels != IGNORE
    real = arrays["real"]
    per_seq = chosen.sum(1)
    n_real = real.sum(1)
    # Never a special token or padding; labels hold the original ids.
    assert not (chosen & ~real).any()
    assert (labels[chosen] == arrays["input_ids"][chosen]).all()
    assert (ids[~chosen] == arrays["input_ids"][~chosen]).all()
    # At least one per sequence, never more than 80.
    assert per_seq.min() >= 1 and per_seq.max() == 80
    # 20% of real tokens where the cap and the minimum do not bind.
    free = (n_real >= 10) & (n_real <= 390)
    rate = per_seq[free].sum() / n_real[free].sum()
    assert abs(rate - 0.2) < 0.005, rate
    # 80 / 10 / 10.
    orig, new = arrays["input_ids"][chosen], ids[chosen]
    masked = (new == MASK).mean()
    same = (new == orig).mean()
    rand = 1 - masked - same
    assert abs(masked - 0.8) < 0.01 and abs(rand - 0.1) < 0.01 and abs(same - 0.1) < 0.01
    # Random replacements are ordinary tokens.
    replaced = new[(new != MASK) & (new != orig)]
    assert replaced.min() >= 5


def test_short_sentences_always_get_a_mask_and_empty_ones_none():
    from labse_model.masking import PackedSeq

    rng = np.random.default_rng(1)
    seqs = [PackedSeq([CLS, 7, SEP], [0, 0, 0])] * 500 + [PackedSeq([CLS, SEP], [0, 0])] * 10
    arrays = collate(seqs, PAD, SPEC.special_ids)
    _ids, labels = mask_tokens(arrays["input_ids"], arrays["real"], SPEC, rng)
    per_seq = (labels != IGNORE).sum(1)
    assert (per_seq[:500] == 1).all()  # a Bernoulli(0.2) draw would leave ~80% unmasked
    assert (per_seq[500:] == 0).all()


def test_packing_fills_sequences_and_counts_truncation():
    stats: dict = {}
    sents = [[10] * 5, [11] * 5, [12] * 5, [13] * 30, [14] * 3]
    out = list(pack_sentences(iter(sents), 16, CLS, SEP, stats))
    seqs = [s for s, _ in out]
    assert seqs[0].ids == [CLS, *[10] * 5, SEP, *[11] * 5, SEP]  # 13 tokens; the third does not fit
    assert all(len(s.ids) <= 16 for s in seqs)
    assert seqs[2].ids == [CLS, *[13] * 14, SEP]  # longer than max: truncated, alone
    assert stats["truncated"] == 1
    # The cursor after each sequence is the number of sentences it and its predecessors hold.
    assert [c for _, c in out] == [2, 3, 4, 5]


def test_truncation_counts_resume_exactly_from_every_cursor():
    """A resume from a sequence's cursor continues the truncation count, never recounts: the
    sentence read ahead (it did not fit, so it starts the next sequence) is not yet in the
    count saved with the sequence before it. Long sentences right after short ones put that
    read-ahead sentence at a sequence boundary (a resumed pretraining run counted 12 truncated
    sentences where the uninterrupted one counted 11)."""
    sents = [[10] * 5, [11] * 30, [12] * 3, [13] * 4, [14] * 20, [15] * 40, [16] * 2, [17] * 18]
    for separate in (False, True):
        stats: dict = {}
        seen = [
            (c, stats.get("truncated", 0))
            for _, c in pack_sentences(iter(sents), 16, CLS, SEP, stats, separate)
        ]
        total = stats["truncated"]
        assert total == 4
        for cursor, counted in seen:
            # What a checkpoint at this sequence holds: its cursor and the count so far; the
            # resumed reader starts at the cursor with a fresh count.
            assert counted == sum(len(s) > 14 for s in sents[:cursor]), (separate, cursor)
            rest: dict = {}
            for _ in pack_sentences(iter(sents[cursor:]), 16, CLS, SEP, rest, separate):
                pass
            assert counted + rest.get("truncated", 0) == total, (separate, cursor)


def test_tlm_pair_layout():
    seq, cut = tlm_pair([10, 11, 12], [20, 21], 16, CLS, SEP)
    assert seq.ids == [CLS, 10, 11, 12, SEP, 20, 21, SEP] and not cut
    assert seq.types == [0, 0, 0, 0, 0, 1, 1, 1]
    seq, cut = tlm_pair([10] * 20, [20] * 4, 16, CLS, SEP)
    assert cut and len(seq.ids) == 16 and seq.ids.count(20) == 4  # the longer side is cut


def _masked_pairs(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    seqs = [
        tlm_pair(
            list(rng.integers(10, 500, rng.integers(1, 20))),
            list(rng.integers(10, 500, rng.integers(1, 20))),
            64,
            CLS,
            SEP,
        )[0]
        for _ in range(n)
    ]
    a = collate(seqs, PAD, SPECIALS)
    ids, labels = mask_tokens(
        a["input_ids"], a["real"], MaskSpec(mask_id=MASK, special_ids=SPECIALS, vocab_size=500), rng
    )
    return {
        "input_ids": ids,
        "token_type_ids": a["token_type_ids"],
        "attention_mask": a["attention_mask"],
        "labels": labels,
    }


def test_pack_rows_layout():
    rows = _masked_pairs(20)
    p = pack_rows(rows, 64)
    lengths = rows["attention_mask"].sum(1)
    assert len(p["input_ids"]) < len(lengths) and p["input_ids"].shape[1] <= 64
    assert int(p["attention_mask"].sum()) == int(lengths.sum())  # no token lost or added
    # Read back in order, segment by segment: the original rows, positions restarting at 0.
    got = []
    for r in range(len(p["input_ids"])):
        for sid in range(1, int(p["segment_ids"][r].max()) + 1):
            at = p["segment_ids"][r] == sid
            assert p["position_ids"][r][at].tolist() == list(range(int(at.sum())))
            got.append(
                (
                    p["input_ids"][r][at].tolist(),
                    p["labels"][r][at].tolist(),
                    p["token_type_ids"][r][at].tolist(),
                )
            )
    want = [
        (
            rows["input_ids"][i, :n].tolist(),
            rows["labels"][i, :n].tolist(),
            rows["token_type_ids"][i, :n].tolist(),
        )
        for i, n in enumerate(lengths)
    ]
    assert got == want
    # A row full to max_len is never joined by another one.
    assert all(int(n) <= 64 for n in p["attention_mask"].sum(1))


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_packed_pairs_give_the_unpacked_losses(impl):
    """Attention kept within each packed pair: the encoder computes what it computes unpacked."""
    import torch
    from transformers import BertModel

    from labse_model.mlm import MaskedLM
    from labse_model.model import SentenceEncoder, build_config

    cfg = build_config(
        500,
        pad_token_id=PAD,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        initializer_range=0.1,
        dropout=0.0,
    )
    cfg._attn_implementation = impl
    torch.manual_seed(0)
    model = MaskedLM(SentenceEncoder(BertModel(cfg), pooling="mean", use_pooler=False)).eval()
    rows = _masked_pairs(24, seed=1)
    p = pack_rows(rows, 64)
    t = {k: torch.from_numpy(v) for k, v in rows.items()}
    tp = {k: torch.from_numpy(v) for k, v in p.items()}
    with torch.no_grad():
        flat, _, _ = model(t["input_ids"], t["attention_mask"], t["token_type_ids"], t["labels"])
        packed, _, _ = model(
            tp["input_ids"],
            tp["attention_mask"],
            tp["token_type_ids"],
            tp["labels"],
            position_ids=tp["position_ids"],
            segment_ids=tp["segment_ids"],
        )
        # Without the segment mask the pairs would see each other: the losses must differ.
        leaky, _, _ = model(
            tp["input_ids"],
            tp["attention_mask"],
            tp["token_type_ids"],
            tp["labels"],
            position_ids=tp["position_ids"],
        )
    assert len(flat) == len(packed) > 0
    assert torch.allclose(flat, packed, atol=1e-5)
    assert not torch.allclose(flat, leaky, atol=1e-3)


def test_separate_sentences_are_encoded_as_if_alone():
    """``sentence_segments``: [CLS] s1 [SEP] [CLS] s2 [SEP] ..., each sentence its own segment."""
    import torch
    from transformers import BertModel

    from labse_model.mlm import MaskedLM
    from labse_model.model import SentenceEncoder, build_config

    rng = np.random.default_rng(3)
    sents = [rng.integers(10, 500, int(rng.integers(1, 15))).tolist() for _ in range(30)]
    packed = [s for s, _ in pack_sentences(iter(sents), 48, CLS, SEP, {}, separate=True)]
    assert sum(s.sentences for s in packed) == 30 and len(packed) < 30
    a = collate(packed, PAD, SPECIALS)
    ids, labels = mask_tokens(
        a["input_ids"], a["real"], MaskSpec(mask_id=MASK, special_ids=SPECIALS, vocab_size=500), rng
    )
    # The same sentences (and masks) one per row: [CLS] s [SEP] at positions 0.. .
    alone = []
    for r in range(len(packed)):
        for sid in range(1, int(a["segment_ids"][r].max()) + 1):
            at = a["segment_ids"][r] == sid
            assert a["position_ids"][r][at].tolist() == list(range(int(at.sum())))
            assert a["input_ids"][r][at][0] == CLS and a["input_ids"][r][at][-1] == SEP
            alone.append((ids[r][at], labels[r][at]))
    assert [len(x) - 2 for x, _ in alone] == [len(s) for s in sents]
    width = max(len(x) for x, _ in alone)
    ids1 = np.zeros((len(alone), width), dtype=np.int64)
    lab1 = np.full_like(ids1, IGNORE)
    for i, (x, y) in enumerate(alone):
        ids1[i, : len(x)], lab1[i, : len(y)] = x, y
    att1 = (np.arange(width)[None, :] < np.array([len(x) for x, _ in alone])[:, None]).astype(
        np.int64
    )

    cfg = build_config(
        500,
        pad_token_id=PAD,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        initializer_range=0.1,
        dropout=0.0,
    )
    torch.manual_seed(0)
    model = MaskedLM(SentenceEncoder(BertModel(cfg), pooling="mean", use_pooler=False)).eval()
    T = torch.from_numpy
    with torch.no_grad():
        one, _, _ = model(T(ids1), T(att1), T(np.zeros_like(ids1)), T(lab1))
        many, _, _ = model(
            T(ids),
            T(a["attention_mask"]),
            T(a["token_type_ids"]),
            T(labels),
            position_ids=T(a["position_ids"]),
            segment_ids=T(a["segment_ids"]),
        )
    assert len(one) == len(many) > 0
    assert torch.allclose(one, many, atol=1e-5)
