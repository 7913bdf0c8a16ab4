"""The per-document cleaning chain: lines -> length -> sentences -> length -> LID -> quality.

Plain Python so it runs the same inside a Beam DoFn, a benchmark or a notebook. Each step is a
:class:`filters.steps.Step` that keeps a record or drops it with a named reason; two
:class:`filters.steps.Chain` s count them in a StageCounter under the units ``lines`` and
``sentences`` (and ``documents``). A document is counted *in* by the reader that
produced it (readers also drop non-content records); the cleaner counts it out, or drops it as
``no_sentence_kept``. Cross-document deduplication is not here: it
needs the whole corpus and lives in the Beam job.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from filters.langid import LanguageFilter, LanguageIdentifier, LidResult
from filters.mono.length import LengthFilter
from filters.mono.quality import QualityFilter, QualityScorer
from filters.mono.splitter import split_sentences
from filters.mono.text import clean_text
from filters.steps import Chain, Step
from labse_common.sections.corpus import CorpusConfig
from labse_common.stats import StageCounter

SENTENCE_COLUMNS = (
    "text",
    "lang",
    "lang_score",
    "quality_score",
    "source",
    "doc_id",
    "url_or_title",
    "locator",
)


@dataclass
class Document:
    text: str
    source: str  # "commoncrawl" | "wikipedia"
    doc_id: str
    url_or_title: str
    locator: str = ""  # where in the source file (labse_common.formats: the locator column)


# The cleaner's settings are the `corpus` config section: one dataclass, validated by
# labse_common.config.load (CLIs) and constructible directly (libraries, benchmarks).
CleanerConfig = CorpusConfig


@dataclass
class CleanResult:
    kept: list[dict] = field(default_factory=list)
    dropped: list[dict] = field(default_factory=list)  # filled only when asked for


class Sentence:
    """A sentence record travelling through the sentence chain, with its annotations."""

    __slots__ = ("text", "lang", "lang_score", "quality_score")

    def __init__(self, text: str) -> None:
        self.text = text
        self.lang: str | None = None
        self.lang_score: float | None = None
        self.quality_score: float | None = None

    def scores(self) -> dict:
        """The annotations set so far, as the dropped row's extra columns."""
        out: dict = {}
        if self.lang is not None:
            out.update(lang=self.lang, lang_score=self.lang_score)
        if self.quality_score is not None:
            out["quality_score"] = self.quality_score
        return out


class NotEmpty(Step):
    name = "empty"

    def __call__(self, line: str) -> str | None:
        return None if line else "empty"


class Length(Step):
    """Character length bounds on a line (str) or a sentence (``.text``)."""

    name = "length"

    def __init__(self, length: LengthFilter) -> None:
        self.length = length

    def __call__(self, record: str | Sentence) -> str | None:
        return self.length(record if isinstance(record, str) else record.text)


class Language(Step):
    """fastText LID over the batch, then the language filter per sentence."""

    name = "lang"

    def __init__(self, lid: LanguageIdentifier, lang_filter: LanguageFilter) -> None:
        self.lid, self.lang_filter = lid, lang_filter

    def annotate(self, records: Sequence[Sentence]) -> None:
        for rec, res in zip(records, self.lid.predict([r.text for r in records])):
            rec.lang, rec.lang_score = res.lang, res.score

    def __call__(self, rec: Sentence) -> str | None:
        return self.lang_filter(LidResult(rec.lang, rec.lang_score))


class Quality(Step):
    name = "quality"

    def __init__(self, scorer: QualityScorer, quality_filter: QualityFilter) -> None:
        self.scorer, self.quality_filter = scorer, quality_filter

    def annotate(self, records: Sequence[Sentence]) -> None:
        for rec, q in zip(records, self.scorer.score([r.text for r in records])):
            rec.quality_score = q

    def __call__(self, rec: Sentence) -> str | None:
        return self.quality_filter(rec.quality_score)


class SentenceCleaner:
    """Loads the models once (call from DoFn.setup), then cleans documents.

    Two chains on the step protocol (filters/steps.py): lines (empty, length), then the
    sentences split from the kept lines (length, lang, quality). ``line_chain.counts`` and
    ``sentence_chain.counts`` hold the per-step counts.
    """

    def __init__(self, cfg: CleanerConfig) -> None:
        self.cfg = cfg
        self.length = LengthFilter(cfg.min_chars, cfg.max_chars)
        self.lid = LanguageIdentifier(cfg.lid_model)
        self.lang_filter = LanguageFilter.from_options(cfg.lid_threshold, cfg.langs)
        self.quality = QualityScorer(cfg.quality_model)
        self.quality_filter = QualityFilter(cfg.quality_threshold)
        self.line_chain = Chain([NotEmpty(), Length(self.length)], unit="lines")
        self.sentence_chain = Chain(
            [
                Length(self.length),
                Language(self.lid, self.lang_filter),
                Quality(self.quality, self.quality_filter),
            ],
            unit="sentences",
        )

    def clean(
        self, doc: Document, counter: StageCounter, keep_dropped: bool = False
    ) -> CleanResult:
        res = CleanResult()
        base = {
            "source": doc.source,
            "doc_id": doc.doc_id,
            "url_or_title": doc.url_or_title,
            "locator": doc.locator,
        }

        def drop_line(line: str, step: str, reason: str) -> None:
            if step != "empty":  # an empty line has nothing to write out; it is only counted
                res.dropped.append({"text": line, "reason": reason, "unit": "lines", **base})

        def drop_sentence(rec: Sentence, step: str, reason: str) -> None:
            res.dropped.append(
                {"text": rec.text, "reason": reason, "unit": "sentences", **rec.scores(), **base}
            )

        lines = [clean_text(raw).strip() for raw in doc.text.split("\n")]
        kept_lines = self.line_chain.run(lines, counter, drop_line if keep_dropped else None)
        sentences = [Sentence(s) for line in kept_lines for s in split_sentences(line)]
        kept = self.sentence_chain.run(sentences, counter, drop_sentence if keep_dropped else None)
        res.kept = [
            {
                "text": s.text,
                "lang": s.lang,
                "lang_score": s.lang_score,
                "quality_score": s.quality_score,
                **base,
            }
            for s in kept
        ]

        if res.kept:
            counter.add_out("documents")
        else:
            counter.add_dropped("documents", "no_sentence_kept")
        return res
