"""The CDS translation model: a transformers encoder-decoder and the tokenisation it uses.

From scratch it is a small ``BartForConditionalGeneration`` built from a config, with the
project's cased WordPiece tokenizer (BERT's ``[CLS]`` starts the decoder, ``[SEP]`` ends a
sentence, ``[PAD]`` pads). A local pretrained checkpoint (a Marian or BART directory with its
tokenizer) can be the starting point instead; nothing is downloaded.

A target's tokens are what the decoder must predict: the sentence's pieces and the end token,
never the decoder start token. ``|y|`` in the per-token scores is that count.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformers import (
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    BartConfig,
    BartForConditionalGeneration,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from labse_common.sections.cds import CdsModelConfig

log = logging.getLogger(__name__)


def pick_device(device: str = "auto") -> torch.device:
    """``auto`` is CUDA when a GPU is visible, else CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device=cuda asked for but no GPU is visible")
    return torch.device(device)


def _special_id(tokenizer: PreTrainedTokenizerBase, *names: str) -> int:
    for name in names:
        tid = getattr(tokenizer, f"{name}_token_id", None)
        if tid is not None:
            return int(tid)
    raise ValueError(f"tokenizer has none of the special tokens {names}")


def new_model(
    tokenizer: PreTrainedTokenizerBase, cfg: CdsModelConfig, seed: int = 0
) -> BartForConditionalGeneration:
    """A randomly initialised BART whose specials are the tokenizer's (BERT or BART style)."""
    pad = _special_id(tokenizer, "pad")
    start = _special_id(tokenizer, "cls", "bos")
    end = _special_id(tokenizer, "sep", "eos")
    config = BartConfig(
        vocab_size=len(tokenizer),
        d_model=cfg.d_model,
        encoder_layers=cfg.encoder_layers,
        decoder_layers=cfg.decoder_layers,
        encoder_attention_heads=cfg.attention_heads,
        decoder_attention_heads=cfg.attention_heads,
        encoder_ffn_dim=cfg.ffn_dim,
        decoder_ffn_dim=cfg.ffn_dim,
        max_position_embeddings=cfg.max_length,
        dropout=cfg.dropout,
        attention_dropout=0.0,
        activation_dropout=0.0,
        init_std=cfg.init_std,
        pad_token_id=pad,
        bos_token_id=start,
        eos_token_id=end,
        decoder_start_token_id=start,
        forced_bos_token_id=None,
        forced_eos_token_id=None,
        scale_embedding=True,
    )
    torch.manual_seed(seed)
    return BartForConditionalGeneration(config)


def load_model(path: str) -> PreTrainedModel:
    """Any local seq2seq checkpoint (our BART, a Marian or BART directory)."""
    if not os.path.isdir(path):
        raise FileNotFoundError(f"model directory not found: {path}")
    return AutoModelForSeq2SeqLM.from_pretrained(path, local_files_only=True)


def init_kind(path: str) -> str:
    """What a ``cds.init`` checkpoint is: ``seq2seq`` (Marian, M2M, NLLB, BART: used as it is) or
    ``bert`` (an encoder such as the project's MLM+TLM checkpoint: both halves of a new
    encoder-decoder start from it). Anything else is an InputError naming the folder."""
    from labse_common.datafiles import read_json
    from labse_common.errors import InputError

    if not os.path.isdir(path):
        raise InputError(path, "not a checkpoint folder", "--init")
    cfg = read_json(os.path.join(path, "config.json"), flag="--init")
    if cfg.get("is_encoder_decoder"):
        return "seq2seq"
    if cfg.get("model_type") == "bert":
        return "bert"
    raise InputError(
        path,
        f"model_type {cfg.get('model_type')!r} is neither an encoder-decoder "
        "(Marian, M2M, NLLB, BART) nor a BERT encoder",
        "--init",
    )


def load_init_model(path: str, tokenizer: PreTrainedTokenizerBase) -> PreTrainedModel:
    """The starting point of a CDS model from a local checkpoint (see :func:`init_kind`).

    A BERT encoder becomes a BERT2BERT ``EncoderDecoderModel``: the encoder and the decoder
    (self-attention, feed-forward, embeddings, and the MLM head as its output layer when the
    checkpoint has one) are copied from it; only the decoder's cross-attention starts random. It
    saves and reloads like any seq2seq checkpoint (``AutoModelForSeq2SeqLM``)."""
    if init_kind(path) == "seq2seq":
        return load_model(path)
    from transformers import EncoderDecoderModel

    model = EncoderDecoderModel.from_encoder_decoder_pretrained(
        path, path, encoder_local_files_only=True, decoder_local_files_only=True
    )
    model.config.decoder_start_token_id = _special_id(tokenizer, "cls", "bos")
    model.config.pad_token_id = _special_id(tokenizer, "pad")
    model.config.eos_token_id = _special_id(tokenizer, "sep", "eos")
    model.config.vocab_size = model.config.decoder.vocab_size
    return model


def load_tokenizer(path: str) -> PreTrainedTokenizerBase:
    """The tokenizer saved in ``path`` (BERT WordPiece, Marian SentencePiece, BART BPE)."""
    if not os.path.isdir(path):
        raise FileNotFoundError(f"tokenizer directory not found: {path}")
    return AutoTokenizer.from_pretrained(path, local_files_only=True)


@dataclass
class Encoded:
    """Token ids of one direction: inputs, targets (labels) and how many sides were cut."""

    inputs: list[list[int]]
    targets: list[list[int]]
    truncated_inputs: int
    truncated_targets: int


def encode_pairs(
    tokenizer: PreTrainedTokenizerBase,
    model_config,
    src: Sequence[str],
    trg: Sequence[str],
    max_length: int,
) -> Encoded:
    """Tokenise ``src`` as encoder inputs and ``trg`` as labels, truncated to ``max_length``."""
    start = model_config.decoder_start_token_id
    kw = {"add_special_tokens": True, "truncation": False}
    inputs = tokenizer(list(src), **kw)["input_ids"]
    targets = tokenizer(text_target=list(trg), **kw)["input_ids"]
    # BERT-style targets begin with [CLS], which is our decoder start: a given, not a prediction.
    targets = [t[1:] if t and t[0] == start else t for t in targets]
    cut_in = cut_trg = 0
    for seqs, is_input in ((inputs, True), (targets, False)):
        for i, ids in enumerate(seqs):
            if len(ids) > max_length:
                # Keep the end-of-sentence token so a long sentence still looks finished.
                seqs[i] = ids[: max_length - 1] + ids[-1:]
                if is_input:
                    cut_in += 1
                else:
                    cut_trg += 1
    return Encoded(inputs, targets, cut_in, cut_trg)


def length_batches(
    lengths: np.ndarray,
    batch_size: int,
    rng: np.random.Generator | None = None,
    chunk: int = 50,
) -> list[np.ndarray]:
    """Index batches of similar length (little padding).

    Without ``rng``: sorted by length, for scoring. With ``rng``: shuffled, sorted within chunks
    of ``chunk`` batches, and the batch order shuffled, for training.
    """
    n = len(lengths)
    if rng is None:
        order = np.argsort(lengths, kind="stable")
        return [order[i : i + batch_size] for i in range(0, n, batch_size)]
    perm = rng.permutation(n)
    span = batch_size * chunk
    batches = []
    for i in range(0, n, span):
        part = perm[i : i + span]
        part = part[np.argsort(lengths[part], kind="stable")]
        batches += [part[j : j + batch_size] for j in range(0, len(part), batch_size)]
    rng.shuffle(batches)
    return batches


def collate(
    inputs: Sequence[list[int]], targets: Sequence[list[int]], pad_id: int, device: torch.device
) -> dict[str, torch.Tensor]:
    """Pad one batch; padded label positions are -100 (ignored by the loss and the scores)."""
    li = max(len(s) for s in inputs)
    lt = max(len(t) for t in targets)
    ids = torch.full((len(inputs), li), pad_id, dtype=torch.long)
    labels = torch.full((len(targets), lt), -100, dtype=torch.long)
    for r, (s, t) in enumerate(zip(inputs, targets)):
        ids[r, : len(s)] = torch.tensor(s, dtype=torch.long)
        labels[r, : len(t)] = torch.tensor(t, dtype=torch.long)
    return {
        "input_ids": ids.to(device),
        "attention_mask": (ids != pad_id).long().to(device),
        "labels": labels.to(device),
    }


#: Bytes of float32 logits computed at once: the (positions x vocabulary) projection is cut
#: into row slices of this size, so scoring's memory does not follow the longest batch. Whole,
#: a batch of 64 full-length (64-token) targets over 8,000 pieces held ~2.3 x 125 MiB of logits
#: and their temporaries (+293 MiB), so cds-score's peak RSS was set by the longest batch it met,
#: which a longer input is likelier to hold; sliced, +72 MiB (bench/HISTORY.md, CDS scale ladder).
LOGIT_SLICE_BYTES = 16 * 2**20


def token_logprobs(model: PreTrainedModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Sum over target tokens of log p(y_t | y_<t, x): one float32 per row.

    The vocabulary projection is the largest cost of a small model: for BART/Marian-style
    models (a ``model`` body, an output layer, ``final_logits_bias``) it runs on the real target
    positions only, ``LOGIT_SLICE_BYTES`` of logits at a time, and log p comes from
    ``logit - logsumexp`` without a full log-softmax tensor (together ~30% faster on CPU than
    the plain forward, and bounded memory).
    """
    labels = batch["labels"]
    mask = labels != -100
    gold = labels[mask].unsqueeze(-1)
    # Decoder inputs from the labels ourselves: passing labels would also compute a loss.
    dec = model.prepare_decoder_input_ids_from_labels(labels=labels)
    inputs = {
        "input_ids": batch["input_ids"],
        "attention_mask": batch["attention_mask"],
        "decoder_input_ids": dec,
    }
    body, head = getattr(model, "model", None), model.get_output_embeddings()
    if body is not None and head is not None:
        hidden = body(**inputs).last_hidden_state[mask]
        bias = getattr(model, "final_logits_bias", None)
        rows = max(1, LOGIT_SLICE_BYTES // (4 * head.weight.shape[0]))
        parts = []
        for start in range(0, hidden.shape[0], rows):
            logits = head(hidden[start : start + rows])
            if bias is not None:
                logits = logits + bias.to(logits.dtype)
            parts.append(_gold_logprobs(logits.float(), gold[start : start + rows]))
        tok = torch.cat(parts) if parts else hidden.new_zeros(0, dtype=torch.float32)
    else:  # any other seq2seq model: its own forward
        tok = _gold_logprobs(model(**inputs).logits[mask].float(), gold)
    out = torch.zeros(labels.shape, dtype=torch.float32, device=labels.device)
    out[mask] = tok
    return out.sum(-1)


def _gold_logprobs(logits: torch.Tensor, gold: torch.Tensor) -> torch.Tensor:
    """log p of each row's gold token: its logit less the row's logsumexp."""
    return logits.gather(-1, gold).squeeze(-1) - torch.logsumexp(logits, -1)
