"""Readers on generated good and broken files (no Beam)."""

import io

from labse_common.stats import StageCounter, check_balanced, to_report
from pipelines.readers.warc import iter_warc_documents
from pipelines.readers.wikidump import (
    ByteRange,
    PageConverter,
    iter_range_pages,
    plan_ranges,
)
from tests.support.corpus_fixtures import (
    article,
    make_bad_cc_inputs,
    make_bad_wiki_inputs,
    page_xml,
    write_multistream,
)


def _docs(path):
    c = StageCounter()
    with open(path, "rb") as f:
        docs = list(iter_warc_documents(f, str(path), c))
    return docs, to_report("t", c.counts)["counts"]


def test_warc_bad_inputs_are_counted(tmp_path):
    files = make_bad_cc_inputs(tmp_path)
    docs, c = _docs(files["good"])
    assert len(docs) == 1 and c["files"]["out"] == 1

    docs, c = _docs(files["truncated"])
    assert len(docs) == 1  # the record before the cut survives
    assert c["files"]["dropped"] == {"truncated_archive": 1}

    docs, c = _docs(files["malformed"])
    urls = [d.url_or_title for d in docs]
    assert urls == ["http://c.example/1", "http://c.example/3"]  # resynchronised after the bad one
    assert c["documents"]["dropped"].get("malformed_record") == 1

    docs, c = _docs(files["latin1"])
    assert "Straße in Köln" in docs[0].text
    assert c["documents"]["events"]["charset_fallback"] == 1

    docs, c = _docs(files["cp1251_html"])
    assert len(docs) == 1 and "Городской совет утвердил" in docs[0].text
    assert c["documents"]["dropped"] == {"skipped_request": 1}

    assert _docs(files["empty"])[1]["files"]["dropped"] == {"empty_file": 1}
    assert _docs(files["not_warc"])[1]["files"]["dropped"] == {"not_warc": 1}


def _pages(path, rng=None):
    c = StageCounter()
    with open(path, "rb") as f:
        rng = rng or plan_ranges(str(path), f, None, 1)[0]
        f.seek(0)
        pages = list(iter_range_pages(f, rng, c))
    return pages, c


def test_wiki_bad_dumps_are_counted(tmp_path):
    files = make_bad_wiki_inputs(tmp_path)
    pages, c = _pages(files["good"])
    assert len(pages) == 9  # 10 pages, one with broken XML
    assert c.counts["documents/dropped/malformed_page_xml"] == 1
    assert c.counts["file_ranges/out"] == 1
    for name, reason in (
        ("truncated", "truncated_archive"),
        ("not_xml", "not_xml"),
        ("empty", "empty_file"),
    ):
        _, c = _pages(files[name])
        assert c.counts[f"file_ranges/dropped/{reason}"] == 1, (name, c.counts)


def test_page_converter_namespace_redirect_timeout(tmp_path):
    files = make_bad_wiki_inputs(tmp_path)
    pages, _ = _pages(files["good"])
    conv = PageConverter(timeout_s=0.2, max_page_chars=10_000_000)
    c = StageCounter()
    try:
        docs = [d for p in pages if (d := conv(p, c)) is not None]
    finally:
        conv.close()
    assert len(docs) == 6
    assert "The village of Topic 3 was founded by farmers in the year 1203." in docs[3].text
    assert c.counts["documents/dropped/other_namespace"] == 1
    assert c.counts["documents/dropped/redirect"] == 1
    assert c.counts["documents/dropped/parser_timeout"] == 1


def test_multistream_ranges_from_index_and_from_scan(tmp_path):
    pages = [page_xml(f"Topic {i}", article(i), pid=i + 1) for i in range(25)]
    dump, index = write_multistream(tmp_path / "x-pages-articles-multistream.xml.bz2", pages, 5)
    with open(dump, "rb") as raw, open(index, "rb") as idx:
        by_index = plan_ranges(str(dump), raw, idx, streams_per_range=2)
    with open(dump, "rb") as raw:
        by_scan = plan_ranges(str(dump), raw, None, streams_per_range=2)
    assert len(by_index) == 3  # 5 page streams (+ header stream at 0) in groups of 2
    assert by_scan[0].start == 0 and len(by_scan) >= len(by_index)
    for ranges in (by_index, by_scan):
        titles = []
        c = StageCounter()
        for r in ranges:
            with open(dump, "rb") as f:
                titles += [p.title for p in iter_range_pages(f, r, c)]
        assert titles == [f"Topic {i}" for i in range(25)]
        assert c.counts["file_ranges/out"] == len(ranges)
        assert not check_balanced(to_report("t", c.counts))


def test_plain_xml_dump_single_range(tmp_path):
    xml = tmp_path / "plain.xml"
    xml.write_text("<mediawiki>" + page_xml("A", article(1)) + "</mediawiki>", encoding="utf-8")
    with open(xml, "rb") as f:
        (rng,) = plan_ranges(str(xml), f, None, 10)
    assert rng == ByteRange(str(xml), 0, None, "none")
    c = StageCounter()
    assert [p.title for p in iter_range_pages(io.BytesIO(xml.read_bytes()), rng, c)] == ["A"]
