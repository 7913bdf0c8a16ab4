"""The per-document cleaning chain: lines -> length -> sentences -> length -> LID -> quality.

Plain Python so it runs the same inside a Beam DoFn, a benchmark or a notebook. Each step
either keeps a record or drops it with a named reason, counted in a StageCounter under the
units ``documents``, ``lines`` and ``sentences``. A document is counted *in* by the reader that
produced it (readers also drop non-content records); the cleaner counts it out, or drops it as
``no_sentence_kept``. Cross-document deduplication is not here: it
needs the whole corpus and lives in the Beam job.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from filters.langid import LanguageFilter, LanguageIdentifier
from filters.length import LengthFilter
from filters.quality import QualityFilter, QualityScorer
from filters.splitter import split_sentences
from filters.text import clean_text
from labse_common.sections.corpus import CorpusConfig
from labse_common.stats import StageCounter

SENTENCE_COLUMNS = ("text", "lang", "lang_score", "quality_score", "source", "doc_id", "url_or_title")


@dataclass
class Document:
    text: str
    source: str  # "commoncrawl" | "wikipedia"
    doc_id: str
    url_or_title: str


# The cleaner's settings are the `corpus` config section: one dataclass, validated by
# labse_common.config.load (CLIs) and constructible directly (libraries, benchmarks).
CleanerConfig = CorpusConfig


@dataclass
class CleanResult:
    kept: list[dict] = field(default_factory=list)
    dropped: list[dict] = field(default_factory=list)  # filled only when asked for


class SentenceCleaner:
    """Loads the models once (call from DoFn.setup), then cleans documents."""

    def __init__(self, cfg: CleanerConfig) -> None:
        self.cfg = cfg
        self.length = LengthFilter(cfg.min_chars, cfg.max_chars)
        self.lid = LanguageIdentifier(cfg.lid_model)
        self.lang_filter = LanguageFilter.from_options(cfg.lid_threshold, cfg.langs)
        self.quality = QualityScorer(cfg.quality_model)
        self.quality_filter = QualityFilter(cfg.quality_threshold)

    def clean(
        self, doc: Document, counter: StageCounter, keep_dropped: bool = False
    ) -> CleanResult:
        res = CleanResult()
        base = {"source": doc.source, "doc_id": doc.doc_id, "url_or_title": doc.url_or_title}

        def drop(text: str, reason: str, unit: str, **scores: object) -> None:
            counter.add_dropped(unit, reason)
            if keep_dropped:
                res.dropped.append({"text": text, "reason": reason, "unit": unit, **scores, **base})

        sentences: list[str] = []
        for raw in doc.text.split("\n"):
            counter.add_in("lines")
            line = clean_text(raw).strip()
            if not line:
                counter.add_dropped("lines", "empty")
                continue
            reason = self.length(line)
            if reason:
                drop(line, reason, "lines")
                continue
            counter.add_out("lines")
            for sent in split_sentences(line):
                counter.add_in("sentences")
                reason = self.length(sent)
                if reason:
                    drop(sent, reason, "sentences")
                else:
                    sentences.append(sent)

        lid = self.lid.predict(sentences)
        survivors = []
        for sent, res_lid in zip(sentences, lid):
            reason = self.lang_filter(res_lid)
            if reason:
                drop(sent, reason, "sentences", lang=res_lid.lang, lang_score=res_lid.score)
            else:
                survivors.append((sent, res_lid))

        scores = self.quality.score([s for s, _ in survivors])
        for (sent, res_lid), q in zip(survivors, scores):
            reason = self.quality_filter(q)
            if reason:
                drop(sent, reason, "sentences", lang=res_lid.lang, lang_score=res_lid.score,
                     quality_score=q)  # fmt: skip
                continue
            counter.add_out("sentences")
            res.kept.append(
                {"text": sent, "lang": res_lid.lang, "lang_score": res_lid.score,
                 "quality_score": q, **base}
            )  # fmt: skip

        if res.kept:
            counter.add_out("documents")
        else:
            counter.add_dropped("documents", "no_sentence_kept")
        return res


def clean_all(
    cleaner: SentenceCleaner, docs: Iterable[Document], counter: StageCounter
) -> list[dict]:
    """Convenience for small inputs and benchmarks: clean every document, return kept rows."""
    out: list[dict] = []
    for d in docs:
        counter.add_in("documents")
        out.extend(cleaner.clean(d, counter).kept)
    return out
