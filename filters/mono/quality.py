"""Main-content quality scoring: a fastText binary classifier, or the rule-based fallback.

Training data is bootstrapped from the pipelines' own output (see ``pipelines/quality.py``):
Wikipedia sentences and CommonCrawl lines the rules call content are positive, CommonCrawl
lines the rules call boilerplate are negative. The classifier then generalises beyond the
rules' phrase lists (other languages, other sites). The training data is written to disk
next to the model so the bootstrap can be inspected.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from filters.langid import load_fasttext_model
from filters.mono.boilerplate import heuristic_quality

log = logging.getLogger(__name__)

POSITIVE = "__label__content"
NEGATIVE = "__label__boilerplate"
_DIGITS = re.compile(r"\d")
_PUNCT = re.compile(r"([^\w\s])")


def featurize(text: str) -> str:
    """The classifier's view of a line: lower-cased, digits folded, punctuation as tokens.

    Punctuation matters (sentence-final marks, '|' separators, '©'), so it is split off as its
    own token rather than stripped; digits are folded so dates look alike.
    """
    text = _DIGITS.sub("0", text.lower().replace("\n", " "))
    return " ".join(_PUNCT.sub(r" \1 ", text).split())


class QualityScorer:
    """Scores lines in [0, 1], higher = more like main content."""

    def __init__(self, model_path: str | None = None) -> None:
        self.model_path = model_path
        self.model = load_fasttext_model(model_path) if model_path else None
        if self.model is not None and POSITIVE not in self.model.get_labels():
            raise ValueError(f"{model_path} is not a quality model (no {POSITIVE} label)")

    @property
    def kind(self) -> str:
        return "fasttext" if self.model is not None else "heuristic"

    def score(self, texts: Sequence[str]) -> list[float]:
        if not texts:
            return []
        if self.model is None:
            return [heuristic_quality(t) for t in texts]
        labels, probs = self.model.predict([featurize(t) for t in texts], k=2)
        out = []
        for labs, ps in zip(labels, probs):
            p = dict(zip(labs, ps))
            out.append(float(min(p.get(POSITIVE, 0.0), 1.0)))
        return out


@dataclass(frozen=True)
class QualityFilter:
    threshold: float = 0.5

    def __call__(self, score: float) -> str | None:
        return "low_quality" if score < self.threshold else None


def _resample(items: list[str], n: int, rng: random.Random) -> list[str]:
    items = items[:]
    rng.shuffle(items)
    if len(items) >= n:
        return items[:n]
    return items + [rng.choice(items) for _ in range(n - len(items))]


@dataclass
class TrainReport:
    model: str
    n_positive: int
    n_negative: int
    n_test: int
    precision: float
    recall: float
    accuracy: float


@dataclass(frozen=True)
class QualityTrainParams:
    """How the classifier is trained: the one place of these defaults (the flags of
    ``python -m pipelines.quality train`` take theirs from here)."""

    max_per_class: int = 500_000  # training lines per class after balancing
    test_fraction: float = 0.1  # of each class's distinct lines, held out for the report
    epoch: int = 10
    dim: int = 32
    word_ngrams: int = 2
    lr: float = 0.5
    quantize: bool = False
    seed: int = 0


def train_quality_model(
    positives: Iterable[str], negatives: Iterable[str], output: str, params: QualityTrainParams
) -> TrainReport:
    """Train the fastText content/boilerplate classifier; write MODEL and MODEL.report.json.

    Classes are balanced (the smaller one over-sampled) so the 0.5 threshold is meaningful.
    The training and held-out files are kept beside the model (``.train.txt``/``.test.txt``) so
    what the model learned from can be read.
    """
    rng = random.Random(params.seed)
    pos = list(dict.fromkeys(featurize(t) for t in positives if t.strip()))
    neg = list(dict.fromkeys(featurize(t) for t in negatives if t.strip()))
    if not pos or not neg:
        raise ValueError(f"need both classes to train: {len(pos)} positive, {len(neg)} negative")
    train, test = _balanced_split(pos, neg, params.test_fraction, params.max_per_class, rng)
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    train_path, test_path = f"{output}.train.txt", f"{output}.test.txt"
    for path, data in ((train_path, train), (test_path, test)):
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(data) + ("\n" if data else ""))
    settings = {
        "epoch": params.epoch,
        "dim": params.dim,
        "wordNgrams": params.word_ngrams,
        "lr": params.lr,
        "seed": params.seed,
    }
    model = _fit_and_save(train_path, output, settings, params.quantize)
    precision, recall, accuracy = _evaluate(model, test)
    report = TrainReport(
        model=output,
        n_positive=len(pos),
        n_negative=len(neg),
        n_test=len(test),
        precision=precision,
        recall=recall,
        accuracy=accuracy,
    )
    with open(f"{output}.report.json", "w", encoding="utf-8") as f:
        json.dump(report.__dict__, f, indent=2)
    return report


def _balanced_split(
    pos: list[str], neg: list[str], test_fraction: float, max_per_class: int, rng: random.Random
) -> tuple[list[str], list[str]]:
    """(train, test) labelled lines. Distinct lines of each class are held out first, so
    over-sampled copies never leak into the test set; then the training part is balanced by
    over-sampling the smaller class (with replacement) rather than throwing away most of the
    larger one. ``pos`` and ``neg`` are shuffled in place."""
    rng.shuffle(pos)
    rng.shuffle(neg)
    tp_n = int(len(pos) * test_fraction) if len(pos) >= 10 else 0
    tn_n = int(len(neg) * test_fraction) if len(neg) >= 10 else 0
    test = [f"{POSITIVE} {t}" for t in pos[:tp_n]] + [f"{NEGATIVE} {t}" for t in neg[:tn_n]]
    pos, neg = pos[tp_n:], neg[tn_n:]
    n = min(max(len(pos), len(neg)), max_per_class)
    train = [f"{POSITIVE} {t}" for t in _resample(pos, n, rng)]
    train += [f"{NEGATIVE} {t}" for t in _resample(neg, n, rng)]
    rng.shuffle(train)
    return train, test


def _fit_and_save(train_path: str, output: str, settings: dict, quantize: bool):
    """fastText on the training file, saved to ``output`` through a temporary name."""
    import fasttext

    # verbose=2: fastText 0.9.x raises "Encountered NaN" with lower verbosity in some builds.
    model = fasttext.train_supervised(
        input=train_path, minCount=1, loss="softmax", thread=1, verbose=2, **settings
    )
    if quantize:
        model.quantize(input=train_path, retrain=True)
    with tempfile.NamedTemporaryFile(
        dir=os.path.dirname(os.path.abspath(output)), delete=False
    ) as t:
        tmp = t.name
    model.save_model(tmp)
    os.replace(tmp, output)
    return model


def _evaluate(model, test: list[str]) -> tuple[float, float, float]:
    """Precision and recall of the content class, and accuracy, on the held-out lines."""
    tp = fp = fn = correct = 0
    for row in test:
        label, text = row.split(" ", 1)
        pred = model.predict(text, k=1)[0][0]
        correct += pred == label
        tp += pred == POSITIVE and label == POSITIVE
        fp += pred == POSITIVE and label == NEGATIVE
        fn += pred == NEGATIVE and label == POSITIVE
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    return precision, recall, (correct / len(test) if test else 0.0)
