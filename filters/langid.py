"""Language identification with fastText.

The default model is the official ``lid.176.ftz``, shipped inside this package
(``filters/models/``, CC BY-SA 3.0, see its NOTICE.md): the PyPI packages that carry it depend on
a predict-only ``fasttext`` fork that would replace the trainable one. Any fastText LID model
(``lid.176.bin``, GlotLID's ``model.bin``) loads by path.
Labels are returned without the ``__label__`` prefix: ``en`` for lid.176, ``eng_Latn`` for GlotLID.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from labse_common.errors import UsageError
from labse_common.langs import base_lang, normalize_lang

log = logging.getLogger(__name__)

_LABEL_PREFIX = "__label__"


LID_176 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models", "lid.176.ftz")


def default_lid_model_path() -> str:
    """The official lid.176.ftz shipped inside this package (filters/models/)."""
    if not os.path.isfile(LID_176):
        raise FileNotFoundError(
            f"default LID model not found at {LID_176} (a broken install?); pass --lid-model PATH"
        )
    return LID_176


def load_fasttext_model(path: str):
    """Load a fastText model, turning fastText's terse errors into a clear one."""
    import fasttext

    if not os.path.isfile(path):
        raise FileNotFoundError(f"fastText model not found: {path}")
    try:
        # fastText prints a warning about load_model's deprecated API on every load.
        fasttext.FastText.eprint = lambda *a, **k: None
        return fasttext.load_model(path)
    except Exception as e:  # fastText raises ValueError with the C++ message
        raise ValueError(f"cannot load fastText model {path}: {e}") from e


# Languages that lid.176 (and most LID models) cannot tell apart reliably: the probability mass
# of one sentence spreads over the group (a Serbian Latin sentence scores sr 0.38, hr 0.30,
# sh 0.20). Confidence is the group's total, the label stays the model's top choice.
CONFUSABLE_GROUPS: tuple[frozenset[str], ...] = (
    frozenset({"sr", "hr", "bs", "sh", "cnr"}),
    frozenset({"ms", "id"}),
    frozenset({"no", "nb", "nn"}),
)
_GROUP_OF = {lang: g for g in CONFUSABLE_GROUPS for lang in g}


@dataclass
class LidResult:
    lang: str
    score: float


class LanguageIdentifier:
    """Batch language ID. Keep ``predict`` calls batched: fastText's list API is much faster."""

    top_k = 4  # enough to sum a confusable group's mass

    def __init__(self, model_path: str | None = None) -> None:
        self.model_path = model_path or default_lid_model_path()
        self.model = load_fasttext_model(self.model_path)

    def predict(self, texts: Sequence[str]) -> list[LidResult]:
        if not texts:
            return []
        # fastText treats '\n' as end of input; sentences are single lines already, but be safe.
        clean = [t.replace("\n", " ") for t in texts]
        # Top-1 first (20% cheaper); only sentences whose best label is in a confusable group
        # need the next labels to sum the group's mass.
        labels, probs = self.model.predict(clean, k=1)
        labels, probs = list(labels), list(probs)
        again = [
            i
            for i, labs in enumerate(labels)
            if labs and labs[0][len(_LABEL_PREFIX) :] in _GROUP_OF
        ]
        if again:
            more_l, more_p = self.model.predict([clean[i] for i in again], k=self.top_k)
            for i, labs, ps in zip(again, more_l, more_p):
                labels[i], probs[i] = labs, ps
        out = []
        for labs, ps in zip(labels, probs):
            if not len(labs):
                out.append(LidResult("und", 0.0))
                continue
            top = labs[0][len(_LABEL_PREFIX) :]
            group = _GROUP_OF.get(top)
            score = (
                float(ps[0])
                if group is None
                else float(sum(p for lab, p in zip(labs, ps) if lab[len(_LABEL_PREFIX) :] in group))
            )
            out.append(LidResult(top, min(score, 1.0)))
        return out


@dataclass(frozen=True)
class LanguageFilter:
    """Keep a sentence when its language is wanted and the model is confident enough."""

    threshold: float = 0.5
    langs: frozenset[str] | None = None

    @classmethod
    def from_options(cls, threshold: float, langs: Iterable[str] | None) -> LanguageFilter:
        return cls(threshold, frozenset(langs) if langs else None)

    def __call__(self, result: LidResult) -> str | None:
        if result.score < self.threshold:
            return "lang_low_confidence"
        if self.langs is not None and result.lang not in self.langs:
            return "lang_not_wanted"
        return None


# --- the language of a text source's lines ---------------------------------------------------


@functools.lru_cache(maxsize=4)
def _identifier(model_path: str | None):
    try:
        return LanguageIdentifier(model_path)
    except (FileNotFoundError, ValueError) as e:
        raise UsageError(str(e)) from None


def _lid_code(label: str) -> str:
    """A model's label as this project writes codes (lid.176's own labels stay as they are but
    for the macro-language members; GlotLID's ``deu_Latn`` -> ``de``)."""
    try:
        return normalize_lang(label)
    except ValueError:
        return base_lang(label)


def detect_lines(
    lines: list[str], model_path: str | None = None, threshold: float = 0.5
) -> list[str | None]:
    """The language of each line (:class:`LanguageIdentifier`, default model
    lid.176, loaded once per process), or None for a blank line or a score under
    ``threshold``."""
    keep = [i for i, line in enumerate(lines) if line.strip()]
    out: list[str | None] = [None] * len(lines)
    if not keep:
        return out
    results = _identifier(model_path).predict([lines[i].strip() for i in keep])
    for i, r in zip(keep, results):
        if r.lang != "und" and r.score >= threshold:
            out[i] = _lid_code(r.lang)
    return out
