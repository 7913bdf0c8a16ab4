"""Each sentence says where it came from, and that place really holds it: the WARC record at the
locator's offset has the sentence's record id; a Wikipedia sentence names its dump, page id and
title. The columns travel into the mining corpus (and from there, per side, into the pairs)."""

from __future__ import annotations

import gzip
import io

import pytest
from warcio.archiveiterator import ArchiveIterator

from labse_common.formats import MINED_PAIR_SCHEMA, PROVENANCE_COLUMNS
from labse_common.stats import StageCounter
from mining.corpus import read_corpus
from tests.pipelines.test_corpus_jobs import real_sample_run
from tests.support.corpus_util import read_rows, shared

pytestmark = (
    pytest.mark.slow
)  # real-sample corpus jobs, 12-27 s each (shared with test_corpus_jobs)


def _record_id_at(data: bytes, offset: int) -> str:
    rec = next(iter(ArchiveIterator(io.BytesIO(data[offset:]), check_digests=False)))
    return rec.rec_headers.get_header("WARC-Record-ID").strip("<>")


def test_warc_locator_points_at_the_record(tmp_path_factory):
    cc = shared("commoncrawl")
    warc = cc / "cc-main-2020-34-sample.warc.gz"
    # The job's run on both real files (this WARC and a WET file, whose sentences are checked
    # in the loop's other branch only for naming their file).
    out = real_sample_run("cc", tmp_path_factory)
    rows = read_rows(out)
    assert rows
    others = {p.name for p in cc.glob("*.gz")} - {warc.name}
    data = gzip.decompress(warc.read_bytes())
    checked = 0
    for r in rows:
        name, _, offset = r["locator"].partition("@")
        if name in others:
            continue
        assert name == warc.name and offset.isdigit(), r["locator"]
        assert _record_id_at(data, int(offset)) == r["doc_id"]
        checked += 1
    assert checked > 0
    # The mining corpus keeps every provenance column; the pair schema has them per side.
    part = next(p for p in out.rglob("*.parquet") if "dropped" not in str(p))
    corpus = read_corpus(part)
    assert set(PROVENANCE_COLUMNS) <= set(corpus.meta)
    assert {f"{s}_{c}" for s in ("src", "trg") for c in PROVENANCE_COLUMNS} <= set(
        MINED_PAIR_SCHEMA.names
    )


def test_wikipedia_sentences_name_dump_page_and_title(tmp_path_factory):
    wiki = shared("wikipedia") / "enwiki-sample.xml.bz2"
    out = real_sample_run("wiki", tmp_path_factory)
    rows = read_rows(out)
    assert rows
    from pipelines.readers.wikidump import ByteRange, iter_range_pages

    titles = {}
    with open(wiki, "rb") as raw:
        for page in iter_range_pages(raw, ByteRange(str(wiki), 0, None, "bz2"), StageCounter()):
            titles[page.page_id] = page.title
    for r in rows[:200]:
        assert r["source"] == "wikipedia"
        assert r["locator"].startswith(wiki.name + "@")
        assert titles[r["doc_id"]] == r["url_or_title"]
