"""Scoring pairs with a trained CDS model directory.

Scores, for a pair (x, y) with |y| target tokens (pieces + end token) and |x| likewise:

* ``cds_score(x, y) = [log p(y|x; θ_clean) − log p(y|x; θ_noisy)] / |y|`` — positive when the
  trusted data made the pair more likely, i.e. it looks like the trusted data, not the noise;
* ``cds_score_bwd`` — the same with target→source models (when trained ``bidirectional``);
* ``dual_xent`` — the dual conditional cross-entropy of Junczys-Dowmunt (2018), from the clean
  models of both directions, with per-token cross-entropies ``H_A = −log p(y|x; θ_clean)/|y|``
  and ``H_B = −log p(x|y; θ_clean_bwd)/|x|``::

      dual_xent(x, y) = exp(−(|H_A − H_B| + ½ (H_A + H_B)))

  in (0, 1]; higher is better: both directions find the pair likely (low mean) and agree with
  each other (small difference), as true translations do.

``CdsScorer.load(model_dir).score(src, trg)`` is the interface the Beam filtering job calls:
batched, sorted by length so batches carry little padding, on GPU when one is visible.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from filters.bitext.cds.model import (
    collate,
    encode_pairs,
    length_batches,
    load_model,
    load_tokenizer,
    pick_device,
    token_logprobs,
)
from labse_common.errors import InputError

log = logging.getLogger(__name__)

META_FILE = "cds.json"
FORMAT = 1


#: What save_pretrained leaves beside a model's config.json (one of them; sharded: the index).
WEIGHT_FILES = (
    "model.safetensors",
    "pytorch_model.bin",
    "model.safetensors.index.json",
    "pytorch_model.bin.index.json",
)
DIRECTIONS = ("fwd", "bwd")


def check_model_dir(path: str, flag: str = "--model") -> dict:
    """``path`` is a folder ``python -m filters cds-train`` wrote: cds.json of the known format,
    the tokenizer, and each direction's noisy and clean model (config.json and weights). Checked
    once, before any work: a wrong folder would otherwise fail inside every worker, as a long
    traceback from transformers. Returns cds.json's content; an InputError names what lacks."""
    from filters.bitext.cliutil import local_input
    from labse_common.datafiles import read_json

    local_input(path, flag, "a local CDS model folder")
    if not os.path.isdir(path):
        raise InputError(path, "not found (a folder written by filters cds-train)", flag)
    meta_path = os.path.join(path, META_FILE)
    if not os.path.isfile(meta_path):
        raise InputError(
            path,
            f"not a CDS model folder (no {META_FILE}; train one with python -m filters cds-train)",
            flag,
        )
    meta = read_json(meta_path, flag, expect=dict)
    if meta.get("format") != FORMAT:
        raise InputError(meta_path, f"unknown CDS model format {meta.get('format')!r}", flag)
    dirs = meta.get("directions")
    if not (isinstance(dirs, list) and "fwd" in dirs and set(dirs) <= set(DIRECTIONS)):
        raise InputError(meta_path, f"directions {dirs!r} is not [fwd] or [fwd, bwd]", flag)
    length = meta.get("max_length")
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise InputError(meta_path, f"max_length {length!r} is not a positive integer", flag)
    if not os.path.isfile(os.path.join(path, "tokenizer_config.json")):
        raise InputError(path, "not a CDS model folder (no tokenizer_config.json)", flag)
    for d in dirs:
        for half in ("noisy", "clean"):
            sub = os.path.join(path, d, half)
            if not os.path.isfile(os.path.join(sub, "config.json")):
                raise InputError(path, f"not a CDS model folder (no {d}/{half}/config.json)", flag)
            if not any(os.path.isfile(os.path.join(sub, w)) for w in WEIGHT_FILES):
                raise InputError(
                    path,
                    f"not a CDS model folder (no weights in {d}/{half}: "
                    f"{' or '.join(WEIGHT_FILES[:2])})",
                    flag,
                )
    return meta


def dual_xent(h_fwd: np.ndarray, h_bwd: np.ndarray) -> np.ndarray:
    """``exp(−(|H_A − H_B| + ½(H_A + H_B)))`` from per-token cross-entropies (nats)."""
    h_fwd = np.asarray(h_fwd, dtype=np.float64)
    h_bwd = np.asarray(h_bwd, dtype=np.float64)
    return np.exp(-(np.abs(h_fwd - h_bwd) + 0.5 * (h_fwd + h_bwd)))


class CdsScorer:
    """θ_noisy and θ_clean (and optionally their target→source twins) with one tokenizer."""

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        noisy: PreTrainedModel,
        clean: PreTrainedModel,
        noisy_bwd: PreTrainedModel | None = None,
        clean_bwd: PreTrainedModel | None = None,
        max_length: int = 64,
        device: str | torch.device = "auto",
        batch_size: int = 64,
        progress: bool = False,
    ) -> None:
        self.device = pick_device(device) if isinstance(device, str) else device
        self.tokenizer = tokenizer
        self.fwd = (noisy.to(self.device).eval(), clean.to(self.device).eval())
        self.bwd = None
        if noisy_bwd is not None and clean_bwd is not None:
            self.bwd = (noisy_bwd.to(self.device).eval(), clean_bwd.to(self.device).eval())
        self.max_length = max_length
        self.batch_size = batch_size
        self.progress = progress
        self.truncated = 0  # sides cut to max_length so far

    @property
    def bidirectional(self) -> bool:
        return self.bwd is not None

    @classmethod
    def load(
        cls,
        model_dir: str,
        device: str = "auto",
        batch_size: int | None = None,
        progress: bool = False,
    ) -> CdsScorer:
        """Load what ``python -m filters cds-train`` wrote (``cds.json``, tokenizer, models).

        ``progress`` shows a bar per scoring pass (off by default: callers such as Beam workers
        and ``cds-score`` keep their own)."""
        meta_path = os.path.join(model_dir, META_FILE)
        if not os.path.isfile(meta_path):
            raise FileNotFoundError(f"not a CDS model directory (no {META_FILE}): {model_dir}")
        with open(meta_path, encoding="utf-8") as f:
            meta = json.load(f)
        if meta.get("format") != FORMAT:
            raise ValueError(f"{meta_path}: unknown format {meta.get('format')!r}")
        tok = load_tokenizer(model_dir)
        models = {
            d: (
                load_model(os.path.join(model_dir, d, "noisy")),
                load_model(os.path.join(model_dir, d, "clean")),
            )
            for d in meta["directions"]
        }
        bwd = models.get("bwd", (None, None))
        return cls(
            tok,
            *models["fwd"],
            *bwd,
            max_length=int(meta["max_length"]),
            device=device,
            batch_size=batch_size or int(meta.get("score_batch_size", 64)),
            progress=progress,
        )

    # --- scoring ---------------------------------------------------------------------------

    def score(self, src: Sequence[str], trg: Sequence[str]) -> list[float]:
        """``cds_score`` of each pair, in input order."""
        return self.score_all(src, trg, directions=("fwd",))["cds_score"].tolist()

    def score_all(
        self, src: Sequence[str], trg: Sequence[str], directions: Sequence[str] | None = None
    ) -> dict[str, np.ndarray]:
        """Every score the model directory supports, each an array in input order.

        Keys: ``cds_score``, ``xent_clean`` (H_A) and, when bidirectional, ``cds_score_bwd``,
        ``xent_clean_bwd`` (H_B) and ``dual_xent``.
        """
        if len(src) != len(trg):
            raise ValueError(f"{len(src)} sources but {len(trg)} targets")
        if directions is None:
            directions = ("fwd", "bwd") if self.bidirectional else ("fwd",)
        out: dict[str, np.ndarray] = {}
        if not len(src):
            for d in directions:
                suffix = "" if d == "fwd" else "_bwd"
                out[f"cds_score{suffix}"] = np.zeros(0)
                out[f"xent_clean{suffix}"] = np.zeros(0)
            if "bwd" in directions:
                out["dual_xent"] = np.zeros(0)
            return out
        for d in directions:
            if d == "bwd" and self.bwd is None:
                raise ValueError(
                    "this CDS model has no target->source models (train bidirectional)"
                )
            noisy, clean = self.fwd if d == "fwd" else self.bwd
            x, y = (src, trg) if d == "fwd" else (trg, src)
            enc = encode_pairs(self.tokenizer, clean.config, x, y, self.max_length)
            self.truncated += enc.truncated_inputs + enc.truncated_targets
            n_tok = np.array([len(t) for t in enc.targets], dtype=np.float64)
            lp_noisy = self._logprobs(noisy, enc.inputs, enc.targets, f"score {d} noisy")
            lp_clean = self._logprobs(clean, enc.inputs, enc.targets, f"score {d} clean")
            suffix = "" if d == "fwd" else "_bwd"
            out[f"cds_score{suffix}"] = (lp_clean - lp_noisy) / n_tok
            out[f"xent_clean{suffix}"] = -lp_clean / n_tok
        if "bwd" in directions:
            out["dual_xent"] = dual_xent(out["xent_clean"], out["xent_clean_bwd"])
        return out

    @torch.inference_mode()
    def _logprobs(
        self, model: PreTrainedModel, inputs: list[list[int]], targets: list[list[int]], desc: str
    ) -> np.ndarray:
        lengths = np.array([len(a) + len(b) for a, b in zip(inputs, targets)])
        result = np.empty(len(inputs), dtype=np.float64)
        pad = model.config.pad_token_id
        batches = length_batches(lengths, self.batch_size)
        for idx in tqdm(batches, desc=desc, unit="batch", disable=not self.progress, leave=False):
            batch = collate([inputs[i] for i in idx], [targets[i] for i in idx], pad, self.device)
            result[idx] = token_logprobs(model, batch).double().cpu().numpy()
        return result
