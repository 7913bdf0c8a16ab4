"""CDS from a real translation-model layout: a Marian checkpoint with its SentencePiece
tokenizer (both built here, nothing downloaded), and a warm start from a BERT encoder such as
the project's own MLM+TLM checkpoint. Each loads, trains, scores, and scores the same after a
reload."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from filters.bitext.cds.fit import train_cds
from filters.bitext.cds.model import init_kind, load_init_model, load_tokenizer
from filters.bitext.cds.score import CdsScorer
from labse_common.config import load
from labse_common.errors import InputError
from tests.support.cds_toy import toy_pairs

spm = pytest.importorskip("sentencepiece", reason="sentencepiece is a dependency; install it")
torch.set_num_threads(1)

# Not support.cds_toy.TINY: an init checkpoint brings its own tokenizer and architecture, so
# only the training settings are set here.
TINY = [
    "model.max_length=16",
    "batch_size=16",
    "noisy_epochs=1",
    "clean_epochs=1",
    "min_trusted=10",
    "min_noisy=10",
    "progress=false",
    "warmup_steps=2",
    "device=cpu",
    "lr=1e-3",
    "clean_lr=5e-4",
]


def make_marian(dirpath) -> str:
    """A tiny random MarianMTModel and a MarianTokenizer over a SentencePiece model trained on
    the toy sentences: the layout of a Helsinki-NLP opus-mt checkpoint, at toy size."""
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    src, trg = toy_pairs(300, 1)
    text = dirpath / "corpus.txt"
    text.write_text("\n".join(src + trg) + "\n", encoding="utf-8")
    prefix = str(dirpath / "spm")
    spm.SentencePieceTrainer.train(
        input=str(text),
        model_prefix=prefix,
        vocab_size=40,
        model_type="unigram",
        character_coverage=1.0,
        bos_id=-1,
        eos_id=1,
        unk_id=0,
        pad_id=-1,
        minloglevel=2,
    )
    proc = spm.SentencePieceProcessor(model_file=prefix + ".model")
    pieces = ["</s>", "<unk>"] + [proc.id_to_piece(i) for i in range(2, proc.get_piece_size())]
    vocab = {p: i for i, p in enumerate(pieces)}
    vocab["<pad>"] = len(vocab)
    model_dir = dirpath / "marian"
    model_dir.mkdir()
    (dirpath / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    tok = MarianTokenizer(
        source_spm=prefix + ".model",
        target_spm=prefix + ".model",
        vocab=str(dirpath / "vocab.json"),
        source_lang="fr",
        target_lang="en",
    )
    tok.save_pretrained(model_dir)
    config = MarianConfig(
        vocab_size=len(vocab),
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        pad_token_id=vocab["<pad>"],
        eos_token_id=vocab["</s>"],
        decoder_start_token_id=vocab["<pad>"],
        forced_eos_token_id=None,
    )
    torch.manual_seed(0)
    MarianMTModel(config).save_pretrained(model_dir)
    return str(model_dir)


def _train_and_reload(init: str, out) -> tuple[np.ndarray, np.ndarray, dict]:
    cfg = load("cds", "demo", [*TINY, f"init={init}"])
    src, trg = toy_pairs(140, 0)
    noisy = (src[:100], trg[:50] + trg[50:100][::-1])
    meta = train_cds(noisy, (src[100:], trg[100:]), cfg, str(out))
    test_src, test_trg = toy_pairs(20, 5)
    first = CdsScorer.load(str(out), device="cpu").score_all(test_src, test_trg)["cds_score"]
    again = CdsScorer.load(str(out), device="cpu").score_all(test_src, test_trg)["cds_score"]
    return np.asarray(first), np.asarray(again), meta


@pytest.mark.slow
def test_marian_sentencepiece_round_trip(tmp_path):
    marian = make_marian(tmp_path)
    assert init_kind(marian) == "seq2seq"
    tok = load_tokenizer(marian)
    assert type(tok).__name__ == "MarianTokenizer"
    ids = tok("le chat noir .")["input_ids"]
    assert ids[-1] == tok.eos_token_id and tok.unk_token_id not in ids
    first, again, meta = _train_and_reload(marian, tmp_path / "cds")
    assert np.isfinite(first).all() and first.shape == (20,)
    np.testing.assert_allclose(first, again, rtol=0, atol=1e-6)
    assert (
        json.loads((tmp_path / "cds" / "fwd" / "noisy" / "config.json").read_text())["model_type"]
        == "marian"
    )


@pytest.mark.slow
def test_warm_start_from_a_bert_checkpoint(tmp_path):
    from labse_model.tiny import make_tiny_checkpoint

    src, trg = toy_pairs(300, 2)
    bert = make_tiny_checkpoint(str(tmp_path / "bert"), sentences=src + trg, hidden=32, layers=1)
    assert init_kind(bert) == "bert"
    tok = load_tokenizer(bert)
    model = load_init_model(bert, tok)
    # Both halves start from the checkpoint's weights, not from random ones.
    from transformers import AutoModel

    enc = AutoModel.from_pretrained(bert, local_files_only=True)
    ref = enc.embeddings.word_embeddings.weight
    assert torch.equal(model.encoder.embeddings.word_embeddings.weight, ref)
    assert torch.equal(model.decoder.bert.embeddings.word_embeddings.weight, ref)
    first, again, _ = _train_and_reload(bert, tmp_path / "cds")
    assert np.isfinite(first).all()
    np.testing.assert_allclose(first, again, rtol=0, atol=1e-6)


def test_an_init_that_is_not_a_translation_model_is_named(tmp_path):
    d = tmp_path / "gpt"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "gpt2"}), encoding="utf-8")
    with pytest.raises(InputError, match="gpt2"):
        init_kind(str(d))
    with pytest.raises(InputError, match="not a checkpoint folder"):
        init_kind(str(tmp_path / "missing"))
