"""Hard negatives mined by the encoder itself from its training pool.

In-batch negatives of a random batch are mostly easy (other topics, other lengths). The
targets the current encoder places nearest a source, without being its translation, are the
ones it still confuses; adding them to the batch as extra candidate columns of the
additive-margin softmax (loss.py) spends the gradient where the encoder is wrong.

The danger is a false negative: a target that IS a translation of the anchor, pushed away.
Training pools hold exact duplicates, near-duplicates (case, spacing, punctuation) and the same
source translated twice, so a candidate is refused when it is in the anchor's *translation
group*: the connected component, over normalised texts, of the pairs' source-target links.
That covers the anchor's own target, any target whose normalised text equals the true
target's, any translation of a source with the same normalised text, and chains of those
(A-T1, B-T1, B-T2: T2 translates B which shares a translation with A). Sources and targets
share one text space, so a target copied verbatim from the anchor's source is refused too.

Usable without the training loop: :func:`translation_groups` and :func:`mine` take texts and
embeddings; :func:`embed_pool` embeds a pool with a model through the one Encoder path.
"""

from __future__ import annotations

import logging
import math
import re
import unicodedata
from collections.abc import Sequence

import numpy as np
import torch
import torch.distributed as dist

log = logging.getLogger(__name__)

NONE = -1  # a neighbour slot with no usable candidate

_SPACE = re.compile(r"\s+")


def normalise(text: str) -> str:
    """The text two near-duplicates share: NFKC, case-folded, punctuation dropped, spaces
    collapsed (so "Tom is here." and "tom  is here" are one sentence)."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = "".join(" " if unicodedata.category(c).startswith("P") else c for c in text)
    return _SPACE.sub(" ", text).strip()


def translation_groups(sources: Sequence[str], targets: Sequence[str]) -> np.ndarray:
    """A group id per pair: pairs linked through equal normalised texts share one.

    Union-find over normalised texts (one space for both sides); pair i joins its source's and
    its target's texts. Two pairs are in one group when a chain of shared texts links them.
    """
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} sources but {len(targets)} targets")
    node: dict[str, int] = {}
    parent: list[int] = []

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]  # path halving
            x = parent[x]
        return x

    def node_of(text: str) -> int:
        key = normalise(text)
        if key not in node:
            node[key] = len(parent)
            parent.append(len(parent))
        return node[key]

    ends = []
    for s, t in zip(sources, targets):
        a, b = find(node_of(s)), find(node_of(t))
        if a != b:
            parent[max(a, b)] = min(a, b)
        ends.append(a)
    roots = np.fromiter((find(a) for a in ends), dtype=np.int64, count=len(ends))
    # Dense ids, in order of first appearance.
    _, dense = np.unique(roots, return_inverse=True)
    return dense.astype(np.int64)


def mine(
    src_emb: torch.Tensor | np.ndarray,
    trg_emb: torch.Tensor | np.ndarray,
    groups: np.ndarray,
    k: int,
    block: int = 1024,
) -> np.ndarray:
    """For each pair i, the pool indices of the ``k`` targets nearest source i (cosine, the
    embeddings being normalised) that are outside i's translation group; at most one per group
    (a duplicated target is one negative, not k). Slots with no candidate hold ``NONE``."""
    src = torch.as_tensor(src_emb, dtype=torch.float32)
    trg = torch.as_tensor(trg_emb, dtype=torch.float32)
    g = torch.as_tensor(groups, dtype=torch.long)
    n = trg.shape[0]
    if src.shape[0] != len(g) or n != len(g):
        raise ValueError(f"{src.shape[0]} sources, {n} targets, {len(g)} groups: one each per pair")
    out = np.full((src.shape[0], k), NONE, dtype=np.int64)
    if k < 1 or n < 2:
        return out
    # Room for duplicates of one group among the nearest: they are skipped, not counted.
    wide = min(n, 4 * k)
    for start in range(0, src.shape[0], block):
        sim = src[start : start + block] @ trg.t()
        same = g[start : start + block, None] == g[None, :]
        sim.masked_fill_(same, -math.inf)
        val, idx = sim.topk(wide, dim=1)
        for r in range(idx.shape[0]):
            seen: set[int] = set()
            j = 0
            for v, c in zip(val[r].tolist(), idx[r].tolist()):
                if v == -math.inf or j == k:
                    break
                if int(g[c]) in seen:
                    continue
                seen.add(int(g[c]))
                out[start + r, j] = c
                j += 1
    return out


def embed_pool(
    model: torch.nn.Module,
    tokenizer,
    texts: Sequence[str],
    max_seq_length: int,
    device: torch.device,
    batch_size: int = 256,
) -> torch.Tensor:
    """Embed ``texts`` with ``model`` in eval mode (no dropout), through the one Encoder path;
    under a process group each rank embeds a share and all ranks get every row.

    The model's train/eval mode is restored afterwards.
    """
    from labse_model.encode import Encoder

    was_training = model.training
    distributed = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    try:
        enc = Encoder(model, tokenizer, max_seq_length=max_seq_length, device=device)
        per = math.ceil(len(texts) / world)
        mine_rows = torch.from_numpy(
            enc.encode(list(texts[rank * per : (rank + 1) * per]), batch_size)
        )
    finally:
        model.train(was_training)
    if not distributed:
        return mine_rows
    # Equal shapes for all_gather: pad the last share.
    padded = torch.zeros((per, mine_rows.shape[1]), dtype=torch.float32)
    padded[: mine_rows.shape[0]] = mine_rows
    padded = padded.to(device)
    parts = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded)
    return torch.cat(parts)[: len(texts)].cpu()


class HardNegativePool:
    """The training pool, its translation groups and the latest mined neighbours.

    ``negatives_of(src, trg)`` answers for a batch row by its texts (the reader yields texts,
    not pool indices); a pair never mined yet, or not in the pool, gets none.
    """

    def __init__(self, sources: Sequence[str], targets: Sequence[str]) -> None:
        self.sources, self.targets = list(sources), list(targets)
        self.groups = translation_groups(self.sources, self.targets)
        self.index = {(s, t): i for i, (s, t) in enumerate(zip(self.sources, self.targets))}
        self.neighbours: np.ndarray | None = None  # replaced whole, so a reader thread is safe

    def __len__(self) -> int:
        return len(self.sources)

    def refresh(
        self, model: torch.nn.Module, tokenizer, max_seq_length: int, device: torch.device, k: int
    ) -> None:
        """Embed the pool with the current ``model`` and mine ``k`` negatives per pair."""
        src = embed_pool(model, tokenizer, self.sources, max_seq_length, device)
        trg = embed_pool(model, tokenizer, self.targets, max_seq_length, device)
        self.neighbours = mine(src, trg, self.groups, k)
        found = int((self.neighbours != NONE).sum())
        log.info("hard negatives: %d mined for %d pairs (%d per pair asked)", found, len(self), k)

    def index_of(self, src: str, trg: str) -> int:
        """The pair's pool index, -1 when it is not in the pool."""
        return self.index.get((src, trg), -1)

    def negatives_at(self, i: int) -> list[int]:
        """The latest mined negatives of pool pair ``i`` (none before the first mining)."""
        nb = self.neighbours
        if nb is None or i < 0:
            return []
        return [int(c) for c in nb[i] if c != NONE]

    def group_at(self, i: int) -> int:
        """Pair ``i``'s translation group; a pair not in the pool (-1) gets -2, no group."""
        return int(self.groups[i]) if i >= 0 else -2

    def negatives_of(self, src: str, trg: str) -> list[int]:
        return self.negatives_at(self.index_of(src, trg))

    def group_of(self, src: str, trg: str) -> int:
        return self.group_at(self.index_of(src, trg))
