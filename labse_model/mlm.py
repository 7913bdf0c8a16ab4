"""The MLM/TLM pretraining model and progressive stacking.

``MaskedLM`` is the sentence encoder's BERT plus transformers' ``BertOnlyMLMHead`` (dense, GELU,
LayerNorm, then the vocabulary projection), the projection **tied to the input word
embeddings** and applied **only at the masked positions**: with LaBSE's 501k-token vocabulary,
logits at every position of a 512-token batch would not fit in memory (bench/pretrain_bench.py
measures it).

Saved as the encoder's usual directory (HF ``BertModel`` + sentence-transformers layout, so
``train --init DIR`` loads it like any checkpoint) plus ``mlm_head.safetensors`` (the head's own
weights; the projection matrix is the embedding matrix) so pretraining can continue from it.

Progressive stacking (Gong et al. 2019, as used by LaBSE): an ``n``-layer model becomes ``2n``
layers, layer ``i`` copied to ``i`` and ``i + n``; the optimizer's moments may be duplicated the
same way (:func:`stack_optimizer_state`).
"""

from __future__ import annotations

import copy
import os
import re

import torch
import torch.nn.functional as F
from torch import nn
from transformers.models.bert.modeling_bert import BertOnlyMLMHead

from labse_model.masking import segment_attention_mask
from labse_model.model import SentenceEncoder

HEAD_FILE = "mlm_head.safetensors"
_LAYER = re.compile(r"(^|\.)encoder\.layer\.(\d+)\.")


class MaskedLM(nn.Module):
    def __init__(self, encoder: SentenceEncoder, head: BertOnlyMLMHead | None = None) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = head or BertOnlyMLMHead(encoder.bert.config)
        self.tie()
        # The pooler is the sentence head of the dual encoder: pretraining leaves it alone
        # (and DDP must not wait for gradients that never come).
        if encoder.bert.pooler is not None:
            encoder.bert.pooler.requires_grad_(False)

    def tie(self) -> None:
        pred = self.head.predictions
        pred.decoder.weight = self.encoder.bert.embeddings.word_embeddings.weight
        # One output bias: transformers keeps `predictions.bias` and `decoder.bias` apart until
        # its own tie_weights() runs; an untied, unused copy would also stall DDP.
        pred.decoder.bias = pred.bias

    @property
    def bert(self):
        return self.encoder.bert

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor,
        labels: torch.Tensor,
        masked_index: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        segment_ids: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per masked position: (cross-entropy, 1.0 where predicted right, batch row).

        ``labels`` is -100 where nothing is predicted; ``masked_index`` (flat positions of the
        predicted tokens, computed by the data producer on the CPU) spares the accelerator a
        host sync. The vocabulary projection runs on the masked positions only: (n_masked,
        vocab) logits, never (batch, length, vocab). ``segment_ids`` (rows packed by
        ``masking.pack_rows``) keep attention within each segment; ``position_ids`` restart in
        each.
        """
        if segment_ids is not None:
            attention_mask = segment_attention_mask(
                segment_ids,
                self.bert.config._attn_implementation,
                self.bert.embeddings.word_embeddings.weight.dtype,
            )
        hidden = self.bert(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            return_dict=True,
        ).last_hidden_state
        if masked_index is None:
            masked_index = (labels.reshape(-1) != -100).nonzero()[:, 0]
        picked = hidden.reshape(-1, hidden.shape[-1]).index_select(0, masked_index)
        target = labels.reshape(-1).index_select(0, masked_index)
        logits = self.head(picked)
        losses = F.cross_entropy(logits.float(), target, reduction="none")
        correct = (logits.argmax(-1) == target).float()
        return losses, correct, masked_index // labels.shape[1]


def head_state(model: MaskedLM) -> dict[str, torch.Tensor]:
    return {
        k: v.detach().cpu().contiguous()
        for k, v in model.head.state_dict().items()
        # The tied embedding matrix lives in the encoder; the decoder bias is `predictions.bias`.
        if k not in ("predictions.decoder.weight", "predictions.decoder.bias")
    }


def save_head(model: MaskedLM, directory: str) -> None:
    from safetensors.torch import save_file

    save_file(head_state(model), os.path.join(directory, HEAD_FILE))


def load_head(model: MaskedLM, directory: str) -> bool:
    """Load ``mlm_head.safetensors`` if present; False when the directory has none."""
    path = os.path.join(directory, HEAD_FILE)
    if not os.path.exists(path):
        return False
    from safetensors.torch import load_file

    missing, unexpected = model.head.load_state_dict(load_file(path), strict=False)
    if unexpected or [
        m for m in missing if m not in ("predictions.decoder.weight", "predictions.decoder.bias")
    ]:
        raise RuntimeError(f"{path} does not match the model: {missing} {unexpected}")
    model.tie()
    return True


def _source_name(name: str, n: int) -> str:
    """Parameter name in the ``n``-layer model that layer-duplicated parameter ``name`` copies."""
    m = _LAYER.search(name)
    if not m:
        return name
    i = int(m.group(2))
    return name[: m.start(2)] + str(i % n) + name[m.end(2) :]


def stack(model: MaskedLM) -> MaskedLM:
    """A ``2n``-layer copy of an ``n``-layer model: layer ``i`` -> ``i`` and ``i + n``."""
    n = model.bert.config.num_hidden_layers
    bert = copy.deepcopy(model.bert)
    bert.config.num_hidden_layers = 2 * n
    bert.encoder.layer = nn.ModuleList(
        [copy.deepcopy(model.bert.encoder.layer[i % n]) for i in range(2 * n)]
    )
    enc = SentenceEncoder(
        bert, model.encoder.pooling, model.encoder.use_pooler, normalize=model.encoder.normalize
    )
    out = MaskedLM(enc, copy.deepcopy(model.head))
    return out


def stack_optimizer_state(
    old: torch.optim.Optimizer, old_model: MaskedLM, new: torch.optim.Optimizer, new_model: MaskedLM
) -> None:
    """Copy AdamW moments into the stacked model's optimizer, duplicated like the layers."""
    n = old_model.bert.config.num_hidden_layers
    old_by_name = {name: p for name, p in old_model.named_parameters()}
    for name, p in new_model.named_parameters():
        if not p.requires_grad:
            continue
        src = old_by_name.get(_source_name(name, n))
        if src is None or src not in old.state:
            continue
        new.state[p] = {
            k: (v.clone() if torch.is_tensor(v) else v) for k, v in old.state[src].items()
        }
