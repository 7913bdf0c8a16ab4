"""Mining: kNN both ways, margin scoring, retrieval; and the file-to-file run behind the CLI.

Every function takes the ``mining`` section (:class:`MiningConfig`) as loaded and reads its keys
there: k, margin, mode, threshold, unify, the search keys (see :mod:`mining.knn`), batch_size,
workers and shard_rows.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from labse_common.embedding_store import StoreWriter, blocks_dim, load_vectors
from labse_common.errors import InputError, UsageError
from labse_common.formats import (
    MINED_PAIR_REQUIRED,
    MINED_PAIR_SCHEMA,
    PROVENANCE_COLUMNS,
    conform,
)
from labse_common.sections.mining import MiningConfig
from labse_common.stats import StageCounter, check_balanced, write_report

# Scored and score live in mining.margin, below both this module and mining.bounded (which uses
# them too); re-exported here, where they were first.
from mining.bounded import Layout, mine_bounded
from mining.corpus import Corpus, Side, expand_pairs, prepare_side, read_corpus
from mining.knn import Neighbours, knn
from mining.lexical_rerank import mine_with_lexicon
from mining.lexicon import Lexicon, LexiconSet
from mining.lexicon_file import load as read_lexicon
from mining.margin import Scored, score  # noqa: F401
from mining.output import WRITE_SLICE_ROWS, write_histogram, write_pairs
from mining.retrieval import Pairs, retrieve
from mining.vector_side import VectorSide

log = logging.getLogger(__name__)

STAGE = "mining"


def neighbours(
    x: np.ndarray, y: np.ndarray, k: int, cfg: MiningConfig, x_index=None, y_index=None
) -> Neighbours:
    """k nearest neighbours of x in y and of y in x (k clipped to the other side's size)."""
    if len(x) and len(y) and x.shape[1] != y.shape[1]:
        raise ValueError(f"dimension mismatch: source {x.shape[1]} vs target {y.shape[1]}")
    fs, fi = knn(x, y, k, cfg, index=y_index)
    bs, bi = knn(y, x, k, cfg, index=x_index)
    return Neighbours(fs, fi, bs, bi)


def mine_vectors(
    x: np.ndarray,
    y: np.ndarray,
    cfg: MiningConfig,
    counter: StageCounter | None = None,
    x_index=None,
    y_index=None,
) -> tuple[Pairs, Scored]:
    """Mine pairs between unit-norm float32 matrices ``x`` (source) and ``y`` (target)."""
    nb = neighbours(x, y, cfg.k, cfg, x_index, y_index)
    sc = score(nb, cfg.margin)
    pairs = retrieve(
        sc.fwd_scores, nb.fwd_inds, sc.bwd_scores, nb.bwd_inds, cfg.mode, cfg.threshold, counter
    )
    return pairs, sc


def load_encoder(model_dir: str):
    """The labse_model Encoder, loaded once per process (labse_model.encode.cached_encoder)."""
    from labse_model.embed_store import load_model  # lazy: mining works without torch

    return load_model(model_dir)


def encode_corpus(model_dir: str, texts: list[str], batch_size: int = 64) -> np.ndarray:
    """Embed texts with a LaBSE checkpoint (torch imported only here): the one embedding path
    (labse_model.embed_store), chunk by chunk as `mining embed` writes stores, so these vectors
    are the stored ones; empty lines -> zeros."""
    from labse_model.embed_store import embed_texts

    return embed_texts(load_encoder(model_dir), texts, batch_size, dtype="float32")


def save_store(path: Path, vecs: np.ndarray, corpus: Corpus) -> None:
    w = StoreWriter(path, dim=vecs.shape[1], dtype="float16")
    w.add(vecs, corpus.table.column("id").to_pylist(), text=corpus.texts)
    w.close()


def direction_features(sc: Scored, pairs: Pairs) -> dict[str, np.ndarray]:
    """Per selected pair, what each direction said of it: its margin in the source's candidate
    list (``margin_fwd``) and in the target's (``margin_bwd``; NaN where the pair is not among
    that side's k neighbours), and whether each side is the other's best candidate
    (``mutual``, 1.0/0.0). A pair found one way only is a weaker pair: the combined filter
    learns how much weaker."""
    nb, n = sc.neighbours, len(pairs)
    out = {k: np.full(n, np.nan, np.float32) for k in ("margin_fwd", "margin_bwd")}
    if n == 0 or nb.fwd_inds.shape[1] == 0 or nb.bwd_inds.shape[1] == 0:
        return {**out, "mutual": np.zeros(n, np.float32)}
    for name, inds, scores, q, c in (
        ("margin_fwd", nb.fwd_inds, sc.fwd_scores, pairs.src, pairs.trg),
        ("margin_bwd", nb.bwd_inds, sc.bwd_scores, pairs.trg, pairs.src),
    ):
        hit = inds[q] == c[:, None]
        found = hit.any(axis=1)
        out[name][found] = scores[q][hit]  # neighbour ids are unique per row: one hit at most
    best_t = nb.fwd_inds[pairs.src, sc.fwd_scores[pairs.src].argmax(axis=1)]
    best_s = nb.bwd_inds[pairs.trg, sc.bwd_scores[pairs.trg].argmax(axis=1)]
    out["mutual"] = ((best_t == pairs.trg) & (best_s == pairs.src)).astype(np.float32)
    return out


def pairs_slices(
    pairs: Pairs,
    cosine: np.ndarray,
    src: Side,
    trg: Side,
    src_c: Corpus,
    trg_c: Corpus,
    features: dict[str, np.ndarray] | None = None,
    rows: int = WRITE_SLICE_ROWS,
) -> Iterator[pa.Table]:
    """The output rows, one per original (src row, trg row) pair, sorted by decreasing margin,
    as tables of ``rows`` rows (at least one table, maybe empty): only one slice of the output
    exists at a time, however many pairs were mined."""
    src_rows, trg_rows, pi = expand_pairs(src, trg, pairs.src, pairs.trg)
    cosine = np.asarray(cosine, np.float32)
    feats = {k: np.asarray(v, np.float32) for k, v in (features or {}).items()}
    for lo in range(0, max(len(pi), 1), rows):
        sl = slice(lo, lo + rows)
        yield _rows_table(src_rows[sl], trg_rows[sl], pi[sl], pairs, cosine, feats, src_c, trg_c)


def _rows_table(
    src_rows: np.ndarray,
    trg_rows: np.ndarray,
    pi: np.ndarray,
    pairs: Pairs,
    cosine: np.ndarray,
    feats: dict[str, np.ndarray],
    src_c: Corpus,
    trg_c: Corpus,
) -> pa.Table:
    # Gathered column by column with Arrow's take: no Python object per output row.
    s_idx, t_idx = pa.array(src_rows, pa.int64()), pa.array(trg_rows, pa.int64())
    cols: dict[str, object] = {
        "src": src_c.text.take(s_idx),
        "trg": trg_c.text.take(t_idx),
        "src_lang": pa.repeat(pa.scalar(src_c.lang, pa.string()), len(pi)),
        "trg_lang": pa.repeat(pa.scalar(trg_c.lang, pa.string()), len(pi)),
        "margin": pa.array(pairs.score[pi], pa.float32()),
        "src_id": src_c.table.column("id").take(s_idx),
        "trg_id": trg_c.table.column("id").take(t_idx),
        "cosine": pa.array(cosine[pi], pa.float32()),
    }
    for name, values in feats.items():
        cols[name] = pa.array(values[pi], pa.float32())
    for side, c, idx in (("src", src_c, s_idx), ("trg", trg_c, t_idx)):
        for name in PROVENANCE_COLUMNS:
            if name in c.table.column_names:
                cols[f"{side}_{name}"] = c.table.column(name).take(idx)
    return conform(pa.table(cols), MINED_PAIR_SCHEMA, MINED_PAIR_REQUIRED)


def pairs_table(
    pairs: Pairs,
    cosine: np.ndarray,
    src: Side,
    trg: Side,
    src_c: Corpus,
    trg_c: Corpus,
    features: dict[str, np.ndarray] | None = None,
) -> pa.Table:
    """The whole output as one table (:func:`pairs_slices` joined): for small runs and tests."""
    return pa.concat_tables(pairs_slices(pairs, cosine, src, trg, src_c, trg_c, features))


@dataclass
class MineInputs:
    """Everything a mining run reads before kNN: corpora, cleaned sides, and the counter."""

    out: Path
    src_c: Corpus
    trg_c: Corpus
    src: Side
    trg: Side
    counter: StageCounter
    src_emb: str | None
    trg_emb: str | None
    t0: float


def prepare_inputs(
    src_text: str,
    trg_text: str,
    out_dir: str,
    cfg: MiningConfig,
    src_emb: str | None = None,
    trg_emb: str | None = None,
    model: str | None = None,
    src_lang: str = "",
    trg_lang: str = "",
    sharded: bool = False,
) -> MineInputs:
    """Read both corpora and their vectors (or embed them with ``cfg.batch_size``), clean and
    count both sides.

    ``sharded`` leaves the vectors on disk: the shards are read by the kNN tasks."""
    batch_size = cfg.batch_size
    t0 = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    src_c = read_corpus(src_text, src_lang, "--src-text")
    trg_c = read_corpus(trg_text, trg_lang, "--trg-text")
    if model:
        if not os.path.isdir(model):
            raise InputError(model, "model directory not found", "--model")
        src_blocks = [encode_corpus(model, src_c.texts, batch_size)]
        trg_blocks = [encode_corpus(model, trg_c.texts, batch_size)]
        # Kept for reuse (mine again with other settings without re-encoding).
        src_emb, trg_emb = str(out / "embeddings" / "src"), str(out / "embeddings" / "trg")
        save_store(Path(src_emb), src_blocks[0], src_c)
        save_store(Path(trg_emb), trg_blocks[0], trg_c)
    elif src_emb and trg_emb:
        src_blocks, trg_blocks = load_vectors(src_emb), load_vectors(trg_emb)
    else:
        raise UsageError("give either --model or both --src-emb and --trg-emb")
    for flag, path, c, blocks, emb in (
        ("--src-text", src_text, src_c, src_blocks, src_emb),
        ("--trg-text", trg_text, trg_c, trg_blocks, trg_emb),
    ):
        n_vec = sum(len(b) for b in blocks)
        if n_vec != len(c):  # row i of the embeddings is line i of the text
            raise InputError(
                path,
                f"{len(c)} sentences but {n_vec} embedding rows in {emb} (row i = line i)",
                flag,
            )
    ds, dt = blocks_dim(src_blocks), blocks_dim(trg_blocks)
    if len(src_c) and len(trg_c) and ds != dt:
        raise InputError(
            trg_emb, f"dimension mismatch: source embeddings {ds} vs target {dt}", "--trg-emb"
        )

    counter = StageCounter()
    # A side with no usable vector is blamed on what made the vectors: the model or the file.
    src_vec, trg_vec = (
        ((model, "--model"),) * 2 if model else ((src_emb, "--src-emb"), (trg_emb, "--trg-emb"))
    )
    src = prepare_side(
        src_c.text,
        src_blocks,
        cfg.unify,
        counter,
        "src_sentences",
        not sharded,
        (str(src_text), "--src-text"),
        src_vec,
    )
    trg = prepare_side(
        trg_c.text,
        trg_blocks,
        cfg.unify,
        counter,
        "trg_sentences",
        not sharded,
        (str(trg_text), "--trg-text"),
        trg_vec,
    )
    return MineInputs(out, src_c, trg_c, src, trg, counter, src_emb, trg_emb, t0)


def bounded_layout(cfg: MiningConfig, n_src: int, n_trg: int, runner=None):
    """How the commands cut the search (:class:`mining.bounded.Layout`): ``cfg.shard_rows``
    rows per shard, else one shard per worker (``cfg.workers``); ``runner`` runs the shard
    tasks elsewhere (the Beam job), else a process pool of ``cfg.workers``."""
    if cfg.shard_rows:
        shards = max(1, -(-max(n_src, n_trg) // cfg.shard_rows))
    else:
        shards = max(1, cfg.workers)
    return Layout(shards=shards, workers=cfg.workers, runner=runner)


def run_mine(
    src_text: str,
    trg_text: str,
    out_dir: str,
    cfg: MiningConfig,
    src_emb: str | None = None,
    trg_emb: str | None = None,
    model: str | None = None,
    src_lang: str = "",
    trg_lang: str = "",
    runner=None,
    extra: dict | None = None,
    workdir: str | None = None,
    lexicon: str | None = None,
) -> dict:
    """Mine one corpus pair from files and write mined.parquet/.tsv.gz, histogram, stats.json.

    The vectors stay on disk: both sides are read from their stores in chunks by
    :func:`mining.bounded.mine_bounded` (exact blocked search for ``index: flat``, else the
    index the config or the planner names), so memory is bounded by ``cfg.mem_gb`` plus the
    neighbour lists, whatever the corpus size. ``cfg.workers`` > 1 or ``cfg.shard_rows`` cut the
    search into shards run by that many processes (or by ``runner``: the Beam job's tasks);
    the merged lists equal one pass. ``extra`` goes into the report's config; ``workdir`` is
    where the shard tasks write their lists (default: a temporary folder)."""
    inp = prepare_inputs(
        src_text, trg_text, out_dir, cfg, src_emb, trg_emb, model, src_lang, trg_lang, sharded=True
    )
    src, trg, counter = inp.src, inp.trg, inp.counter
    n_src, n_trg = len(src.offsets) - 1, len(trg.offsets) - 1
    log.info(
        "mining %d x %d sentences (k=%d, %s, %s, index %s, %d worker(s))",
        n_src,
        n_trg,
        cfg.k,
        cfg.margin,
        cfg.mode,
        cfg.index,
        cfg.workers,
    )
    extra = {"src_text": str(src_text), "trg_text": str(trg_text), **(extra or {})}
    if n_src == 0 or n_trg == 0:
        return _write_nothing_mined(inp, cfg, extra)
    sv = VectorSide(inp.src_emb, rows=src.representative())
    tv = VectorSide(inp.trg_emb, rows=trg.representative())
    layout = bounded_layout(cfg, n_src, n_trg, runner)
    layout.workdir = workdir
    lexicons = load_lexicon(lexicon)  # the pair's dictionaries (checked to exist before)
    lex = lexicons.for_pair(src_lang or "", trg_lang or "") if lexicons else None
    texts = (compact_texts(inp.src_c, src), compact_texts(inp.trg_c, trg)) if lex else None
    pairs, cosine, found_extra, features = mine_sides(sv, tv, cfg, layout, counter, lex, texts)
    extra.update(found_extra, shards=layout.shards)
    return write_outputs(
        inp.out,
        pairs,
        cosine,
        src,
        trg,
        inp.src_c,
        inp.trg_c,
        counter,
        cfg,
        inp.t0,
        extra,
        features,
    )


def compact_texts(corpus: Corpus, side: Side) -> pa.ChunkedArray:
    """The text of each compact row of ``side`` (its first member's)."""
    return corpus.text.take(pa.array(side.representative(), pa.int64()))


def load_lexicon(path: str | None) -> LexiconSet | None:
    """The dictionaries of ``--lexicon`` (``filters lexicon``'s lexicon.parquet), or None."""
    if path is None:
        return None
    if not os.path.isfile(path):
        raise UsageError(f"--lexicon {path}: not found (a lexicon.parquet of filters lexicon)")
    try:
        return read_lexicon(path)
    except (ValueError, OSError) as e:
        raise InputError(path, str(e), "--lexicon") from e


def mine_sides(
    sv: VectorSide,
    tv: VectorSide,
    cfg: MiningConfig,
    layout: Layout,
    counter: StageCounter,
    lex: Lexicon | None = None,
    texts: tuple[pa.ChunkedArray, pa.ChunkedArray] | None = None,
) -> tuple[Pairs, np.ndarray, dict, dict[str, np.ndarray]]:
    """Mine two sides' stores: the pairs, their cosines, what the search reports (index,
    seconds per step) and the per-pair feature columns (the directions', and with a lexicon
    ``lex_fwd``/``lex_bwd``, its candidates re-ranked as :mod:`mining.lexical_rerank` says)."""
    if lex is None:
        res = mine_bounded(sv, tv, cfg, layout, counter)
        lexical: dict[str, np.ndarray] = {}
    else:
        res, lexical = mine_with_lexicon(sv, tv, cfg, layout, counter, lex, *texts)
    pairs = res.pairs
    xs, ys = sv.gather(pairs.src), tv.gather(pairs.trg)
    cosine = np.einsum("nd,nd->n", xs, ys) if len(pairs) else np.zeros(0, np.float32)
    extra = {"index": res.factories, "seconds_by_step": res.seconds}
    return pairs, cosine, extra, {**direction_features(res.scored, pairs), **lexical}


def _write_nothing_mined(inp: MineInputs, cfg: MiningConfig, extra: dict) -> dict:
    """An empty side: no search, the outputs and a balanced report of zero pairs."""
    n_src, n_trg = len(inp.src.offsets) - 1, len(inp.trg.offsets) - 1
    pairs = retrieve(
        np.zeros((n_src, 0), np.float32),
        np.zeros((n_src, 0), np.int64),
        np.zeros((n_trg, 0), np.float32),
        np.zeros((n_trg, 0), np.int64),
        cfg.mode,
        cfg.threshold,
        inp.counter,
    )
    return write_outputs(
        inp.out,
        pairs,
        np.zeros(0, np.float32),
        inp.src,
        inp.trg,
        inp.src_c,
        inp.trg_c,
        inp.counter,
        cfg,
        inp.t0,
        extra,
    )


def write_outputs(
    out: Path,
    pairs: Pairs,
    cosine: np.ndarray,
    src: Side,
    trg: Side,
    src_c: Corpus,
    trg_c: Corpus,
    counter: StageCounter,
    cfg: MiningConfig,
    t0: float,
    extra: dict,
    features: dict[str, np.ndarray] | None = None,
) -> dict:
    """mined.parquet, mined.tsv.gz, score_hist.png and a balanced stats.json in ``out``."""
    margins: list[np.ndarray] = []

    def slices() -> Iterator[pa.Table]:
        for t in pairs_slices(pairs, cosine, src, trg, src_c, trg_c, features):
            margins.append(t.column("margin").to_numpy())
            yield t

    write_pairs(slices(), out)
    margin = np.concatenate(margins)
    if len(margin) > len(pairs):
        counter.add_event("candidates", "expanded_to_duplicate_rows", len(margin) - len(pairs))
    write_histogram(margin, out / "score_hist.png", cfg.threshold)
    report = counter.to_report(
        STAGE,
        rows_written=len(margin),
        seconds=round(time.perf_counter() - t0, 3),
        config={**asdict(cfg), **extra},
    )
    problems = check_balanced(report)
    if problems:
        raise RuntimeError(f"unbalanced stats: {problems}")
    write_report(str(out / "stats.json"), report)
    return report
