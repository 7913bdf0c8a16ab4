"""The CDS scorer library: training a tiny model, batched scores equal one-by-one scores,
save/load, both directions and the dual conditional cross-entropy's sign."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from filters.bitext.cds.fit import TrustedTooSmall, train_cds
from filters.bitext.cds.model import collate, encode_pairs, length_batches, token_logprobs
from filters.bitext.cds.noise import KINDS, make_noisy
from filters.bitext.cds.score import CdsScorer, dual_xent
from labse_common.config import load
from tests.support.cds_toy import TINY, toy_pairs

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    cfg = load("cds", "demo", [*TINY, "bidirectional=true"])
    src, trg = toy_pairs(160, 0)
    noisy_src, noisy_trg = src[:120], trg[:120]
    noisy_trg = noisy_trg[:60] + noisy_trg[60:][::-1]  # half misaligned
    out = tmp_path_factory.mktemp("cds") / "model"
    meta = train_cds((noisy_src, noisy_trg), (src[120:], trg[120:]), cfg, str(out))
    return out, meta


def test_dual_xent_formula_and_sign():
    # H_A = 1, H_B = 3: exp(-(2 + 2)) = exp(-4)
    assert dual_xent(np.array([1.0]), np.array([3.0]))[0] == pytest.approx(math.exp(-4))
    assert dual_xent(np.array([0.0]), np.array([0.0]))[0] == 1.0
    # Lower cross-entropies score higher; so does agreement at the same mean.
    assert (
        dual_xent(np.array([1.0]), np.array([1.0]))[0]
        > dual_xent(np.array([2.0]), np.array([2.0]))[0]
    )
    assert (
        dual_xent(np.array([2.0]), np.array([2.0]))[0]
        > dual_xent(np.array([1.0]), np.array([3.0]))[0]
    )
    # Symmetric in the two directions.
    assert (
        dual_xent(np.array([0.5]), np.array([2.5]))[0]
        == dual_xent(np.array([2.5]), np.array([0.5]))[0]
    )


def test_length_batches_cover_everything_once():
    lengths = np.array([5, 1, 9, 3, 3, 7, 2])
    sorted_batches = length_batches(lengths, 3)
    flat = np.concatenate(sorted_batches)
    assert sorted(flat.tolist()) == list(range(7))
    assert lengths[flat].tolist() == sorted(lengths.tolist())
    shuffled = length_batches(lengths, 3, np.random.default_rng(0))
    assert sorted(np.concatenate(shuffled).tolist()) == list(range(7))


@pytest.mark.slow
def test_trained_model_layout_and_loss_fell(tiny_model):
    out, meta = tiny_model
    assert meta["directions"] == ["fwd", "bwd"]
    for d in ("fwd", "bwd"):
        for which in ("noisy", "clean"):
            assert (out / d / which / "config.json").is_file()
            assert (out / d / which / "model.safetensors").is_file()
        fig = meta["training"][d]["noisy"]
        assert fig["last_loss"] < fig["first_loss"]
    assert (out / "cds.json").is_file() and (out / "tokenizer.json").is_file()


@pytest.mark.slow
def test_batched_scores_equal_one_by_one(tiny_model):
    """Length bucketing and padding must not change a pair's score."""
    out, _ = tiny_model
    src, trg = toy_pairs(23, 5)
    src.append("le " * 20 + ".")  # longer than max_length: truncated, still scored
    trg.append("")
    batched = CdsScorer.load(str(out), device="cpu", batch_size=8)
    single = CdsScorer.load(str(out), device="cpu", batch_size=1)
    a, b = batched.score_all(src, trg), single.score_all(src, trg)
    for key in ("cds_score", "xent_clean", "cds_score_bwd", "xent_clean_bwd", "dual_xent"):
        assert a[key].shape == (24,) and np.isfinite(a[key]).all()
        np.testing.assert_allclose(a[key], b[key], rtol=1e-4, atol=1e-5)
    assert batched.truncated >= 1
    # The Beam interface: a plain list of floats equal to cds_score.
    s = batched.score(src, trg)
    assert isinstance(s, list) and all(isinstance(v, float) for v in s)
    np.testing.assert_allclose(s, a["cds_score"], rtol=1e-6)
    assert batched.score([], []) == []
    with pytest.raises(ValueError, match="2 sources but 1 targets"):
        batched.score(["a", "b"], ["c"])


@pytest.mark.slow
def test_cds_score_is_the_per_token_logprob_difference(tiny_model):
    """cds_score = [log p(y|x; clean) - log p(y|x; noisy)] / |y|, computed independently."""
    out, _ = tiny_model
    scorer = CdsScorer.load(str(out), device="cpu")
    x, y = "le chat noir dort .", "the cat black sleeps ."
    noisy, clean = scorer.fwd
    enc = encode_pairs(scorer.tokenizer, clean.config, [x], [y], 64)
    assert enc.targets[0][-1] == scorer.tokenizer.sep_token_id  # |y| counts the end token
    assert enc.targets[0][0] != clean.config.decoder_start_token_id
    with torch.inference_mode():
        lp = {}
        for name, m in (("noisy", noisy), ("clean", clean)):
            ids = torch.tensor([enc.inputs[0]])
            dec = torch.tensor([[clean.config.decoder_start_token_id] + enc.targets[0][:-1]])
            logits = m(input_ids=ids, decoder_input_ids=dec).logits[0]
            lp[name] = float(
                torch.log_softmax(logits, -1)[range(len(enc.targets[0])), enc.targets[0]].sum()
            )
    want = (lp["clean"] - lp["noisy"]) / len(enc.targets[0])
    assert scorer.score([x], [y])[0] == pytest.approx(want, rel=1e-4, abs=1e-5)
    batch = collate(enc.inputs, enc.targets, clean.config.pad_token_id, torch.device("cpu"))
    with torch.inference_mode():
        assert float(token_logprobs(clean, batch)[0]) == pytest.approx(lp["clean"], rel=1e-5)


@pytest.mark.slow
def test_logits_in_slices_score_as_whole(tiny_model, monkeypatch):
    """The vocabulary projection cut into slices of one and of three rows gives the scores the
    whole projection gives (the slice size is only a memory bound)."""
    from filters.bitext.cds import model as cds_model

    out, _ = tiny_model
    src, trg = toy_pairs(24, 5)
    scorer = CdsScorer.load(str(out), device="cpu")
    whole = scorer.score_all(src, trg)
    for rows in (1, 3):
        vocab = scorer.fwd[0].get_output_embeddings().weight.shape[0]
        monkeypatch.setattr(cds_model, "LOGIT_SLICE_BYTES", rows * 4 * vocab)
        sliced = CdsScorer.load(str(out), device="cpu").score_all(src, trg)
        for key, values in whole.items():
            np.testing.assert_allclose(sliced[key], values, rtol=1e-5, atol=1e-6)


_WORST_BATCH = """
import resource, sys, torch
from transformers import BartConfig, BartForConditionalGeneration
from filters.bitext.cds.model import collate, token_logprobs
torch.set_num_threads(1)
cfg = BartConfig(vocab_size=8000, d_model=128, encoder_layers=2, decoder_layers=2,
                 encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=256,
                 decoder_ffn_dim=256, max_position_embeddings=64, pad_token_id=0,
                 bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
model = BartForConditionalGeneration(cfg).eval()
def batch(rows, n):
    return collate([[5] * n] * rows, [[6] * n] * rows, 0, torch.device("cpu"))
with torch.inference_mode():
    token_logprobs(model, batch(8, 8))  # warm up the allocator and the kernels
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    token_logprobs(model, batch(64, 64))  # the demo preset's worst batch: 4,096 target tokens
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print((after - before) / 1024)
"""


@pytest.mark.slow
def test_a_full_length_batch_does_not_hold_the_whole_vocabulary_projection():
    """64 targets of 64 tokens over 8,000 pieces: whole, the logits and their temporaries took
    +293 MiB (2.3 x the 125 MiB logits tensor), so cds-score's peak RSS grew with the input
    (the likelier such a batch); sliced, the high-water mark moves by far less than one
    logits tensor."""
    import subprocess
    import sys

    res = subprocess.run(
        [sys.executable, "-c", _WORST_BATCH],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    grew_mib = float(res.stdout.strip().splitlines()[-1])
    assert grew_mib < 110, f"a worst-case batch raised the peak RSS by {grew_mib:.0f} MiB"


@pytest.mark.slow
@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no GPU visible (the GPU path needs CUDA)"
)
def test_gpu_scores_match_cpu(tiny_model):
    out, _ = tiny_model
    src, trg = toy_pairs(40, 11)
    cpu = CdsScorer.load(str(out), device="cpu").score_all(src, trg)
    gpu_scorer = CdsScorer.load(str(out))  # auto picks the GPU
    assert gpu_scorer.device.type == "cuda"
    gpu = gpu_scorer.score_all(src, trg)
    for key, values in cpu.items():
        np.testing.assert_allclose(gpu[key], values, rtol=1e-3, atol=1e-3)


def test_trusted_set_below_minimum_is_refused(tmp_path):
    cfg = load("cds", "demo", [*TINY, "min_trusted=50"])
    src, trg = toy_pairs(60, 1)
    with pytest.raises(TrustedTooSmall, match="trusted set has 20 usable pairs; at least 50"):
        train_cds((src[:40], trg[:40]), (src[40:], trg[40:]), cfg, str(tmp_path / "m"))


def test_make_noisy_labels_and_kinds():
    pairs = {"de": toy_pairs(40, 2), "fr": toy_pairs(40, 3)}
    data = make_noisy(pairs, bad_share=0.5, seed=0)
    assert len(data) == 80 and data.label.count("BAD") == 40
    assert set(data.kind) - {"true"} <= set(KINDS)
    truth = {s: t for lang in pairs for s, t in zip(*pairs[lang])}
    for s, t, lab, kind in zip(data.src, data.trg, data.label, data.kind):
        if kind == "true":
            assert lab == "GOOD" and t == truth[s]
        elif kind == "untranslated":
            assert t == s
        elif kind == "truncated":
            assert truth[s].startswith(t) and len(t.split()) <= len(truth[s].split()) // 2
