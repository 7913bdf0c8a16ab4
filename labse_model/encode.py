"""Sentence embeddings from a LaBSE checkpoint: the API mining and evaluation call.

``encode`` tokenises everything once, sorts by exact token length so each batch pads to almost
nothing, runs under ``torch.inference_mode`` and writes rows back in input order.

``quantize="int8"`` runs the Linear layers in int8 on CPU (weights quantised once at load,
activations per batch, PyTorch's fbgemm kernels): a BERT-base encodes about 1.6x faster and its
vectors keep a cosine of about 0.998 to the float32 ones (bench/README.md, "Encoder and
training"). Embeddings, LayerNorm and attention's softmax stay float32.

:func:`cached_encoder` is the one encoder cache: every embedding path (``labse_model encode``,
``mining embed``/``mine --model``, the Beam embed job's workers, the stage runner) loads a model
through it, so a process loads each checkpoint once however many files or languages it embeds.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import warnings
from collections.abc import Sequence

import numpy as np
import torch
from tqdm import tqdm

from labse_common.filesystems import is_remote
from labse_common.sections.model import quantize_device
from labse_model.batching import SentenceTokenizer, pad_batch
from labse_model.model import SentenceEncoder, load_encoder

log = logging.getLogger(__name__)


def pick_device(device: str | None = None) -> torch.device:
    """The requested device, else CUDA when present, else CPU."""
    if device:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def quantize_int8(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with every Linear layer replaced by a dynamically quantised int8 one (CPU)."""
    with warnings.catch_warnings():
        # torch.ao's eager quantisation is deprecated in favour of torchao, whose int8 path needs
        # torch.compile to be fast; the eager fbgemm kernels are what makes a CPU encode faster.
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)


class Encoder:
    """A loaded encoder plus tokenizer; ``encode`` returns L2-normalised rows."""

    def __init__(
        self,
        model: SentenceEncoder,
        tokenizer,
        max_seq_length: int = 128,
        device: str | torch.device | None = None,
        quantize: str = "none",
    ) -> None:
        device = quantize_device(quantize, str(device) if device is not None else None)
        self.device = pick_device(device)
        self.quantize = quantize
        self.model = model.to(self.device).eval()
        if quantize == "int8":
            self.model = quantize_int8(self.model)
        self.tokenizer = tokenizer
        limit = model.bert.config.max_position_embeddings
        self.max_seq_length = min(max_seq_length, limit)
        self.sentence_tokenizer = SentenceTokenizer(tokenizer, self.max_seq_length)
        self.dim: int = model.dim
        # Counters of the last encode() call, for callers that report stats.
        self.last_truncated = 0
        # One cached encoder is shared by the threads of a process (Beam's DirectRunner runs
        # DoFns in threads): one forward pass at a time, which is what one device can do anyway.
        self._lock = threading.Lock()

    @classmethod
    def from_pretrained(
        cls,
        path: str,
        device: str | None = None,
        max_seq_length: int = 128,
        quantize: str = "none",
    ) -> Encoder:
        """Load a Hugging Face BertModel directory or a sentence-transformers directory."""
        model, tokenizer, _info = load_encoder(path)
        return cls(
            model, tokenizer, max_seq_length=max_seq_length, device=device, quantize=quantize
        )

    def encode(
        self,
        sentences: Sequence[str],
        batch_size: int = 64,
        fp16: bool = False,
        show_progress: bool = False,
    ) -> np.ndarray:
        """Embed ``sentences``: (n, dim) float32 (float16 if ``fp16``), in input order."""
        out, self.last_truncated = self.encode_counted(sentences, batch_size, fp16, show_progress)
        return out

    def encode_counted(
        self,
        sentences: Sequence[str],
        batch_size: int = 64,
        fp16: bool = False,
        show_progress: bool = False,
    ) -> tuple[np.ndarray, int]:
        """:meth:`encode` plus how many sentences were truncated; keeps no state, so threads that
        share this encoder each get their own count."""
        with self._lock:
            return self._encode(sentences, batch_size, fp16, show_progress)

    def _encode(
        self, sentences: Sequence[str], batch_size: int, fp16: bool, show_progress: bool
    ) -> tuple[np.ndarray, int]:
        if isinstance(sentences, str):
            raise TypeError("encode() takes a sequence of sentences, not one string")
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        n = len(sentences)
        out = np.empty((n, self.dim), dtype=np.float16 if fp16 else np.float32)
        if n == 0:
            return out, 0
        ids, truncated = self.sentence_tokenizer.encode(
            [s if isinstance(s, str) else "" for s in sentences]
        )
        lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=n)
        # Longest first: the first batch shows the worst-case memory at once.
        order = np.argsort(-lengths, kind="stable")
        cuda = self.device.type == "cuda"
        # On CPU half precision is slower than float32; only the returned array is cast.
        autocast = torch.autocast("cuda", dtype=torch.float16) if (cuda and fp16) else None
        bar = tqdm(total=n, desc="encode", unit="sent", disable=not show_progress)
        with torch.inference_mode():
            for start in range(0, n, batch_size):
                idx = order[start : start + batch_size]
                input_ids, mask = pad_batch([ids[i] for i in idx], self.sentence_tokenizer.pad_id)
                input_ids = input_ids.to(self.device, non_blocking=cuda)
                # Length-sorted batches often have no padding at all: without a mask the
                # attention kernel takes its unmasked fast path.
                mask = None if bool(mask.all()) else mask.to(self.device, non_blocking=cuda)
                if autocast is not None:
                    with autocast:
                        emb = self.model(input_ids, mask)
                else:
                    emb = self.model(input_ids, mask)
                out[idx] = emb.to(torch.float16 if fp16 else torch.float32).cpu().numpy()
                bar.update(len(idx))
        bar.close()
        return out, truncated


@functools.lru_cache(maxsize=2)
def _cached(path: str, device: str | None, max_seq_length: int, quantize: str) -> Encoder:
    return Encoder.from_pretrained(
        path, device=device, max_seq_length=max_seq_length, quantize=quantize
    )


def cached_encoder(
    path: str, device: str | None = None, max_seq_length: int = 128, quantize: str = "none"
) -> Encoder:
    """The encoder of ``path``, loaded once per process (two checkpoints kept: a full LaBSE is
    ~2 GB). Every embedding entry point goes through here."""
    local = not is_remote(path)
    return _cached(os.path.abspath(path) if local else str(path), device, max_seq_length, quantize)
