"""Damage inside a file: what is intact is kept, what is lost is counted under a named reason.

The damaged files are made from the real samples in ../shared/data, with bytes flipped
(XOR 0xFF) exactly as in the report: 200 bytes at one third of the WARC.gz, 300 bytes in the
middle of the enwiki .bz2.
"""

from __future__ import annotations

import bz2
import io
import logging
from pathlib import Path

import pytest

from labse_common.stats import StageCounter, check_balanced, to_report
from pipelines import commoncrawl, wikipedia
from pipelines.readers.bz2_blocks import decode_block, find_marks
from pipelines.readers.warc import iter_warc_documents
from pipelines.readers.wikidump import ByteRange, iter_range_pages, plan_ranges
from tests.support.corpus_fixtures import HEADER, article, page_xml, write_multistream
from tests.support.corpus_util import assert_balanced, read_rows, read_stats, shared

# The jobs here are about the reader's counts reaching stats.json, not the runner: one process
# (the worker processes' start-up was most of their time; tests/pipelines/test_corpus_jobs.py
# runs the jobs on worker processes).
IN_MEMORY = ["--direct_running_mode", "in_memory"]


def flipped(data: bytes, offset: int, n: int) -> bytes:
    d = bytearray(data)
    for i in range(offset, min(len(d), offset + n)):
        d[i] ^= 0xFF
    return bytes(d)


def warc_docs(data: bytes):
    c = StageCounter()
    docs = list(iter_warc_documents(io.BytesIO(data), "x.warc.gz", c))
    return docs, to_report("t", c.counts)["counts"]


def dump_pages(data: bytes, rng: ByteRange | None = None):
    c = StageCounter()
    rng = rng or ByteRange("x.xml.bz2", 0, None, "bz2")
    pages = list(iter_range_pages(io.BytesIO(data), rng, c))
    return pages, c.counts


@pytest.fixture(scope="module")
def warc() -> bytes:
    return shared("commoncrawl/cc-main-2020-34-sample.warc.gz").read_bytes()


@pytest.fixture(scope="module")
def enwiki() -> bytes:
    return shared("wikipedia/enwiki-sample.xml.bz2").read_bytes()


@pytest.fixture(scope="module")
def enwiki_good(enwiki) -> dict[str, str]:
    pages, _ = dump_pages(enwiki)
    assert len(pages) == 206
    return {p.title: p.text for p in pages}


def test_warc_gz_resynchronises_at_the_next_gzip_member(warc):
    good_docs, good = warc_docs(warc)
    assert good["documents"]["in"] == 50
    docs, c = warc_docs(flipped(warc, len(warc) // 3, 200))
    d = c["documents"]
    assert d["dropped"]["corrupt_member"] == 1
    assert d["in"] == 50  # 49 intact records read + 1 counted lost
    assert d["in"] - d["dropped"]["corrupt_member"] >= 49
    assert c["files"]["out"] == 1 and c["files"]["dropped"] == {}
    assert 0 < c["files"]["events"]["bytes_skipped"] < 10_000
    # Everything that came out is exactly what the undamaged file gives.
    good_by_id = {x.doc_id: x.text for x in good_docs}
    assert len(docs) >= len(good_docs) - 1
    assert all(good_by_id[x.doc_id] == x.text for x in docs)


@pytest.mark.slow
def test_warc_gz_job_counts_the_damage_in_stats(warc, tmp_path, caplog):
    src = tmp_path / "damaged.warc.gz"
    src.write_bytes(flipped(warc, len(warc) // 3, 200))
    out = tmp_path / "out"
    with caplog.at_level(logging.WARNING):
        rc = commoncrawl.main(["--input", str(src), "--output", str(out), *IN_MEMORY])
    assert rc == 0
    stats = read_stats(out)
    assert_balanced(stats)
    c = stats["counts"]
    assert c["documents"]["in"] == 50 and c["documents"]["dropped"]["corrupt_member"] == 1
    assert c["files"]["out"] == 1 and c["files"]["events"]["bytes_skipped"] > 0
    assert "bad input was skipped" in caplog.text and "corrupt_member" in caplog.text
    assert read_rows(out)


def test_warc_gz_damage_in_two_places_and_trailing_garbage(warc):
    data = flipped(flipped(warc, len(warc) // 5, 50), len(warc) * 3 // 4, 50) + b"\x00garbage" * 9
    docs, c = warc_docs(data)
    d = c["documents"]
    assert d["dropped"]["corrupt_member"] == 3  # two damaged members + the trailing garbage
    assert d["in"] - 3 >= 47
    assert c["files"]["out"] == 1


@pytest.mark.slow
def test_enwiki_bz2_recovers_the_blocks_after_the_damage(enwiki, enwiki_good):
    truncated, tc = dump_pages(enwiki[: len(enwiki) // 2])
    assert tc["file_ranges/dropped/truncated_archive"] == 1
    pages, c = dump_pages(flipped(enwiki, len(enwiki) // 2, 300))
    # Measured: 178 of 206 pages (one 900 kB block lost), where the truncated copy keeps 115.
    assert len(truncated) == 115
    assert len(pages) >= 175 and len(pages) > len(truncated)
    assert all(enwiki_good[p.title] == p.text for p in pages)  # nothing garbled, nothing joined
    assert c["documents/dropped/corrupt_block"] == 1 and c["documents/in"] == 1
    assert 0 < c["file_ranges/event/bytes_skipped"] < len(enwiki) // 4
    assert c["file_ranges/out"] == 1
    assert not check_balanced(to_report("t", c))


@pytest.mark.slow
def test_enwiki_bz2_job_counts_the_damage_in_stats(enwiki, tmp_path, caplog):
    src = tmp_path / "enwiki-damaged-pages-articles.xml.bz2"
    src.write_bytes(flipped(enwiki, len(enwiki) // 2, 300))
    out = tmp_path / "out"
    with caplog.at_level(logging.WARNING):
        rc = wikipedia.main(
            ["--input", str(src), "--output", str(out), "--set", "page_timeout_s=30", *IN_MEMORY]
        )
    assert rc == 0
    stats = read_stats(out)
    assert_balanced(stats)
    c = stats["counts"]
    assert c["file_ranges"]["out"] == 1 and c["file_ranges"]["events"]["bytes_skipped"] > 0
    assert c["documents"]["dropped"]["corrupt_block"] == 1
    assert c["documents"]["in"] >= 176  # 178 pages recovered + the region counted lost
    assert "bad input was skipped" in caplog.text and "corrupt_block" in caplog.text
    assert len(read_rows(out)) > 5000


@pytest.mark.slow
def test_bz2_block_damage_at_the_start_and_at_the_end(enwiki, enwiki_good):
    for offset in (0, len(enwiki) - 100):
        pages, c = dump_pages(flipped(enwiki, offset, 300))
        assert c["documents/dropped/corrupt_block"] == 1
        assert 0 < len(enwiki_good) - len(pages) < 80  # one block of pages, not the whole dump
        assert all(enwiki_good[p.title] == p.text for p in pages)


def test_block_search_is_bit_level(enwiki):
    marks = find_marks(enwiki[:600_000])
    blocks = [b for b, kind in marks if kind == "block"]
    assert blocks[0] == 32  # right after "BZh9"
    assert any(b % 8 for b in blocks[1:])  # later blocks are not byte-aligned
    text = decode_block(enwiki, blocks[0], blocks[1])
    assert len(text) > 100_000
    assert bz2.BZ2Decompressor().decompress(enwiki[: blocks[2] // 8 + 1]).startswith(text)


def test_multistream_damage_loses_one_stream_only(tmp_path):
    pages = [page_xml(f"Topic {i}", article(i), pid=i + 1) for i in range(25)]
    dump, index = write_multistream(tmp_path / "x-pages-articles-multistream.xml.bz2", pages, 5)
    data = dump.read_bytes()
    lines = bz2.decompress(index.read_bytes()).decode().splitlines()
    third = sorted({int(ln.split(":")[0]) for ln in lines})[2]  # the stream of pages 10..14
    dump.write_bytes(flipped(data, third + 60, 40))
    with open(dump, "rb") as raw, open(index, "rb") as idx:
        ranges = plan_ranges(str(dump), raw, idx, streams_per_range=10)
    assert len(ranges) == 1  # one range holding every stream: recovery must cross streams
    titles, c = [], StageCounter()
    with open(dump, "rb") as raw:
        titles = [p.title for p in iter_range_pages(raw, ranges[0], c)]
    assert titles == [f"Topic {i}" for i in range(25) if not 10 <= i < 15]
    assert c.counts["documents/dropped/corrupt_block"] == 1
    assert c.counts["file_ranges/out"] == 1


def test_xml_damage_resynchronises_at_the_next_page(tmp_path):
    pages = [page_xml(f"Topic {i}", article(i), pid=i + 1) for i in range(6)]
    pages[2] = pages[2].replace("</page>", "</pa#e>")  # damaged end tag
    pages[4] = pages[4].replace("<page>", "<p@ge>")  # damaged start tag
    pages[5] = pages[5].replace("</page>", "</p@ge>")  # the last page's end tag
    xml = (HEADER + "".join(pages) + "</mediawiki>\n").encode("utf-8")
    got, c = dump_pages(xml, ByteRange("x.xml", 0, None, "none"))
    assert [p.title for p in got] == ["Topic 0", "Topic 1", "Topic 3"]
    assert c["documents/dropped/malformed_page_xml"] == 3
    assert c["file_ranges/out"] == 1


def test_truncated_gz_member_is_still_reported(warc):
    docs, c = warc_docs(warc[: len(warc) * 2 // 3])
    assert c["files"]["dropped"] == {"truncated_archive": 1}
    assert len(docs) >= 8


@pytest.mark.parametrize("name", ["damaged.warc.gz"])
def test_unrecoverable_gzip_is_corrupt_archive(tmp_path: Path, name):
    import gzip

    data = flipped(gzip.compress(b"WARC/1.0\r\n" + b"x" * 5000), 20, 100)
    docs, c = warc_docs(data)
    assert docs == [] and c["files"]["dropped"] == {"corrupt_archive": 1}
