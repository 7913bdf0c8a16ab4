"""A WARC/WET record whose Content-Length is larger than the record: the records after
it were read as its content and their sentences credited to its URL, with no warning. The reader
now finds the record boundary inside the content, cuts the record there and reads the swallowed
records as themselves, counting the resynchronisation."""

from __future__ import annotations

import re
from pathlib import Path

from labse_common.stats import StageCounter
from pipelines.readers.warc import iter_warc_documents
from tests.support.corpus_fixtures import write_wet

DOCS = [
    (f"https://example.org/{i}", f"Record {i} says something worth keeping, number {i}.".encode())
    for i in range(4)
]


def read(path: Path) -> tuple[list, StageCounter]:
    counter = StageCounter()
    with open(path, "rb") as f:
        docs = list(iter_warc_documents(f, str(path), counter))
    return docs, counter


def test_a_too_long_content_length_does_not_swallow_the_next_records(tmp_path: Path):
    good = write_wet(tmp_path / "good.warc.wet", DOCS, gz=False)
    data = good.read_bytes()
    # The first record claims 300 more bytes than it has: it runs into records 1 and 2.
    first = re.search(rb"Content-Length: (\d+)", data)
    bad = data[: first.start(1)] + str(int(first.group(1)) + 300).encode() + data[first.end(1) :]
    (tmp_path / "bad.warc.wet").write_bytes(bad)
    docs, counter = read(tmp_path / "bad.warc.wet")
    by_url = {d.url_or_title: d.text for d in docs}
    assert set(by_url) == {u for u, _ in DOCS}, by_url.keys()
    for url, text in DOCS:
        assert by_url[url].strip() == text.decode(), (url, by_url[url])
    assert counter.counts["documents/event/overlong_record_resynced"] == 1, counter.counts
    report = counter.to_report("t")
    docs_unit = report["counts"]["documents"]
    assert docs_unit["in"] == 4, docs_unit
    good_docs, _ = read(good)
    assert [d.url_or_title for d in good_docs] == [u for u, _ in DOCS]
