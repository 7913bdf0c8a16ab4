"""Checkpoint layouts: HF BertModel, sentence-transformers, save/load round trip, corruption."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from labse_model.encode import Encoder  # noqa: E402
from labse_model.model import CheckpointError, load_encoder, save_encoder  # noqa: E402
from labse_model.tiny import make_tiny_checkpoint  # noqa: E402

SENTS = [
    "Tom doesn't know where Mary is.",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "素早い茶色の狐がのろまな犬を飛び越える。",
    "Быстрая коричневая лиса прыгает через ленивую собаку.",
    "Hi.",
    "",
    "A much longer sentence that goes on and on " * 10,
]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    return make_tiny_checkpoint(str(tmp_path_factory.mktemp("tiny")), SENTS[:4], hidden=32)


def _hf_reference(path: str, sents: list[str], max_len: int = 128) -> np.ndarray:
    """The Interface's definition: normalised pooler_output of transformers' own BertModel."""
    from transformers import BertModel, BertTokenizerFast

    model = BertModel.from_pretrained(path).eval()
    tok = BertTokenizerFast.from_pretrained(path)
    with torch.no_grad():
        b = tok(sents, padding=True, truncation=True, max_length=max_len, return_tensors="pt")
        out = model(**b).pooler_output
    return torch.nn.functional.normalize(out, dim=-1).numpy()


def test_encoder_matches_hf_and_sentence_transformers(tiny):
    from sentence_transformers import SentenceTransformer

    enc = Encoder.from_pretrained(tiny, device="cpu")
    got = enc.encode(SENTS, batch_size=3)
    assert got.shape == (len(SENTS), 32) and got.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(got, _hf_reference(tiny, SENTS), atol=2e-6)
    st = SentenceTransformer(tiny, device="cpu")
    np.testing.assert_allclose(got, st.encode(SENTS, batch_size=3), atol=2e-6)
    # Input order is kept although encode() sorts by length internally.
    rev = enc.encode(SENTS[::-1], batch_size=2)
    np.testing.assert_allclose(rev[::-1], got, atol=2e-6)
    assert enc.last_truncated == 1  # the long sentence exceeds 128 pieces
    half = enc.encode(SENTS, fp16=True)
    assert half.dtype == np.float16
    np.testing.assert_allclose(half.astype(np.float32), got, atol=2e-3)
    assert enc.encode([]).shape == (0, 32)


def test_truncation_is_counted(tiny):
    enc = Encoder.from_pretrained(tiny, device="cpu", max_seq_length=8)
    enc.encode(SENTS)
    assert enc.last_truncated >= 2  # the German and the long sentence exceed 8 pieces


def _write_st_layout(root: str, tiny: str, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """The released LaBSE sentence-transformers layout, written by hand with a random Dense."""
    from safetensors.torch import save_file
    from transformers import BertModel, BertTokenizerFast

    bert = BertModel.from_pretrained(tiny)
    bert.save_pretrained(os.path.join(root, "0_Transformer"))
    BertTokenizerFast.from_pretrained(tiny).save_pretrained(os.path.join(root, "0_Transformer"))
    with open(os.path.join(root, "0_Transformer", "sentence_bert_config.json"), "w") as f:
        json.dump({"max_seq_length": 128, "do_lower_case": False}, f)
    g = torch.Generator().manual_seed(seed)
    w, b = torch.randn(32, 32, generator=g) * 0.2, torch.randn(32, generator=g) * 0.1
    os.makedirs(os.path.join(root, "1_Pooling"))
    with open(os.path.join(root, "1_Pooling", "config.json"), "w") as f:
        json.dump(
            {
                "word_embedding_dimension": 32,
                "pooling_mode_cls_token": True,
                "pooling_mode_mean_tokens": False,
                "pooling_mode_max_tokens": False,
            },
            f,
        )
    os.makedirs(os.path.join(root, "2_Dense"))
    with open(os.path.join(root, "2_Dense", "config.json"), "w") as f:
        json.dump(
            {
                "in_features": 32,
                "out_features": 32,
                "bias": True,
                "activation_function": "torch.nn.modules.activation.Tanh",
            },
            f,
        )
    save_file(
        {"linear.weight": w, "linear.bias": b}, os.path.join(root, "2_Dense", "model.safetensors")
    )
    os.makedirs(os.path.join(root, "3_Normalize"))
    modules = [
        {
            "idx": 0,
            "name": "0",
            "path": "0_Transformer",
            "type": "sentence_transformers.models.Transformer",
        },
        {
            "idx": 1,
            "name": "1",
            "path": "1_Pooling",
            "type": "sentence_transformers.models.Pooling",
        },
        {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"},
        {
            "idx": 3,
            "name": "3",
            "path": "3_Normalize",
            "type": "sentence_transformers.models.Normalize",
        },
    ]
    with open(os.path.join(root, "modules.json"), "w") as f:
        json.dump(modules, f)
    return w, b


def test_both_public_layouts_give_the_same_embedding(tiny, tmp_path):
    from sentence_transformers import SentenceTransformer
    from transformers import BertModel, BertTokenizerFast

    st_dir = str(tmp_path / "st")
    w, b = _write_st_layout(st_dir, tiny)
    # The HF layout of the same model: a BertModel whose pooler IS that Dense.
    hf_dir = str(tmp_path / "hf")
    bert = BertModel.from_pretrained(tiny)
    with torch.no_grad():
        bert.pooler.dense.weight.copy_(w)
        bert.pooler.dense.bias.copy_(b)
    bert.save_pretrained(hf_dir)
    BertTokenizerFast.from_pretrained(tiny).save_pretrained(hf_dir)

    from_st = Encoder.from_pretrained(st_dir, device="cpu").encode(SENTS)
    from_hf = Encoder.from_pretrained(hf_dir, device="cpu").encode(SENTS)
    np.testing.assert_allclose(from_st, from_hf, atol=2e-6)
    np.testing.assert_allclose(from_hf, _hf_reference(hf_dir, SENTS), atol=2e-6)
    np.testing.assert_allclose(
        from_st, SentenceTransformer(st_dir, device="cpu").encode(SENTS), atol=2e-6
    )
    # And not trivially: the tiny checkpoint's own pooler gives different vectors.
    assert np.abs(from_st - Encoder.from_pretrained(tiny, device="cpu").encode(SENTS)).max() > 1e-2


def test_save_load_round_trip_and_export(tiny, tmp_path):
    from sentence_transformers import SentenceTransformer

    enc, tok, _ = load_encoder(tiny)
    with torch.no_grad():  # move the weights away from the saved ones first
        for p in enc.parameters():
            p.add_(0.01 * torch.randn_like(p))
    out = str(tmp_path / "saved")
    save_encoder(enc, tok, out, max_seq_length=64)
    before = Encoder(enc, tok, max_seq_length=64, device="cpu").encode(SENTS)
    after = Encoder.from_pretrained(out, device="cpu", max_seq_length=64).encode(SENTS)
    np.testing.assert_array_equal(before, after)
    st = SentenceTransformer(out, device="cpu")
    np.testing.assert_allclose(st.encode(SENTS), after, atol=2e-6)


def test_corrupt_or_missing_checkpoint_is_a_clear_error(tiny, tmp_path):
    import shutil

    bad = str(tmp_path / "bad")
    shutil.copytree(tiny, bad)
    weights = os.path.join(bad, "model.safetensors")
    with open(weights, "r+b") as f:
        f.truncate(os.path.getsize(weights) // 2)
    with pytest.raises(CheckpointError, match="bad"):
        Encoder.from_pretrained(bad)
    with pytest.raises(FileNotFoundError):
        Encoder.from_pretrained(str(tmp_path / "nowhere"))
    os.makedirs(tmp_path / "empty")
    with pytest.raises(CheckpointError, match="config.json"):
        Encoder.from_pretrained(str(tmp_path / "empty"))


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_bare_pooling_heads_round_trip(tiny, tmp_path, pooling):
    """model.pooling cls/mean: saved as Transformer + Pooling + Normalize (no Dense), reloaded by
    our loader and by sentence-transformers to the same vectors, which are not the pooler's."""
    from sentence_transformers import SentenceTransformer

    from labse_model.model import SentenceEncoder

    enc, tok, _ = load_encoder(tiny)
    bare = SentenceEncoder(enc.bert, pooling, use_pooler=False)
    out = str(tmp_path / pooling)
    save_encoder(bare, tok, out, max_seq_length=64)
    modules = json.load(open(os.path.join(out, "modules.json")))
    assert [m["type"].rsplit(".", 1)[1] for m in modules] == ["Transformer", "Pooling", "Normalize"]
    before = Encoder(bare, tok, max_seq_length=64, device="cpu").encode(SENTS)
    loaded, _, _ = load_encoder(out)
    assert (loaded.pooling, loaded.use_pooler) == (pooling, False)
    after = Encoder.from_pretrained(out, device="cpu", max_seq_length=64).encode(SENTS)
    np.testing.assert_allclose(before, after, atol=1e-6)
    np.testing.assert_allclose(
        SentenceTransformer(out, device="cpu").encode(SENTS), after, atol=2e-6
    )
    pooled = Encoder(enc, tok, max_seq_length=64, device="cpu").encode(SENTS)
    assert np.abs(pooled - after).max() > 1e-2


def test_the_encoder_shape_comes_from_the_model_section():
    from labse_common.config import ConfigError, load
    from labse_model.model import BERT_BASE, bert_config, build_config

    model = load("model", "demo", ["hidden_size=48", "num_attention_heads=3", "dropout=0.2"])
    cfg = bert_config(model, 300, pad_token_id=0)
    assert (cfg.vocab_size, cfg.hidden_size, cfg.num_attention_heads) == (300, 48, 3)
    assert cfg.hidden_dropout_prob == cfg.attention_probs_dropout_prob == 0.2
    assert cfg.initializer_range == model.initializer_range
    # Plain callers (tests, benchmarks) get BERT-base's shape and the section's other defaults
    # and checks, not a second copy of them.
    base = build_config(300)
    assert {k: getattr(base, k) for k in BERT_BASE} == BERT_BASE
    assert base.hidden_dropout_prob == load("model", None).dropout
    with pytest.raises(ConfigError, match="num_attention_heads"):
        build_config(300, hidden_size=30, num_attention_heads=4)
    with pytest.raises(ConfigError, match="model.widht"):
        build_config(300, widht=64)


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_length_groups_give_the_one_call_embeddings_and_gradients(tmp_path, pooling):
    """train.length_groups: the batch embedded in groups of similar length, each padded to its
    own longest row, gives the embeddings and the gradients of one call on the whole batch."""
    from labse_common.config import load
    from labse_model.batching import SentenceTokenizer, pad_batch
    from labse_model.model import random_encoder

    tok = load_encoder(make_tiny_checkpoint(str(tmp_path / "t"), SENTS[:4], hidden=32))[1]
    model = load("model", "demo", ["hidden_size=32", "num_attention_heads=2", f"pooling={pooling}"])
    stok = SentenceTokenizer(tok, 40)
    # Rows of very different lengths, shuffled so that no group is a contiguous slice.
    words = "Der schnelle braune Fuchs springt über den faulen Hund und noch viel weiter".split()
    texts = [" ".join(words[: 1 + (7 * i) % len(words)]) for i in range(13)]
    ids, _ = stok.encode(texts)
    input_ids, mask = pad_batch(ids, stok.pad_id)
    assert len({len(r) for r in ids}) > 6 and mask.shape[1] == max(len(r) for r in ids)

    def run(groups: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
        enc = random_encoder(model, tok, seed=3)
        enc.length_groups = groups
        emb = enc(input_ids, mask)
        # A loss that mixes rows, as the ranking loss does.
        (emb @ emb.T).logsumexp(1).sum().backward()
        return emb.detach(), [p.grad.clone() for p in enc.parameters() if p.grad is not None]

    ref_emb, ref_grads = run(1)
    for groups in (2, 3, 6):
        emb, grads = run(groups)
        assert (emb - ref_emb).abs().max() < 1e-5, groups
        assert len(grads) == len(ref_grads)
        assert max((g - r).abs().max().item() for g, r in zip(grads, ref_grads)) < 1e-5, groups
    # The grouping is real: fewer padded positions reach the model than one padded batch has.
    enc = random_encoder(model, tok, seed=3)
    enc.length_groups = 3
    seen: list[int] = []
    hook = enc.bert.register_forward_pre_hook(
        lambda _m, _a, kw: seen.append(kw["input_ids"].numel()), with_kwargs=True
    )
    enc(input_ids, mask)
    hook.remove()
    assert len(seen) == 3 and sum(seen) < 0.8 * input_ids.numel()
