"""Unusual encodings and missing inputs: honoured or refused loudly, never a silent empty result.

- a Wikipedia dump in UTF-16 (BOM, ``encoding="UTF-16"``) reads like its UTF-8 original;
- a missing ``--index`` and a Tatoeba folder without the prefix's files exit 2 with a message;
- a UTF-8 byte-order mark never reaches a sentence (text readers, WET payloads, mining).
"""

from __future__ import annotations

import bz2
import codecs
import gzip
import io
import json
import logging
import re

import numpy as np
import pyarrow.parquet as pq
import pytest

from filters.mono.text import decode_bytes
from labse_common.textio import open_text, read_lines, strip_bom
from mining.__main__ import main as mining_main
from mining.bucc import read_bucc
from mining.corpus import read_corpus
from pipelines import wikipedia
from pipelines.readers.warc import iter_warc_documents
from pipelines.readers.wikidump import ByteRange, iter_range_pages, sniff_xml_encoding
from tests.support.corpus_fixtures import FOOTER, HEADER, page_xml, write_multistream, write_wet
from tests.support.corpus_util import assert_balanced, read_rows, read_stats, shared

BOM8 = codecs.BOM_UTF8


def _enwiki_head(n_pages: int) -> str:
    """The real sample's header and first ``n_pages`` pages, closed as a whole dump."""
    text = bz2.decompress(shared("wikipedia/enwiki-sample.xml.bz2").read_bytes()).decode("utf-8")
    end = 0
    for _ in range(n_pages):
        end = text.index("</page>", end) + len("</page>")
    return text[:end] + "\n</mediawiki>\n"


def _pages(data: bytes, compression: str = "none"):
    from labse_common.stats import StageCounter

    c = StageCounter()
    rng = ByteRange("x", 0, None, compression)
    return [(p.title, p.text) for p in iter_range_pages(io.BytesIO(data), rng, c)], c.counts


@pytest.mark.slow
def test_utf16_wikipedia_dump_reads_like_its_utf8_original():
    xml = _enwiki_head(30)
    utf8, _ = _pages(xml.encode("utf-8"))
    decl = '<?xml version="1.0" encoding="UTF-16"?>\n'
    utf16 = (decl + xml).encode("utf-16")  # with a BOM, as editors and .NET write it
    assert utf16[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
    for data, comp in ((utf16, "none"), (bz2.compress(utf16), "bz2")):
        got, c = _pages(data, comp)
        assert got == utf8 and len(got) == 30
        assert c["file_ranges/out"] == 1 and "file_ranges/dropped/not_xml" not in c


@pytest.mark.parametrize(
    "encoding, declared, bom",
    [
        ("utf-16-le", "UTF-16", b""),
        ("utf-16-be", "UTF-16", codecs.BOM_UTF16_BE),
        ("utf-32-le", "UTF-32", codecs.BOM_UTF32_LE),
        ("utf-8", "UTF-8", BOM8),
        ("iso-8859-1", "ISO-8859-1", b""),
        ("cp1252", "windows-1252", b""),
    ],
)
def test_declared_encodings_and_boms(encoding, declared, bom):
    text = "Die Straße in Köln wurde gesperrt, berichtete die Polizei heute früh."
    xml = (
        f'<?xml version="1.0" encoding="{declared}"?>\n' + HEADER + page_xml("Köln", text) + FOOTER
    )
    data = bom + xml.encode(encoding)
    assert codecs.lookup(sniff_xml_encoding(data[:256])[0]).name == codecs.lookup(encoding).name
    got, c = _pages(data)
    assert got == [("Köln", text)], (encoding, c)


@pytest.mark.slow
def test_utf16_dump_job_writes_sentences(tmp_path):
    dump = tmp_path / "enwiki-utf16-pages-articles.xml.bz2"
    dump.write_bytes(
        bz2.compress(
            ('<?xml version="1.0" encoding="UTF-16"?>\n' + _enwiki_head(12)).encode("utf-16")
        )
    )
    out = tmp_path / "out"
    assert wikipedia.main(["--input", str(dump), "--output", str(out)]) == 0
    stats = read_stats(out)
    assert_balanced(stats)
    assert stats["counts"]["file_ranges"] == {"in": 1, "out": 1, "dropped": {}}
    assert stats["counts"]["documents"]["in"] == 12
    assert any(r["lang"] == "en" for r in read_rows(out))


def test_missing_or_wrong_index_is_a_usage_error(tmp_path, caplog):
    dump = tmp_path / "x-pages-articles-multistream.xml.bz2"
    dump.write_bytes(bz2.compress((HEADER + FOOTER).encode()))
    with caplog.at_level(logging.ERROR):
        rc = wikipedia.main(
            [
                "--input",
                str(dump),
                "--output",
                str(tmp_path / "o"),
                "--index",
                str(tmp_path / "nope-index.txt.bz2"),
            ]
        )
    assert rc == 2 and re.search(r"--index \S*nope-index.txt.bz2: not found", caplog.text)
    assert not (tmp_path / "o").exists()
    bad = tmp_path / "bad-index.txt.bz2"
    bad.write_bytes(b"not bz2 at all")
    caplog.clear()
    with caplog.at_level(logging.ERROR):
        rc = wikipedia.main(
            ["--input", str(dump), "--output", str(tmp_path / "o"), "--index", str(bad)]
        )
    assert rc == 2 and "not a bz2 multistream index" in caplog.text
    _, index = write_multistream(
        tmp_path / "y-pages-articles-multistream.xml.bz2", [page_xml("A", "text")], 1
    )
    wikipedia.check_index(str(index))  # a real index passes


# ------------------------------------------------------------------------------------------
# Tatoeba evaluation inputs


def _tatoeba(d, langs, sides=("xxx", "eng"), n=6):
    rng = np.random.default_rng(0)
    for lang in langs:
        base = rng.standard_normal((n, 8)).astype(np.float32)
        for side in sides:
            name = d / f"dev.{lang}-eng.{lang if side == 'xxx' else 'eng'}"
            name.write_text(
                "".join(f"{lang} {side} sentence {i}\n" for i in range(n)), encoding="utf-8"
            )
            np.save(
                str(name) + ".npy", base + 0.01 * rng.standard_normal(base.shape).astype(np.float32)
            )


def test_tatoeba_without_files_for_the_prefix_is_an_error(tmp_path, caplog):
    _tatoeba(tmp_path, ["deu"])
    with caplog.at_level(logging.ERROR):
        rc = mining_main(["eval", "tatoeba", "--data", str(tmp_path), "--prefix", "test"])
    assert rc == 2 and "no test.xxx-eng" in caplog.text
    assert mining_main(["eval", "tatoeba", "--data", str(tmp_path), "--prefix", "dev"]) == 0


def test_tatoeba_language_with_a_missing_side_is_named(tmp_path, caplog, capsys):
    _tatoeba(tmp_path, ["deu", "fra"])
    _tatoeba(tmp_path, ["ita"], sides=("xxx",))  # dev.ita-eng.eng is missing
    with caplog.at_level(logging.ERROR):
        rc = mining_main(["eval", "tatoeba", "--data", str(tmp_path), "--prefix", "dev"])
    assert rc == 2 and "language ita" in caplog.text and "dev.ita-eng.eng missing" in caplog.text
    out = tmp_path / "rep"
    rc = mining_main(
        [
            "eval",
            "tatoeba",
            "--data",
            str(tmp_path),
            "--prefix",
            "dev",
            "--langs",
            "deu",
            "fra",
            "--output",
            str(out),
        ]
    )
    assert rc == 0
    rep = json.loads((out / "tatoeba_dev.json").read_text())
    assert [r["lang"] for r in rep["langs"]] == ["deu", "fra"]
    assert rep["average"]["both"] == 100.0


# ------------------------------------------------------------------------------------------
# Byte-order marks


def test_text_readers_strip_boms(tmp_path):
    lines = ["Erster Satz mit Umlauten: ä ö ü.", "Second line\r", "", "last"]
    body = "\n".join(lines) + "\n"
    want = [ln.rstrip("\r") for ln in lines]
    for name, data in (
        ("u8.txt", BOM8 + body.encode()),
        ("u16.txt", body.encode("utf-16")),
        ("u32.txt", body.encode("utf-32")),
        ("plain.txt", body.encode()),
        ("u8.txt.gz", gzip.compress(BOM8 + body.encode())),
    ):
        p = tmp_path / name
        p.write_bytes(data)
        assert read_lines(p) == want, name
        assert read_corpus(p).texts == want, name
        with open_text(p) as f:
            assert f.read(5) == "Erste"
    bucc = tmp_path / "de-en.training.de"
    bucc.write_bytes(BOM8 + b"de-000001\tEin Satz.\nde-000002\tNoch einer.\n")
    assert read_bucc(bucc) == (["de-000001", "de-000002"], ["Ein Satz.", "Noch einer."])
    assert strip_bom("\ufeffabc") == "abc" and strip_bom("abc") == "abc"
    assert decode_bytes(BOM8 + "Grüße".encode()) == ("Grüße", False)
    assert decode_bytes("Grüße".encode("utf-16")) == ("Grüße", False)


def test_wet_payload_bom_is_stripped(tmp_path):
    from labse_common.stats import StageCounter

    text = "Die Stadt hat am Montag den neuen Haushalt für die Schulen beschlossen."
    p = write_wet(tmp_path / "bom.warc.wet.gz", [("http://x.example/", BOM8 + text.encode())])
    with open(p, "rb") as f:
        docs = list(iter_warc_documents(f, str(p), StageCounter()))
    assert [d.text for d in docs] == [text]


def test_first_mined_sentence_has_no_bom(tmp_path):
    rng = np.random.default_rng(1)
    base = rng.standard_normal((20, 16))
    src, trg = tmp_path / "src.txt", tmp_path / "trg.txt"
    src.write_bytes(BOM8 + "".join(f"Quelle Satz {i}\n" for i in range(20)).encode())
    trg.write_bytes(BOM8 + "".join(f"Target sentence {i}\n" for i in range(20)).encode())
    np.save(
        tmp_path / "src.npy", (base + 0.05 * rng.standard_normal(base.shape)).astype(np.float32)
    )
    np.save(
        tmp_path / "trg.npy", (base + 0.05 * rng.standard_normal(base.shape)).astype(np.float32)
    )
    out = tmp_path / "out"
    rc = mining_main(
        [
            "mine",
            "--src-text",
            str(src),
            "--trg-text",
            str(trg),
            "--src-emb",
            str(tmp_path / "src.npy"),
            "--trg-emb",
            str(tmp_path / "trg.npy"),
            "--output",
            str(out),
            "--src-lang",
            "de",
            "--trg-lang",
            "en",
        ]
    )
    assert rc == 0
    table = pq.read_table(out / "mined.parquet").to_pylist()
    pairs = {(r["src"], r["trg"]) for r in table}
    assert ("Quelle Satz 0", "Target sentence 0") in pairs
    assert not any("\ufeff" in r["src"] + r["trg"] for r in table)


def test_embed_job_text_input_strips_bom(tmp_path):
    from labse_model.embed_inputs import read_chunks

    # The embedding path's reader (the Beam embed job's workers use it too) drops the BOM.
    path = tmp_path / "bom.txt"
    path.write_bytes("\ufeffHallo Welt, ein Satz.\n".encode())
    [(_, texts, _)] = read_chunks(str(path))
    assert texts == ["Hallo Welt, ein Satz."]
