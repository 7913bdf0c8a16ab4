"""LaBSE margin score of given pairs (pairs that did not come from our miner).

The neighbourhood of each sentence is taken from its own side's sentences of the pair list,
as when mining: ``score(x, y) = margin(cos(x, y), (mean_k cos(x, NN_k^trg(x)) +
mean_k cos(y, NN_k^src(y))) / 2)`` (LASER's ``--mode score``). The kNN search, neighbourhood means
and margin functions are ``mining``'s (FAISS, the same ``mining`` section), the encoder is ``labse_model``'s.
Each distinct sentence is encoded and searched once; optional extra monolingual sentences per
side enlarge the neighbourhoods (a pair list of a few hundred lines makes a thin one).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from labse_common.embedding_store import unit_rows
from labse_common.sections.mining import MiningConfig
from mining.knn import knn
from mining.margin import neighbourhood_mean, pair_scores

log = logging.getLogger(__name__)


@dataclass
class MarginScores:
    margin: np.ndarray  # float32, NaN where a side is empty
    cosine: np.ndarray
    n_src: int  # distinct source sentences in the neighbourhood
    n_trg: int
    empty: int  # pairs with an empty side (not scored)


def _index(texts: Sequence[str], extra: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """Distinct non-empty sentences (pair sentences first, then extra) and each text's row."""
    uniq: dict[str, int] = {}
    rows = np.array(
        [uniq.setdefault(t, len(uniq)) if t.strip() else -1 for t in texts], dtype=np.int64
    )
    for t in extra:
        if t.strip():
            uniq.setdefault(t, len(uniq))
    return list(uniq), rows


def score_vectors(
    x: np.ndarray,
    y: np.ndarray,
    src_rows: np.ndarray,
    trg_rows: np.ndarray,
    cfg: MiningConfig | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Margin and cosine of pairs ``(x[src_rows[i]], y[trg_rows[i]])``; rows -1 give NaN.
    ``cfg.k``, ``cfg.margin`` and the search keys come from the ``mining`` section."""
    cfg = cfg or MiningConfig(progress=False)
    k, margin = cfg.k, cfg.margin
    x, y = unit_rows(x), unit_rows(y)
    ok = (src_rows >= 0) & (trg_rows >= 0)
    marg = np.full(len(src_rows), np.nan, dtype=np.float32)
    cos = np.full(len(src_rows), np.nan, dtype=np.float32)
    if ok.any() and len(x) and len(y):
        fwd_sims, _ = knn(x, y, k, cfg)
        bwd_sims, _ = knn(y, x, k, cfg)
        s, t = src_rows[ok], trg_rows[ok]
        marg[ok] = pair_scores(
            x, y, s, t, neighbourhood_mean(fwd_sims), neighbourhood_mean(bwd_sims), margin
        )
        cos[ok] = np.einsum("nd,nd->n", x[s], y[t])
    return marg, cos


def margin_score_pairs(
    model_dir: str,
    src: Sequence[str],
    trg: Sequence[str],
    cfg: MiningConfig,
    extra_src: Sequence[str] = (),
    extra_trg: Sequence[str] = (),
) -> MarginScores:
    """Encode both sides with the checkpoint in ``model_dir`` (``cfg.batch_size``) and
    margin-score the pairs (``cfg.k``, ``cfg.margin``, the search keys)."""
    from labse_model.encode import Encoder  # torch only here

    batch_size = cfg.batch_size

    src_texts, src_rows = _index(src, extra_src)
    trg_texts, trg_rows = _index(trg, extra_trg)
    enc = Encoder.from_pretrained(model_dir)
    log.info("encoding %d source and %d target sentences", len(src_texts), len(trg_texts))
    x = (
        enc.encode(src_texts, batch_size=batch_size, show_progress=True)
        if src_texts
        else np.zeros((0, enc.dim), np.float32)
    )
    y = (
        enc.encode(trg_texts, batch_size=batch_size, show_progress=True)
        if trg_texts
        else np.zeros((0, enc.dim), np.float32)
    )
    marg, cos = score_vectors(
        np.asarray(x, np.float32), np.asarray(y, np.float32), src_rows, trg_rows, cfg
    )
    empty = int(((src_rows < 0) | (trg_rows < 0)).sum())
    return MarginScores(marg, cos, len(src_texts), len(trg_texts), empty)
