"""Mine many language pairs in one run, reading, embedding and indexing each language once."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from labse_common.datafiles import read_json
from labse_common.embedding_store import load_vectors
from labse_common.errors import InputError, UsageError
from labse_common.langs import parse_pair
from labse_common.sections.mining import MiningConfig
from labse_common.stats import StageCounter
from mining.corpus import Corpus, Side, prepare_side, read_corpus
from mining.lexicon import Lexicon
from mining.mine import (
    bounded_layout,
    compact_texts,
    encode_corpus,
    load_lexicon,
    mine_sides,
    save_store,
    write_outputs,
)
from mining.retrieval import retrieve

if TYPE_CHECKING:
    from labse_common.resume_shards import Shards

log = logging.getLogger(__name__)


@dataclass
class Language:
    corpus: Corpus
    side: Side  # rows and duplicates only: the vectors stay in the store
    counts: dict[str, int]  # cleaning counts under unit "sentences"
    store: str  # the embedding store (or .npy) the bounded miner reads in chunks
    dim: int


def _renamed(counts: dict[str, int], unit: str) -> dict[str, int]:
    return {unit + k[len("sentences") :]: v for k, v in counts.items()}


def read_inputs(
    langs: Sequence[str], corpus_pattern: str, emb_pattern: str | None, model: str | None
) -> dict[str, tuple[Corpus, list[np.ndarray] | None]]:
    """Every language's corpus (and mapped embeddings), read before any language is embedded.

    A missing or unusable input of the last language fails in seconds, not after the first
    languages were encoded; every language's problem is named in one error.
    """
    if model and not Path(model).is_dir():
        raise InputError(model, "model directory not found", "--model")
    if not model and not emb_pattern:
        raise UsageError("give a model or an embeddings pattern")
    out: dict[str, tuple[Corpus, list[np.ndarray] | None]] = {}
    problems: list[str] = []
    for lang in langs:
        try:
            corpus = read_corpus(corpus_pattern.format(lang=lang), lang, "--corpus")
            blocks = None if model else load_vectors(emb_pattern.format(lang=lang), flag="--emb")
            if blocks is not None and sum(len(b) for b in blocks) != len(corpus):
                raise InputError(
                    emb_pattern.format(lang=lang),
                    f"{len(corpus)} sentences but {sum(len(b) for b in blocks)} "
                    "embedding rows (row i = line i)",
                )
            out[lang] = (corpus, blocks)
        except UsageError as e:  # every language's problem is gathered into one error
            problems.append(f"{lang}: {e}")
    if problems:
        raise UsageError(
            f"{len(problems)} of {len(langs)} language(s) have unusable input, nothing was "
            f"embedded: {'; '.join(problems)}"
        )
    return out


def prepare_language(
    lang: str,
    corpus: Corpus,
    blocks: list[np.ndarray] | None,
    cfg: MiningConfig,
    model: str | None,
    out: Path,
    store: str | None,
    corpus_path: str | None = None,
) -> Language:
    if blocks is None:
        vecs = encode_corpus(model, corpus.texts, cfg.batch_size)
        store = str(out / "embeddings" / lang)
        save_store(Path(store), vecs, corpus)
        blocks = [vecs]
    counter = StageCounter()
    side = prepare_side(
        corpus.text,
        blocks,
        cfg.unify,
        counter,
        "sentences",
        materialize=False,
        text_input=(corpus_path, "--corpus"),
        vector_input=(model, "--model") if model else (store, "--emb"),
    )
    dim = int(blocks[0].shape[1]) if blocks and len(blocks[0]) else 0
    return Language(corpus, side, dict(counter.counts), str(store), dim)


def language_pairs(pairs: Sequence[str | tuple[str, str]]) -> list[tuple[str, str]]:
    """Each pair as its two normalised codes (:func:`labse_common.langs.parse_pair`, the one
    place codes are read), in order, once each: only these codes name files and folders, so a
    pair such as ``../de-en`` is refused instead of writing outside the job's folder."""
    out: dict[tuple[str, str], None] = {}
    bad: list[str] = []
    for p in pairs:
        text = p if isinstance(p, str) else "-".join(p)
        try:
            out[parse_pair(text)] = None
        except ValueError as e:  # the pair as written, then why (the message may name one code)
            bad.append(f"{text!r}: {e}")
    if bad:
        raise UsageError(f"mining.pairs: {'; '.join(bad)}")
    if not out:
        raise UsageError("no language pairs: give --pairs de-en fr-en ... or mining.pairs")
    return list(out)


def run_many(
    pairs: Sequence[str | tuple[str, str]],
    corpus_pattern: str,
    out_dir: str,
    cfg: MiningConfig,
    emb_pattern: str | None = None,
    model: str | None = None,
    lexicon: str | None = None,
    shards: Shards | None = None,
    runner=None,
    workdir: str | None = None,
) -> dict[str, dict]:
    """Mine each pair (``de-en`` or ``("de", "en")``, any spelling :func:`language_pairs`
    reads) into ``out_dir/<src>-<trg>`` of normalised codes; returns the stats per pair.

    ``pairs`` is given (not read from ``cfg.pairs``): the CLI takes them from --pairs too.
    ``{lang}`` in the patterns is replaced by the normalised code (lid.176 label), the name the
    corpus jobs give each language's folder. ``shards``: each pair is a shard (:mod:`labse_common.resume_shards`); a pair an
    earlier attempt finished is kept, its report read back. ``runner`` and ``workdir``: who runs
    the shard tasks and where they write their lists (:class:`mining.bounded.Layout`; the Beam
    job gives both), by default a process pool and a temporary folder."""
    if "{lang}" not in corpus_pattern or (emb_pattern and "{lang}" not in emb_pattern):
        raise UsageError("--corpus and --emb patterns must contain {lang}")
    pairs = language_pairs(pairs)
    lex = load_lexicon(lexicon)
    out = Path(out_dir)
    order = list(dict.fromkeys(lang for pair in pairs for lang in pair))
    inputs = read_inputs(order, corpus_pattern, emb_pattern, model)
    langs: dict[str, Language] = {}
    for lang in order:
        log.info("preparing language %s", lang)
        corpus, blocks = inputs.pop(lang)  # dropped as it goes: each language held once
        store = emb_pattern.format(lang=lang) if emb_pattern and not model else None
        langs[lang] = prepare_language(
            lang, corpus, blocks, cfg, model, out, store, corpus_pattern.format(lang=lang)
        )
    dims = {lang: L.dim for lang, L in langs.items() if L.dim}
    if len(set(dims.values())) > 1:
        raise InputError(None, f"embedding dimensions differ between languages: {dims}", "--emb")
    reports = {}
    for src, trg in pairs:
        if shards is not None and shards.finished(f"{src}-{trg}"):
            reports[f"{src}-{trg}"] = read_json(Path(shards.path(f"{src}-{trg}")) / "stats.json")
            continue
        t0 = time.perf_counter()
        s, t = langs[src], langs[trg]
        counter = StageCounter()
        counter.merge(_renamed(s.counts, "src_sentences"))
        counter.merge(_renamed(t.counts, "trg_sentences"))
        pair_lex = lex.for_pair(src, trg) if lex else None
        found, cosine, extra, features = _mine_pair(s, t, cfg, counter, pair_lex, runner, workdir)
        if lex:  # a pair the lexicon lacks is mined by the encoder alone, its lex_* empty
            extra["lexicon"] = lex.status(f"{src}-{trg}")
            if pair_lex is None and features is not None:
                nan = np.full(len(found), np.nan, np.float32)
                features = {**features, "lex_fwd": nan, "lex_bwd": nan}
        pair_out = Path(shards.begin(f"{src}-{trg}")) if shards else out / f"{src}-{trg}"
        pair_out.mkdir(parents=True, exist_ok=True)
        extra.update(src_lang=src, trg_lang=trg)
        reports[f"{src}-{trg}"] = write_outputs(
            pair_out,
            found,
            cosine,
            s.side,
            t.side,
            s.corpus,
            t.corpus,
            counter,
            cfg,
            t0,
            extra,
            features,
        )
        if shards is not None:
            shards.end(f"{src}-{trg}")
    return reports


def _mine_pair(
    s: Language,
    t: Language,
    cfg: MiningConfig,
    counter: StageCounter,
    lexicon: Lexicon | None,
    runner=None,
    workdir: str | None = None,
):
    """One language pair through the bounded miner (both sides read from their stores)."""
    from mining.vector_side import VectorSide

    n_src, n_trg = len(s.side.offsets) - 1, len(t.side.offsets) - 1
    if n_src == 0 or n_trg == 0:
        found = retrieve(
            np.zeros((n_src, 0), np.float32),
            np.zeros((n_src, 0), np.int64),
            np.zeros((n_trg, 0), np.float32),
            np.zeros((n_trg, 0), np.int64),
            cfg.mode,
            cfg.threshold,
            counter,
        )
        return found, np.zeros(0, np.float32), {}, None
    sv = VectorSide(s.store, rows=s.side.representative())
    tv = VectorSide(t.store, rows=t.side.representative())
    texts = (compact_texts(s.corpus, s.side), compact_texts(t.corpus, t.side)) if lexicon else None
    layout = bounded_layout(cfg, n_src, n_trg, runner)
    layout.workdir = workdir
    return mine_sides(sv, tv, cfg, layout, counter, lexicon, texts)
