"""The LaBSE sentence encoder: BERT, [CLS] through the pooler (dense + tanh), L2-normalised.

One module serves training and inference. It loads from the two public LaBSE layouts:

* a Hugging Face ``BertModel`` directory whose normalised ``pooler_output`` is the embedding;
* the sentence-transformers layout (Transformer, CLS Pooling, Dense d->d tanh, Normalize), in
  which case the Dense weights are copied into the pooler so both layouts run the same code.

Saving writes both layouts into one directory (the Transformer at the root, Dense holding a copy
of the pooler), so ``BertModel.from_pretrained`` and ``SentenceTransformer`` both load it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import BertConfig, BertModel, BertTokenizerFast

from labse_common.config import from_dict
from labse_common.errors import UsageError
from labse_common.sections.model import ModelConfig

log = logging.getLogger(__name__)

# The paper's encoder; the demo preset shrinks it.
BERT_BASE = {
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "max_position_embeddings": 512,
}

ST_MODULES = "modules.json"
TANH = "torch.nn.modules.activation.Tanh"


class CheckpointError(UsageError, RuntimeError):
    """A model directory that is missing files, cannot be read, or whose vocabulary does not fit
    its weights: the user's to fix, so one line and exit status 2 in every command."""


#: Rows an embedding table may have beyond its tokenizer's size: tables are sometimes padded up
#: to a multiple of 64 or 128 for faster matrix kernels, and those rows are never looked up.
#: More is a vocabulary from another model (most of its pieces would be missing: nearly every
#: token [UNK]); fewer rows than tokens would be an IndexError on the first rare token.
EMBEDDING_PADDING = 127


def check_vocab_fits(tokenizer: Any, bert: BertModel, where: str) -> None:
    """A CheckpointError unless ``tokenizer`` and ``bert``'s embedding table agree (see
    :data:`EMBEDDING_PADDING`)."""
    vocab, rows = len(tokenizer), bert.get_input_embeddings().num_embeddings
    if vocab > rows:
        raise CheckpointError(
            f"{where}: the vocabulary has {vocab} tokens but the model's "
            f"embedding table only {rows} rows: the vocab.txt/tokenizer.json "
            "belongs to another model"
        )
    if rows - vocab > EMBEDDING_PADDING:
        raise CheckpointError(
            f"{where}: the vocabulary has {vocab} tokens but the model's "
            f"embedding table {rows} rows (at most {EMBEDDING_PADDING} padding "
            "rows are allowed): the vocab.txt/tokenizer.json belongs to another "
            "model"
        )


@contextlib.contextmanager
def quiet_transformers(what: str) -> Iterator[None]:
    """transformers' own log lines (its load report, progress bars) held back during a load: a
    failed load is then one error line, not a report followed by it. The held lines are passed
    on at DEBUG."""
    from transformers.utils import logging as tlog

    with _TRANSFORMERS_LOGGING:  # threads of one process (Beam's DirectRunner) load together
        with _held_transformers_lines(what, tlog):
            yield


#: Serialises the swap of transformers' handlers: two threads swapping at once could leave the
#: holding handler in place for good.
_TRANSFORMERS_LOGGING = threading.RLock()


@contextlib.contextmanager
def _held_transformers_lines(what: str, tlog: Any) -> Iterator[None]:
    root = tlog.get_logger()  # the library's root logger, where its handler sits
    held: list[logging.LogRecord] = []

    class _Hold(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            held.append(record)

    handlers, propagate, bars = root.handlers[:], root.propagate, tlog.is_progress_bar_enabled()
    root.handlers, root.propagate = [_Hold()], False
    tlog.disable_progress_bar()
    try:
        yield
    finally:
        root.handlers, root.propagate = handlers, propagate
        if bars:
            tlog.enable_progress_bar()
        for r in held:  # what transformers said stays available to --log-level DEBUG
            log.debug("%s: transformers: %s", what, r.getMessage())


@dataclass
class _Head:
    """What follows the transformer in a sentence-transformers directory."""

    pooling: str = "cls"
    dense_weight: torch.Tensor | None = None
    dense_bias: torch.Tensor | None = None
    activation: str | None = TANH
    normalize: bool = True


class SentenceEncoder(nn.Module):
    """BertModel whose pooled [CLS] vector, L2-normalised, is the sentence embedding.

    ``use_pooler`` is the LaBSE head (dense + tanh = BERT's pooler). Other heads read from a
    sentence-transformers directory (mean pooling, a Dense of another size) run through
    ``dense``/``pooling`` so foreign checkpoints still encode; only the LaBSE head is exported.
    """

    def __init__(
        self,
        bert: BertModel,
        pooling: str = "cls",
        use_pooler: bool = True,
        dense: nn.Linear | None = None,
        activation: str | None = TANH,
        normalize: bool = True,
    ) -> None:
        super().__init__()
        if pooling not in ("cls", "mean"):
            raise ValueError(f"unsupported pooling {pooling!r} (cls or mean)")
        if use_pooler and bert.pooler is None:
            raise ValueError("use_pooler needs a BertModel with a pooling layer")
        self.bert = bert
        self.pooling = pooling
        self.use_pooler = use_pooler
        if not use_pooler and bert.pooler is not None:
            # Unused by a cls/mean head: no gradient, so DDP must not wait for one.
            bert.pooler.requires_grad_(False)
        self.dense = dense
        self.activation = activation
        self.normalize = normalize
        # Training's train.length_groups: a setting of the run, not of the checkpoint.
        self.length_groups = 1

    @property
    def dim(self) -> int:
        if self.dense is not None:
            return self.dense.out_features
        return self.bert.config.hidden_size

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Embeddings of a padded batch; ``attention_mask=None`` means no padding. With
        ``length_groups`` > 1 the rows are embedded in groups of similar length (see
        :meth:`_in_length_groups`)."""
        groups = self.length_groups
        if groups > 1 and attention_mask is not None and input_ids.shape[0] >= 2 * groups:
            return self._in_length_groups(input_ids, attention_mask, groups)
        return self._embed(input_ids, attention_mask)

    def _in_length_groups(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, groups: int
    ) -> torch.Tensor:
        """The rows sorted by length, cut into ``groups`` equal parts, each embedded with its
        columns cut to its longest row, and put back in their order. A row's embedding depends
        only on its own tokens (padding is masked out of attention and pooling), so this is
        the one-call result with less padding: on the demo's mixed Tatoeba and PUD batches
        (21 real tokens a row, padded to 32) three groups made a training step 1.35-1.43x
        faster (bench/HISTORY.md, "Length groups")."""
        lengths = attention_mask.sum(1)
        order = torch.argsort(lengths, stable=True)
        parts = []
        for rows in torch.tensor_split(order, groups):
            # The last column any row of the group attends to: right padding keeps the
            # real tokens first; a left-padded batch keeps its full width.
            width = int(attention_mask[rows].any(0).nonzero().max()) + 1
            parts.append(self._embed(input_ids[rows, :width], attention_mask[rows, :width]))
        return torch.cat(parts)[torch.argsort(order)]

    def _embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        out = self.bert(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
        if self.use_pooler:
            vec = out.pooler_output
        else:
            hidden = out.last_hidden_state
            if self.pooling == "cls":
                vec = hidden[:, 0]
            else:
                if attention_mask is None:
                    attention_mask = torch.ones(hidden.shape[:2], device=hidden.device)
                m = attention_mask.unsqueeze(-1).to(hidden.dtype)
                vec = (hidden * m).sum(1) / m.sum(1).clamp(min=1.0)
            if self.dense is not None:
                vec = self.dense(vec)
                if self.activation == TANH:
                    vec = torch.tanh(vec)
                elif self.activation not in (None, "torch.nn.modules.linear.Identity"):
                    raise ValueError(f"unsupported Dense activation {self.activation!r}")
        if self.normalize:
            # Normalise in float32: under bf16 autocast the norm of a 768-d vector loses digits.
            vec = F.normalize(vec.to(torch.promote_types(vec.dtype, torch.float32)), p=2, dim=-1)
        return vec


def bert_config(model: ModelConfig, vocab_size: int, pad_token_id: int = 0) -> BertConfig:
    """The BertConfig of the ``model:`` section's shape; the vocabulary is the tokenizer's."""
    return BertConfig(
        vocab_size=vocab_size,
        pad_token_id=pad_token_id,
        hidden_size=model.hidden_size,
        num_hidden_layers=model.num_hidden_layers,
        num_attention_heads=model.num_attention_heads,
        intermediate_size=model.intermediate_size,
        max_position_embeddings=model.max_position_embeddings,
        initializer_range=model.initializer_range,
        hidden_dropout_prob=model.dropout,
        attention_probs_dropout_prob=model.dropout,
    )


def build_config(vocab_size: int, pad_token_id: int = 0, **shape: Any) -> BertConfig:
    """A BertConfig for callers without a config file (tests, benchmarks): ``shape`` holds
    ``model:`` keys, BERT-base's shape where they are missing; every other default and check is
    the section's (labse_common/sections/model.py)."""
    given = {k: v for k, v in shape.items() if v is not None}
    return bert_config(
        from_dict(ModelConfig, {**BERT_BASE, **given}, "model"), vocab_size, pad_token_id
    )


def random_encoder(model: ModelConfig, tokenizer: Any, seed: int) -> SentenceEncoder:
    """A new encoder of the ``model:`` section's shape and pooling on ``tokenizer``'s vocabulary;
    the same ``seed`` gives the same weights (every rank starts identical)."""
    config = bert_config(model, len(tokenizer), tokenizer.pad_token_id or 0)
    return new_encoder(config, seed=seed, pooling=model.pooling)


POOLINGS = ("pooler", "cls", "mean")


def new_encoder(
    config: BertConfig, seed: int | None = None, pooling: str = "pooler"
) -> SentenceEncoder:
    """A randomly initialised encoder (BERT init), reproducible when ``seed`` is given.

    ``pooling``: ``pooler`` is LaBSE's head ([CLS] through BERT's dense + tanh pooler); ``cls``
    the bare last-layer [CLS] vector; ``mean`` the mean of the last layer over real tokens.
    """
    if pooling not in POOLINGS:
        raise ValueError(f"model.pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
    if seed is not None:
        torch.manual_seed(seed)
    bert = BertModel(config, add_pooling_layer=True)
    if pooling == "pooler":
        return SentenceEncoder(bert)
    return SentenceEncoder(bert, pooling, use_pooler=False)


# ---------------------------------------------------------------------------------------------
# Loading


def _read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"cannot read {path}: {e}") from e


def _load_state_file(directory: str) -> dict[str, torch.Tensor]:
    """Weights of a sentence-transformers module folder (safetensors or pytorch_model.bin)."""
    st = os.path.join(directory, "model.safetensors")
    pt = os.path.join(directory, "pytorch_model.bin")
    try:
        if os.path.exists(st):
            from safetensors.torch import load_file

            return load_file(st)
        if os.path.exists(pt):
            return torch.load(pt, map_location="cpu", weights_only=True)
    except Exception as e:  # safetensors/pickle raise many types on truncated files
        raise CheckpointError(f"corrupt weights in {directory}: {e}") from e
    raise CheckpointError(f"no model.safetensors or pytorch_model.bin in {directory}")


def _read_st_layout(path: str) -> tuple[str, _Head]:
    """Parse modules.json: the transformer folder and the head that follows it."""
    modules = _read_json(os.path.join(path, ST_MODULES))
    transformer_dir = None
    head = _Head(activation=None, normalize=False)
    for m in sorted(modules, key=lambda m: m.get("idx", 0)):
        kind = m.get("type", "").rsplit(".", 1)[-1]
        sub = os.path.join(path, m.get("path", ""))
        if kind == "Transformer":
            transformer_dir = sub
        elif kind == "Pooling":
            cfg = _read_json(os.path.join(sub, "config.json"))
            mode = cfg.get("pooling_mode")
            if mode is None:  # the pre-v5 boolean keys
                mode = "cls" if cfg.get("pooling_mode_cls_token") else None
                mode = mode or ("mean" if cfg.get("pooling_mode_mean_tokens") else None)
            if mode not in ("cls", "mean"):
                raise CheckpointError(f"{sub}: unsupported pooling {mode!r}")
            head.pooling = mode
        elif kind == "Dense":
            cfg = _read_json(os.path.join(sub, "config.json"))
            state = _load_state_file(sub)
            head.dense_weight = state["linear.weight"]
            head.dense_bias = state.get("linear.bias")
            head.activation = cfg.get("activation_function", TANH)
        elif kind == "Normalize":
            head.normalize = True
        else:
            raise CheckpointError(f"{path}: unsupported sentence-transformers module {kind!r}")
    if transformer_dir is None:
        raise CheckpointError(f"{path}: modules.json has no Transformer module")
    return transformer_dir, head


def _load_bert(directory: str, add_pooling_layer: bool) -> BertModel:
    if not os.path.exists(os.path.join(directory, "config.json")):
        raise CheckpointError(f"not a model directory (no config.json): {directory}")
    try:
        with quiet_transformers(directory):
            return BertModel.from_pretrained(directory, add_pooling_layer=add_pooling_layer)
    except Exception as e:  # transformers wraps safetensors errors in several types
        why = " ".join(str(e).split())
        if "report" in why:  # its report was held back (quiet_transformers): say what it says
            why = (
                "the weights do not fit config.json (transformers' load report, shown with "
                "--log-level DEBUG, names the tensors)"
            )
        raise CheckpointError(f"cannot load BERT weights from {directory}: {why}") from e


def load_encoder(path: str) -> tuple[SentenceEncoder, BertTokenizerFast, dict]:
    """Load an encoder and its tokenizer from either public layout.

    Returns ``(encoder, tokenizer, info)``; ``info["max_seq_length"]`` comes from
    ``sentence_bert_config.json`` when present.
    """
    if not os.path.isdir(path):
        raise FileNotFoundError(f"model directory not found: {path}")
    info: dict[str, Any] = {"layout": "hf"}
    if os.path.exists(os.path.join(path, ST_MODULES)):
        transformer_dir, head = _read_st_layout(path)
        info["layout"] = "sentence-transformers"
        sbert = os.path.join(transformer_dir, "sentence_bert_config.json")
        if os.path.exists(sbert):
            info["max_seq_length"] = _read_json(sbert).get("max_seq_length")
        bert = _load_bert(transformer_dir, add_pooling_layer=True)
        hidden = bert.config.hidden_size
        is_labse_head = (
            head.pooling == "cls"
            and head.dense_weight is not None
            and tuple(head.dense_weight.shape) == (hidden, hidden)
            and head.dense_bias is not None
            and head.activation == TANH
        )
        if is_labse_head:
            # The Dense is BERT's pooler under another name: one code path for both layouts.
            with torch.no_grad():
                bert.pooler.dense.weight.copy_(head.dense_weight)
                bert.pooler.dense.bias.copy_(head.dense_bias)
            enc = SentenceEncoder(bert, "cls", use_pooler=True, normalize=head.normalize)
        else:
            dense = None
            if head.dense_weight is not None:
                out_f, in_f = head.dense_weight.shape
                dense = nn.Linear(in_f, out_f, bias=head.dense_bias is not None)
                with torch.no_grad():
                    dense.weight.copy_(head.dense_weight)
                    if head.dense_bias is not None:
                        dense.bias.copy_(head.dense_bias)
            enc = SentenceEncoder(
                bert,
                head.pooling,
                use_pooler=False,
                dense=dense,
                activation=head.activation,
                normalize=head.normalize,
            )
        tok_dir = transformer_dir
    else:
        enc = SentenceEncoder(_load_bert(path, add_pooling_layer=True))
        tok_dir = path
    try:
        with quiet_transformers(tok_dir):
            tokenizer = BertTokenizerFast.from_pretrained(tok_dir)
    except Exception as e:
        raise CheckpointError(f"cannot load the tokenizer from {tok_dir}: {e}") from e
    check_vocab_fits(tokenizer, enc.bert, path)
    return enc, tokenizer, info


def load_tokenizer(path: str) -> BertTokenizerFast:
    """Any BERT tokenizer directory (vocab.txt and/or tokenizer.json)."""
    if not os.path.isdir(path):
        raise FileNotFoundError(f"vocabulary directory not found: {path}")
    check_vocab_dir(path)
    with quiet_transformers(path):
        return BertTokenizerFast.from_pretrained(path)


def check_vocab_dir(path: str) -> None:
    """A vocabulary directory must hold vocab.txt or tokenizer.json: without them transformers
    builds a 5-token all-[UNK] tokenizer and training runs on nothing."""
    if not any(os.path.isfile(os.path.join(path, f)) for f in ("vocab.txt", "tokenizer.json")):
        from labse_common.errors import InputError

        raise InputError(path, "vocabulary directory has no vocab.txt or tokenizer.json", "--vocab")


# ---------------------------------------------------------------------------------------------
# Saving


def save_encoder(
    encoder: SentenceEncoder,
    tokenizer: BertTokenizerFast,
    out_dir: str,
    max_seq_length: int = 128,
) -> None:
    """Write the Hugging Face and sentence-transformers layouts into ``out_dir``.

    The LaBSE head (CLS + pooler) is Transformer, CLS Pooling, Dense (the pooler) and Normalize;
    a bare ``cls`` or ``mean`` head is Transformer, Pooling and Normalize. Only the LaBSE head
    is the Hugging Face ``pooler_output``: the other two load through ``modules.json``.
    """
    labse_head = encoder.use_pooler and encoder.pooling == "cls"
    if not labse_head and (encoder.use_pooler or encoder.dense is not None):
        raise ValueError("only the LaBSE head or a bare cls/mean pooling can be exported")
    os.makedirs(out_dir, exist_ok=True)
    encoder.bert.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    hidden = encoder.bert.config.hidden_size
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {
            "idx": 1,
            "name": "1",
            "path": "1_Pooling",
            "type": "sentence_transformers.models.Pooling",
        },
    ]
    if labse_head:
        modules.append(
            {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}
        )
    if encoder.normalize:
        n = len(modules)
        modules.append(
            {
                "idx": n,
                "name": str(n),
                "path": f"{n}_Normalize",
                "type": "sentence_transformers.models.Normalize",
            }
        )
    _write_json(os.path.join(out_dir, ST_MODULES), modules)
    _write_json(
        os.path.join(out_dir, "sentence_bert_config.json"),
        {"max_seq_length": max_seq_length, "do_lower_case": False},
    )
    _write_json(
        os.path.join(out_dir, "1_Pooling", "config.json"),
        {
            "word_embedding_dimension": hidden,
            "pooling_mode_cls_token": encoder.pooling == "cls",
            "pooling_mode_mean_tokens": encoder.pooling == "mean",
            "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False,
        },
    )
    if encoder.normalize:
        os.makedirs(os.path.join(out_dir, modules[-1]["path"]), exist_ok=True)
    if not labse_head:
        return
    _write_json(
        os.path.join(out_dir, "2_Dense", "config.json"),
        {"in_features": hidden, "out_features": hidden, "bias": True, "activation_function": TANH},
    )
    from safetensors.torch import save_file

    pooler = encoder.bert.pooler.dense
    save_file(
        {
            "linear.weight": pooler.weight.detach().cpu().contiguous(),
            "linear.bias": pooler.bias.detach().cpu().contiguous(),
        },
        os.path.join(out_dir, "2_Dense", "model.safetensors"),
    )


def _write_json(path: str, obj: Any) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")
