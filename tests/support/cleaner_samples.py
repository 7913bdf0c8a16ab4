"""Documents from ../shared/data and a digest of what the sentence cleaner makes of them.

Used by tests/filters/test_steps.py to show that the cleaner on the step protocol gives the same
rows and counts as the code before it (the expectation in tests/data/cleaner_expected.json was
computed with the pre-step cleaner by ``python -m tests.support.cleaner_samples``).
"""

from __future__ import annotations

import bz2
import hashlib
import json

from labse_common.stats import StageCounter
from tests.support.paths import REPO
from tests.support.paths import SHARED_DATA as DATA

EXPECTED = REPO / "tests" / "data" / "cleaner_expected.json"
N_WIKI_PAGES = 40  # enough real wikitext; keeps the test within its time budget


def shared_documents() -> list:
    from filters.mono.cleaner import Document
    from filters.mono.wikitext import wikitext_to_text
    from pipelines.readers.warc import iter_warc_documents
    from pipelines.readers.wikidump import DecodeState, iter_pages

    docs = []
    c = StageCounter()
    for name in ("cc-main-2019-35-sample.warc.wet.gz", "cc-main-2020-34-sample.warc.gz"):
        path = DATA / "commoncrawl" / name
        with open(path, "rb") as raw:
            docs.extend(iter_warc_documents(raw, str(path), c))
    data = bz2.decompress((DATA / "wikipedia" / "enwiki-sample.xml.bz2").read_bytes())
    pages = [p for p in iter_pages([data], c, DecodeState()) if p.ns == 0 and not p.redirect]
    for p in pages[:N_WIKI_PAGES]:
        text = wikitext_to_text(p.text)
        if text.strip():
            docs.append(
                Document(text=text, source="wikipedia", doc_id=p.page_id, url_or_title=p.title)
            )
    return docs


def _digest(rows: list[dict]) -> str:
    blob = json.dumps(rows, sort_keys=True, ensure_ascii=False, default=str).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()


def clean_digest(docs: list) -> dict:
    """Kept rows in order, counts, and dropped rows (as a sorted multiset) of the default chain."""
    from filters.mono.cleaner import CleanerConfig, SentenceCleaner

    cleaner = SentenceCleaner(CleanerConfig())
    counter = StageCounter()
    kept, dropped = [], []
    for d in docs:
        counter.add_in("documents")
        res = cleaner.clean(d, counter, keep_dropped=True)
        # The recorded digests predate the provenance locator (empty for these documents).
        kept.extend({k: v for k, v in r.items() if k != "locator"} for r in res.kept)
        dropped.extend({k: v for k, v in r.items() if k != "locator"} for r in res.dropped)
    dropped_keys = sorted(
        json.dumps(r, sort_keys=True, ensure_ascii=False, default=str) for r in dropped
    )
    return {
        "documents": len(docs),
        "kept": len(kept),
        "kept_sha256": _digest(kept),
        "dropped_sha256": hashlib.sha256("\n".join(dropped_keys).encode("utf-8")).hexdigest(),
        "counts": counter.to_report("corpus")["counts"],
    }


if __name__ == "__main__":
    EXPECTED.write_text(json.dumps(clean_digest(shared_documents()), indent=2) + "\n")
    print(EXPECTED.read_text())
