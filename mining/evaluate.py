"""Retrieval evaluation with the mining code: Tatoeba accuracy and UN-style P@1 over a pool.

An ``Embedder`` maps (sentences, file path) to unit vectors: a LaBSE checkpoint
(:func:`model_embedder`) or precomputed ``<file>.npy`` next to each text file
(:func:`npy_embedder`), so the evaluation runs with or without torch.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from labse_common.embedding_store import MANIFEST, load_vectors, unit_rows, valid_mask
from labse_common.errors import InputError
from labse_common.sections.mining import MiningConfig
from labse_common.textio import read_lines
from mining.knn import knn
from mining.margin import neighbourhood_mean, score_candidates

log = logging.getLogger(__name__)

Embedder = Callable[[list[str], Path], np.ndarray]


def model_embedder(model_dir: str, batch_size: int = 64, quantize: str = "none") -> Embedder:
    """Embed with a LaBSE checkpoint through the one model loader (labse_model.embed_store;
    torch imported only when this is used)."""
    if not os.path.isdir(model_dir):
        raise InputError(None, f"model directory not found: {model_dir}")
    from labse_model.embed_store import load_model

    enc = load_model(model_dir, quantize=quantize)

    def embed(texts: list[str], path: Path) -> np.ndarray:
        return enc.encode(texts, batch_size=batch_size)

    return embed


def npy_embedder(emb_dir: str | None = None) -> Embedder:
    """Read ``<name>.npy`` (row i = line i), or an embedding store folder ``<name>`` (as
    ``labse_model encode --output DIR`` writes), from ``emb_dir`` or beside the text file."""

    def embed(texts: list[str], path: Path) -> np.ndarray:
        base = Path(emb_dir) / path.name if emb_dir else path
        p = base.with_name(path.name + ".npy")
        if not p.is_file() and (base.with_name(path.name + ".emb") / MANIFEST).is_file():
            p = base.with_name(path.name + ".emb")
        if not p.exists():
            raise InputError(None, f"embeddings not found for {path}: {p}")
        arr = (
            np.concatenate([np.asarray(b) for b in load_vectors(p)]) if p.is_dir() else (np.load(p))
        )
        if len(arr) != len(texts):
            raise InputError(None, f"{p}: {len(arr)} rows for {len(texts)} sentences")
        return arr

    return embed


def _clean(x: np.ndarray, where: str | None = None) -> np.ndarray:
    # Invalid vectors become zeros: they can never be retrieved nor retrieve (counted as misses).
    x = np.asarray(x, dtype=np.float32)
    ok = valid_mask(x)
    if where is not None and len(x) and not ok.any():
        # An accuracy of 0 from an encoder that gave no usable vector is no measurement.
        raise InputError(
            where,
            f"no usable vector: all {len(x)} embeddings are zero, NaN/inf or "
            "overflow (is the model or the embedding file broken?)",
        )
    out = np.zeros_like(x)
    out[ok] = unit_rows(x[ok], "evaluation vectors")
    return out


def retrieve_top1(
    x: np.ndarray,
    y: np.ndarray,
    scoring: str = "cosine",
    k: int = 4,
    cfg: MiningConfig | None = None,
) -> np.ndarray:
    """Index in ``y`` of each row of ``x``'s best match: nearest cosine, or best ratio margin
    among its k neighbours (LASER's search mode). Blocked kNN, so the pool can be large."""
    cfg = cfg or MiningConfig(progress=False)  # one bar per language would be noise
    if len(x) == 0 or len(y) == 0:
        return np.full(len(x), -1, dtype=np.int64)
    if scoring == "cosine":
        return knn(x, y, 1, cfg)[1][:, 0]
    if scoring != "margin":
        raise ValueError(f"scoring must be cosine or margin, not {scoring!r}")
    fs, fi = knn(x, y, k, cfg)
    bs, _ = knn(y, x, k, cfg)
    scores = score_candidates(fs, fi, neighbourhood_mean(fs), neighbourhood_mean(bs), "ratio")
    return fi[np.arange(len(fi)), scores.argmax(axis=1)]


def accuracy(pred: np.ndarray, texts_pred: Sequence[str], gold_texts: Sequence[str]) -> float:
    """Share of rows retrieving line i, or a line with exactly the gold text (duplicates)."""
    if len(pred) == 0:
        return 0.0
    hits = [p == i or (p >= 0 and texts_pred[p] == gold_texts[i]) for i, p in enumerate(pred)]
    return float(np.mean(hits))


def tatoeba_languages(d: Path, prefix: str, langs: Sequence[str] | None = None) -> list[str]:
    """Languages to evaluate: the requested ones, or every one with a file in ``d``.

    Each must have both sides, ``{prefix}.xxx-eng.xxx`` and ``{prefix}.xxx-eng.eng``: a language
    with one side missing is an error naming the file, not a silent drop (``langs`` can leave it
    out on purpose). No file at all for the prefix is an error too, never an average of 0.
    """
    if not d.is_dir():
        raise InputError(None, f"Tatoeba data directory not found: {d}")
    pat = re.compile(rf"{re.escape(prefix)}\.([^.]+)-eng\.([^.]+)")
    sides: dict[str, set[str]] = {}
    for p in d.iterdir():
        m = pat.fullmatch(p.name)
        if m and m.group(2) in (m.group(1), "eng"):
            sides.setdefault(m.group(1), set()).add(m.group(2))
    if not sides:
        raise InputError(None, f"no {prefix}.xxx-eng.{{xxx,eng}} files in {d} (--prefix {prefix})")
    wanted = list(langs) if langs else sorted(sides)
    absent = [lang for lang in wanted if lang not in sides]
    if absent:
        raise InputError(None, f"no {prefix}.xxx-eng files in {d} for: {', '.join(absent)}")
    for lang in wanted:
        lost = [f"{prefix}.{lang}-eng.{s}" for s in (lang, "eng") if s not in sides[lang]]
        if lost:
            raise InputError(
                None,
                f"language {lang}: {', '.join(lost)} missing in {d} "
                "(pass --langs without it to evaluate the others)",
            )
    return wanted


def evaluate_tatoeba(
    data_dir: str | os.PathLike,
    embed: Embedder,
    langs: Sequence[str] | None = None,
    prefix: str = "tatoeba",
    scoring: str = "cosine",
    k: int = 4,
) -> dict:
    """Accuracy both ways per language on ``{prefix}.xxx-eng.{xxx,eng}`` files, plus average."""
    d = Path(data_dir)
    langs = tatoeba_languages(d, prefix, langs)
    rows = []
    for lang in langs:
        fx, fe = d / f"{prefix}.{lang}-eng.{lang}", d / f"{prefix}.{lang}-eng.eng"
        tx, te = read_lines(fx), read_lines(fe)
        if len(tx) != len(te):
            raise InputError(None, f"{fx}: {len(tx)} lines but {fe} has {len(te)}")
        if not tx:
            raise InputError(None, f"{fx}: no sentences")
        x, e = _clean(embed(tx, fx), fx), _clean(embed(te, fe), fe)
        to_eng = accuracy(retrieve_top1(x, e, scoring, k), te, te)
        from_eng = accuracy(retrieve_top1(e, x, scoring, k), tx, tx)
        rows.append(
            {"lang": lang, "n": len(tx), "xxx_to_eng": 100 * to_eng, "eng_to_xxx": 100 * from_eng}
        )
        log.info("tatoeba %s: %.1f / %.1f", lang, 100 * to_eng, 100 * from_eng)
    avg = {
        key: float(np.mean([r[key] for r in rows])) if rows else 0.0
        for key in ("xxx_to_eng", "eng_to_xxx")
    }
    avg["both"] = (avg["xxx_to_eng"] + avg["eng_to_xxx"]) / 2
    return {"task": "tatoeba", "prefix": prefix, "scoring": scoring, "langs": rows, "average": avg}


def evaluate_pool(
    src_file: str | os.PathLike,
    trg_file: str | os.PathLike,
    embed: Embedder,
    scoring: str = "margin",
    k: int = 4,
    cfg: MiningConfig | None = None,
) -> dict:
    """UN-style P@1: each source line must find its translation (same line) in the whole pool
    of target lines, both directions."""
    fs, ft = Path(src_file), Path(trg_file)
    ts, tt = read_lines(fs), read_lines(ft)
    if len(ts) != len(tt):
        raise InputError(None, f"{fs}: {len(ts)} lines but {ft} has {len(tt)}")
    x, y = _clean(embed(ts, fs), fs), _clean(embed(tt, ft), ft)
    p_fwd = accuracy(retrieve_top1(x, y, scoring, k, cfg), tt, tt)
    p_bwd = accuracy(retrieve_top1(y, x, scoring, k, cfg), ts, ts)
    return {
        "task": "un_pool",
        "scoring": scoring,
        "pool": len(tt),
        "p_at_1_src_to_trg": 100 * p_fwd,
        "p_at_1_trg_to_src": 100 * p_bwd,
    }


def tatoeba_markdown(report: dict) -> str:
    lines = ["| lang | n | xxx→eng | eng→xxx |", "| --- | ---: | ---: | ---: |"]
    for r in report["langs"]:
        lines.append(f"| {r['lang']} | {r['n']} | {r['xxx_to_eng']:.1f} | {r['eng_to_xxx']:.1f} |")
    a = report["average"]
    lines.append(f"| **average** | | {a['xxx_to_eng']:.1f} | {a['eng_to_xxx']:.1f} |")
    return "\n".join(lines)


def write_report_files(report: dict, markdown: str, out_dir: str | os.PathLike, name: str) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (out / f"{name}.md").write_text(markdown + "\n", encoding="utf-8")
