"""BUCC-style evaluation: mine ``ID<TAB>sentence`` files, pick a threshold on one split's gold
pairs, apply it to another split, report precision/recall/F1.

The threshold search follows LASER's tasks/bucc/bucc.py (candidates sorted by decreasing score,
best F1, threshold halfway to the next score) with two fixes: when the best F1 is at the last
candidate the threshold is that candidate's score (LASER indexes past the end), and a cut is
only considered between different scores (a cut inside a tie cannot be realised).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from labse_common.errors import InputError
from labse_common.sections.mining import MiningConfig
from labse_common.stats import StageCounter
from labse_common.textio import open_text
from mining.corpus import expand_pairs, prepare_side
from mining.evaluate import Embedder
from mining.mine import mine_vectors

log = logging.getLogger(__name__)

IdPair = tuple[str, str]


def read_bucc(path: str | os.PathLike, counter: StageCounter | None = None) -> tuple[list, list]:
    """``ID<TAB>sentence`` lines -> (ids, sentences); malformed lines are counted and skipped."""
    ids, texts = [], []
    with open_text(path) as f:
        for line in f:
            if counter is not None:
                counter.add_in("bucc_lines")
            parts = line.rstrip("\n").rstrip("\r").split("\t", 1)
            if len(parts) != 2 or not parts[0].strip():
                if counter is not None:
                    counter.add_dropped("bucc_lines", "malformed")
                continue
            ids.append(parts[0].strip())
            texts.append(parts[1].strip())
            if counter is not None:
                counter.add_out("bucc_lines")
    return ids, texts


def read_gold(path: str | os.PathLike) -> set[IdPair]:
    gold = set()
    with open_text(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2:
                gold.add((parts[0], parts[1]))
    return gold


@dataclass
class Prf:
    threshold: float
    precision: float
    recall: float
    f1: float
    extracted: int
    correct: int


def optimize_threshold(cand2score: Mapping[IdPair, float], gold: set[IdPair]) -> Prf:
    """Threshold maximising F1 of ``{pairs with score >= threshold}`` against ``gold``."""
    if not cand2score or not gold:
        return Prf(float("inf"), 0.0, 0.0, 0.0, 0, 0)
    items = sorted(cand2score.items(), key=lambda kv: -kv[1])
    scores = np.array([s for _, s in items], dtype=np.float64)
    correct = np.cumsum([p in gold for p, _ in items])
    extracted = np.arange(1, len(items) + 1)
    precision = correct / extracted
    recall = correct / len(gold)
    with np.errstate(divide="ignore", invalid="ignore"):
        f1 = np.where(correct > 0, 2 * precision * recall / (precision + recall), 0.0)
    realisable = np.append(scores[:-1] > scores[1:], True)  # a cut cannot split a tie
    f1 = np.where(realisable, f1, -1.0)
    i = int(np.argmax(f1))  # first best, as LASER's strict ">"
    if f1[i] <= 0:
        return Prf(float("inf"), 0.0, 0.0, 0.0, 0, 0)
    th = float(scores[i]) if i == len(items) - 1 else float((scores[i] + scores[i + 1]) / 2)
    return Prf(th, float(precision[i]), float(recall[i]), float(f1[i]), int(i + 1), int(correct[i]))


def evaluate_at(cand2score: Mapping[IdPair, float], gold: set[IdPair], threshold: float) -> Prf:
    """P/R/F1 of the candidates scoring >= ``threshold``."""
    extracted = {p for p, s in cand2score.items() if s >= threshold}
    correct = len(extracted & gold)
    p = correct / len(extracted) if extracted else 0.0
    r = correct / len(gold) if gold else 0.0
    f1 = 2 * p * r / (p + r) if correct else 0.0
    return Prf(threshold, p, r, f1, len(extracted), correct)


def mine_candidates(
    src: tuple[Sequence[str], Sequence[str]],
    trg: tuple[Sequence[str], Sequence[str]],
    src_vecs: np.ndarray,
    trg_vecs: np.ndarray,
    cfg: MiningConfig,
    paths: tuple[str | os.PathLike | None, str | os.PathLike | None] = (None, None),
) -> dict[IdPair, float]:
    """Mine (LASER's BUCC setting by default: max, ratio, k=4, unify) -> {(src_id, trg_id): score}.

    ``paths`` (the two files) name the side whose every row is unusable in that error."""
    counter = StageCounter()
    sp, tp = (None if p is None else os.fspath(p) for p in paths)
    s_side = prepare_side(
        list(src[1]),
        [src_vecs],
        cfg.unify,
        counter,
        "src_sentences",
        text_input=(sp, "--data"),
        vector_input=(sp, "--data"),
    )
    t_side = prepare_side(
        list(trg[1]),
        [trg_vecs],
        cfg.unify,
        counter,
        "trg_sentences",
        text_input=(tp, "--data"),
        vector_input=(tp, "--data"),
    )
    pairs, _ = mine_vectors(s_side.x, t_side.x, cfg, counter)
    sr, tr, pi = expand_pairs(s_side, t_side, pairs.src, pairs.trg)
    out: dict[IdPair, float] = {}
    for a, b, s in zip(sr, tr, pairs.score[pi]):
        key = (src[0][a], trg[0][b])
        out[key] = max(float(s), out.get(key, float(s)))
    return out


def bucc_files(data_dir: Path, pair: str, split: str) -> tuple[Path, Path, Path]:
    """``{pair}.{split}.{src}``, ``.{trg}``, ``.gold`` in data_dir or data_dir/pair."""
    src, trg = pair.split("-")
    for d in (data_dir / pair, data_dir):
        base = d / f"{pair}.{split}"
        fs, ft = Path(f"{base}.{src}"), Path(f"{base}.{trg}")
        if fs.is_file() and ft.is_file():
            return fs, ft, Path(f"{base}.gold")
    raise InputError(None, f"BUCC files {pair}.{split}.{{{src},{trg}}} not found under {data_dir}")


def evaluate_bucc(
    data_dir: str | os.PathLike,
    pairs: Sequence[str],
    embed: Embedder,
    tune_split: str = "training",
    eval_split: str = "sample",
    cfg: MiningConfig | None = None,
) -> dict:
    """Per language pair: threshold tuned on ``tune_split``, P/R/F1 on ``eval_split``."""
    cfg = cfg or MiningConfig(k=4, margin="ratio", mode="max", unify=True, progress=False)
    d = Path(data_dir)
    if not d.is_dir():
        raise InputError(None, f"BUCC data directory not found: {d}")
    rows = []
    for pair in pairs:
        cands, golds = {}, {}
        for split in dict.fromkeys([tune_split, eval_split]):
            fs, ft, fg = bucc_files(d, pair, split)
            counter = StageCounter()
            s, t = read_bucc(fs, counter), read_bucc(ft, counter)
            sv, tv = embed(list(s[1]), fs), embed(list(t[1]), ft)
            cands[split] = mine_candidates(s, t, sv, tv, cfg, (fs, ft))
            golds[split] = read_gold(fg) if fg.is_file() else set()
        if not golds[tune_split]:
            raise InputError(None, f"{pair}: the tuning split {tune_split!r} needs a .gold file")
        tuned = optimize_threshold(cands[tune_split], golds[tune_split])
        row = {"pair": pair, "threshold": tuned.threshold, "tune_f1": 100 * tuned.f1}
        if golds[eval_split]:
            ev = evaluate_at(cands[eval_split], golds[eval_split], tuned.threshold)
            row.update(precision=100 * ev.precision, recall=100 * ev.recall, f1=100 * ev.f1)
        rows.append(row)
        log.info("bucc %s: %s", pair, row)
    return {"task": "bucc", "tune_split": tune_split, "eval_split": eval_split, "pairs": rows}


def bucc_markdown(report: dict) -> str:
    lines = [
        "| pair | threshold | F1 (tune) | P | R | F1 |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in report["pairs"]:
        prf = [f"{r[k]:.1f}" if k in r else "n/a" for k in ("precision", "recall", "f1")]
        lines.append(
            f"| {r['pair']} | {r['threshold']:.4f} | {r['tune_f1']:.1f} | " + " | ".join(prf) + " |"
        )
    return "\n".join(lines)
