"""labse_common.sources and the language codes it normalizes with (labse_common.langs): the
user's pair and text patterns become concrete files, and pair files read with every record
counted."""

from __future__ import annotations

import gzip
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from labse_common.errors import InputError, UsageError
from labse_common.langs import (
    ISO3_TO_1,
    LID_176_LABELS,
    LID_LANGS,
    base_lang,
    normalize_lang,
    parse_pair,
)
from labse_common.pair_files import PairFile, read_pairs_file
from labse_common.sources import TextFile, expand_pairs, expand_texts
from labse_common.stats import StageCounter, check_balanced


def _write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode("utf-8") if isinstance(text, str) else text
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def _read(pf: PairFile) -> tuple[list[tuple[str, str]], dict]:
    counter = StageCounter()
    pairs = list(read_pairs_file(pf, counter))
    report = counter.to_report("t")
    assert check_balanced(report) == []
    return pairs, report["counts"].get("pairs", {"in": 0, "out": 0, "dropped": {}})


# --- language codes ----------------------------------------------------------------------------


def test_lid_labels_are_the_bundled_models():
    fasttext = pytest.importorskip("fasttext")
    from filters.langid import LID_176

    fasttext.FastText.eprint = lambda *a, **k: None
    labels = sorted(
        lab.removeprefix("__label__") for lab in fasttext.load_model(LID_176).get_labels()
    )
    assert list(LID_176_LABELS) == labels and len(LID_LANGS) == 176


def test_every_lid_language_has_a_three_letter_code():
    two_letter = {lab for lab in LID_LANGS if len(lab) == 2}
    assert two_letter - set(ISO3_TO_1.values()) == set()
    # a code mapped to a three-letter label means that label (gsw -> lid.176's "als")
    assert all(len(v) == 2 or v in LID_LANGS for v in ISO3_TO_1.values())
    # the new entries do not change what existing callers get
    assert base_lang("yue") == "zh" and base_lang("deu") == "de"


@pytest.mark.parametrize(
    "code, want",
    [
        ("EN", "en"),
        ("eng", "en"),
        ("ger", "de"),
        ("zh-Hans", "zh"),
        ("cmn_Hani", "zh"),
        ("fra", "fr"),
        ("nob", "no"),
        ("ceb", "ceb"),
        ("gsw", "als"),
        (" pt-BR ", "pt"),
        ("wel", "cy"),
        ("ekk", "et"),
    ],
)
def test_normalize_lang(code, want):
    assert normalize_lang(code) == want


@pytest.mark.parametrize("code", ["xx", "", "tir", "klingon", "de.fr"])
def test_normalize_lang_refuses_unknown_codes(code):
    with pytest.raises(ValueError, match="language code"):
        normalize_lang(code)


def test_parse_pair():
    assert parse_pair("de-fr") == ("de", "fr")
    assert parse_pair("deu-fra") == ("de", "fr")
    assert parse_pair("cmn_Hani-ENG") == ("zh", "en")
    for bad in ("de_fr", "de", "de-fr-en", "zh-Hans-en", "-fr", "de-"):
        with pytest.raises(ValueError, match="not SRC-TRG"):
            parse_pair(bad)
    with pytest.raises(ValueError, match="same language"):
        parse_pair("deu-de")
    with pytest.raises(ValueError, match="'xx'"):
        parse_pair("de-xx")


# --- expanding pair patterns -------------------------------------------------------------------


def test_expand_pairs_formats_and_codes(tmp_path):
    _write(tmp_path / "parallel/de-fr.tsv", "Hallo\tBonjour\n")
    _write(tmp_path / "parallel/deu-eng.tsv.gz", "Hallo\tHello\n")
    pq.write_table(
        pa.table({"src": ["a"], "trg": ["b"]}), _dir(tmp_path / "data/x") / "es-en.parquet"
    )
    _write(tmp_path / "corpus/train.fra-deu.fra", "Bonjour\n")
    _write(tmp_path / "corpus/train.fra-deu.deu", "Hallo\n")
    _write(tmp_path / "corpus/train.fra-deu.xml", "<opus/>")  # OPUS's extra files: not a side
    found = expand_pairs(
        [
            "parallel/{src}-{trg}.tsv*",
            "data/*/{src}-{trg}.parquet",
            "corpus/train.{src}-{trg}.{lang}",
            str(tmp_path / "parallel/{src}-{trg}.tsv"),
        ],
        tmp_path,
        "--pairs",
    )
    got = [
        (p.src_lang, p.trg_lang, p.fmt, [Path(x).relative_to(tmp_path).as_posix() for x in p.paths])
        for p in found
    ]
    assert got == [
        ("de", "en", "tsv", ["parallel/deu-eng.tsv.gz"]),
        ("de", "fr", "tsv", ["parallel/de-fr.tsv"]),  # found by two patterns, listed once
        ("es", "en", "parquet", ["data/x/es-en.parquet"]),
        ("fr", "de", "moses", ["corpus/train.fra-deu.fra", "corpus/train.fra-deu.deu"]),
    ]
    assert all(Path(x).is_absolute() for p in found for x in p.paths)
    assert found[1].pattern == "parallel/{src}-{trg}.tsv*"


def _dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_expand_pairs_refusals(tmp_path):
    _write(tmp_path / "p/de-fr.tsv", "a\tb\n")
    with pytest.raises(UsageError, match=r"--pairs p/\*\.tsv: .*needs the placeholder"):
        expand_pairs(["p/*.tsv"], tmp_path, "--pairs")
    with pytest.raises(UsageError, match=r"--pairs q/\{src\}-\{trg\}\.tsv: matches no file"):
        expand_pairs(["q/{src}-{trg}.tsv"], tmp_path, "--pairs")
    with pytest.raises(UsageError, match="unknown pair file format"):
        expand_pairs(["p/{src}-{trg}.csv"], tmp_path, "--pairs")
    with pytest.raises(UsageError, match="unknown placeholder"):
        expand_pairs(["p/{src}-{trg}.{side}"], tmp_path, "--pairs")
    _write(tmp_path / "u/xx-fr.tsv", "a\tb\n")
    with pytest.raises(InputError, match=r"--pairs .*u/xx-fr\.tsv: unknown language code 'xx'"):
        expand_pairs(["u/{src}-{trg}.tsv"], tmp_path, "--pairs")
    _write(tmp_path / "s/deu-de.tsv", "a\tb\n")
    with pytest.raises(InputError, match="same language"):
        expand_pairs(["s/{src}-{trg}.tsv"], tmp_path, "--pairs")
    _write(tmp_path / "f/de-fr-old.tsv", "a\tb\n")
    with pytest.raises(InputError, match=r"de-fr-old\.tsv: matches .* does not fit"):
        expand_pairs(["f/{src}-{trg}.tsv"], tmp_path, "--pairs")
    _write(tmp_path / "two/t.de-fr.de", "a\n")
    _write(tmp_path / "two/t.de-fr.deu", "a\n")
    _write(tmp_path / "two/t.de-fr.fr", "a\n")
    with pytest.raises(InputError, match="two files for the src side"):
        expand_pairs(["two/t.{src}-{trg}.{lang}"], tmp_path, "--pairs")
    _write(tmp_path / "m/train.de-fr.de", "a\n")
    with pytest.raises(
        InputError, match=r"train\.de-fr\.de: Moses file without its partner .*train\.de-fr\.fr"
    ):
        expand_pairs(["m/train.{src}-{trg}.{lang}"], tmp_path, "--pairs")


def test_expand_pairs_remote_goes_through_filesystems(monkeypatch):
    from labse_common import filesystems

    pytest.importorskip("apache_beam")
    asked = []
    listing = ["s3://b/pairs/deu-fra.parquet", "s3://b/pairs/en-de.tsv"]
    monkeypatch.setattr(filesystems, "match", lambda g: asked.append(g) or listing)
    found = expand_pairs(["{src}-{trg}.*"], "s3://b/pairs", "--pairs")
    assert asked == ["s3://b/pairs/*-*.*"]
    assert [(p.src_lang, p.trg_lang, p.fmt, p.paths) for p in found] == [
        ("de", "fr", "parquet", ("s3://b/pairs/deu-fra.parquet",)),
        ("en", "de", "tsv", ("s3://b/pairs/en-de.tsv",)),
    ]


# --- reading pairs -----------------------------------------------------------------------------


def test_read_tsv_and_gzip_counts_balance(tmp_path):
    body = "\ufeffHallo \tBonjour\t0.9\nnur eine Spalte\n\n  \tvide\nZwei\tDeux\n"
    for name in ("de-fr.tsv", "de-fr.tsv.gz"):
        path = _write(tmp_path / name, body)
        pairs, c = _read(PairFile("de", "fr", "tsv", (str(path),), "x"))
        assert pairs == [("Hallo", "Bonjour"), ("Zwei", "Deux")], name
        assert c["in"] == 5 and c["out"] == 2
        assert c["dropped"] == {"malformed": 1, "blank": 1, "empty_side": 1}


def test_read_tsv_header_and_bad_utf8(tmp_path):
    path = _write(tmp_path / "h.tsv", "src\ttrg\na\tb\n")
    pairs, c = _read(PairFile("de", "fr", "tsv", (str(path),), "x"))
    assert pairs == [("a", "b")] and c["dropped"] == {"header": 1}
    bad = _write(tmp_path / "bad.tsv", b"a\tb\n\xff\xfe\x00x\tc\n")
    with pytest.raises(InputError, match=r"bad\.tsv: not UTF-8 text \(line 2"):
        _read(PairFile("de", "fr", "tsv", (str(bad),), "x"))
    utf16 = tmp_path / "w.tsv"
    utf16.write_bytes("Grüße\tSalut\n".encode("utf-16"))  # BOM names the encoding
    assert _read(PairFile("de", "fr", "tsv", (str(utf16),), "x"))[0] == [("Grüße", "Salut")]


def test_read_truncated_gzip_is_an_input_error(tmp_path):
    path = tmp_path / "cut.tsv.gz"
    path.write_bytes(gzip.compress(b"a\tb\n" * 1000)[:30])
    with pytest.raises(InputError, match=r"cut\.tsv\.gz: damaged gzip"):
        _read(PairFile("de", "fr", "tsv", (str(path),), "x"))


def test_read_parquet(tmp_path):
    path = tmp_path / "p.parquet"
    pq.write_table(
        pa.table({"id": [1, 2, 3], "trg": ["b", None, "d"], "src": ["a", "x", " c "]}), path
    )
    pairs, c = _read(PairFile("de", "fr", "parquet", (str(path),), "x"))
    assert pairs == [("a", "b"), ("c", "d")] and c["dropped"] == {"empty_side": 1}
    pq.write_table(pa.table({"source": ["a"], "trg": ["b"]}), nosrc := tmp_path / "n.parquet")
    with pytest.raises(InputError, match=r"n\.parquet: has no column 'src'"):
        _read(PairFile("de", "fr", "parquet", (str(nosrc),), "x"))
    _write(junk := tmp_path / "junk.parquet", "not parquet at all")
    with pytest.raises(InputError, match=r"junk\.parquet: not a readable Parquet"):
        _read(PairFile("de", "fr", "parquet", (str(junk),), "x"))


def test_read_moses(tmp_path):
    src = _write(tmp_path / "t.de-fr.de", "Hallo\nWelt\n\n")
    trg = _write(tmp_path / "t.de-fr.fr", "\ufeffBonjour\r\nmonde\nseul\n")
    pairs, c = _read(PairFile("de", "fr", "moses", (str(src), str(trg)), "x"))
    assert pairs == [("Hallo", "Bonjour"), ("Welt", "monde")]
    assert c["in"] == 3 and c["dropped"] == {"empty_side": 1}


def test_read_moses_different_lengths_fails_before_any_pair(tmp_path):
    src = _write(tmp_path / "t.de-fr.de", "a\nb\nc\n")
    trg = _write(tmp_path / "t.de-fr.fr", "x\ny")  # no final newline: still 2 lines
    counter = StageCounter()
    it = read_pairs_file(PairFile("de", "fr", "moses", (str(src), str(trg)), "x"), counter)
    with pytest.raises(
        InputError, match=r"t\.de-fr\.de: .*3 lines here, 2 lines in .*t\.de-fr\.fr"
    ):
        next(it)
    assert dict(counter.counts) == {}


def test_expanded_files_read_end_to_end(tmp_path):
    _write(tmp_path / "c/train.deu-fra.deu", "Guten Morgen\nDanke\n")
    _write(tmp_path / "c/train.deu-fra.fra", "Bonjour\nMerci\n")
    (pf,) = expand_pairs(["c/train.{src}-{trg}.{lang}"], tmp_path, "--pairs")
    assert (pf.src_lang, pf.trg_lang) == ("de", "fr")
    assert _read(pf)[0] == [("Guten Morgen", "Bonjour"), ("Danke", "Merci")]


# --- texts -------------------------------------------------------------------------------------


def test_expand_texts(tmp_path):
    _write(tmp_path / "mono/deu.txt", "Hallo\n")
    _write(tmp_path / "mono/fr.txt", "Salut\n")
    got = expand_texts(["mono/{lang}.txt"], tmp_path, "--text")
    assert got == [
        TextFile(str(tmp_path / "mono/deu.txt"), "de"),
        TextFile(str(tmp_path / "mono/fr.txt"), "fr"),
    ]
    assert [t.lang for t in expand_texts(["mono/*.txt"], tmp_path, "--text")] == [None, None]
    _write(tmp_path / "bad/notes.txt", "x\n")
    with pytest.raises(InputError, match=r"notes\.txt: unknown language code 'notes'"):
        expand_texts(["bad/{lang}.txt"], tmp_path, "--text")
    with pytest.raises(UsageError, match=r"--text none/\*\.txt: matches no file"):
        expand_texts(["none/*.txt"], tmp_path, "--text")
    with pytest.raises(UsageError, match="only {lang}"):
        expand_texts(["mono/{src}.txt"], tmp_path, "--text")


def test_detect_lines():
    pytest.importorskip("fasttext")
    from filters.langid import detect_lines  # moved there: labse_common imports no filters

    lines = [
        "The weather is very nice today and we are going to the beach.",
        "Das Wetter ist heute sehr schön und wir gehen an den Strand.",
        "Il fait très beau aujourd'hui et nous allons à la plage.",
        "   ",
    ]
    assert detect_lines(lines) == ["en", "de", "fr", None]
    assert detect_lines(lines[:1], threshold=1.01) == [None]
    assert detect_lines([]) == []
    with pytest.raises(UsageError, match="not found"):
        detect_lines(["x"], model_path="/nonexistent/model.bin")


# --- several globs of one source (a WET-only folder must not stop on the WARC glob) ----


def test_a_pair_glob_matching_nothing_is_skipped_while_another_matches(tmp_path, caplog):
    _write(tmp_path / "parallel/train.de-en.tsv", "Hallo\tHello\n")
    patterns = ["parallel/*.{src}-{trg}.tsv", "parallel/corpus.{src}-{trg}.{lang}"]
    with caplog.at_level("WARNING", logger="labse_common.sources"):
        got = expand_pairs(patterns, tmp_path, "sources.pairs")
    assert [(p.src_lang, p.trg_lang, p.fmt) for p in got] == [("de", "en", "tsv")]
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "parallel/corpus.{src}-{trg}.{lang}: matches no file" in warning, warning
    # Moses only: the TSV glob is the one skipped
    _write(tmp_path / "moses/corpus.de-fr.de", "a\n")
    _write(tmp_path / "moses/corpus.de-fr.fr", "b\n")
    got = expand_pairs(["moses/*.{src}-{trg}.tsv", "moses/corpus.{src}-{trg}.{lang}"], tmp_path)
    assert [(p.src_lang, p.trg_lang, p.fmt) for p in got] == [("de", "fr", "moses")]


def test_pair_globs_that_all_match_nothing_are_one_error_naming_each(tmp_path):
    patterns = ["parallel/*.{src}-{trg}.tsv", "parallel/corpus.{src}-{trg}.{lang}"]
    with pytest.raises(UsageError) as e:
        expand_pairs(patterns, tmp_path, "sources.pairs")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("sources.pairs: matches no file with any of its 2")
    assert all(p in msg for p in patterns), msg


def test_a_text_glob_matching_nothing_is_skipped_while_another_matches(tmp_path, caplog):
    _write(tmp_path / "mono/de.txt", "Hallo\n")
    with caplog.at_level("WARNING", logger="labse_common.sources"):
        got = expand_texts(["mono/{lang}.txt", "mono/{lang}.txt.gz"], tmp_path, "sources.text")
    assert got == [TextFile(str(tmp_path / "mono/de.txt"), "de")]
    assert any("mono/{lang}.txt.gz: matches no file" in r.getMessage() for r in caplog.records)
    with pytest.raises(UsageError, match=r"sources\.text: matches no file with any of its 2"):
        expand_texts(["none/*.txt", "none/*.txt.gz"], tmp_path, "sources.text")


OWN_DATA = {  # the globs of configs/own-data.yaml, per source
    "sources.commoncrawl": ["crawl/*.warc.wet.gz", "crawl/*.warc.gz"],
    "sources.wikipedia": ["dumps/*-pages-articles*.xml.bz2"],
}


@pytest.mark.parametrize(
    "files, live",
    [
        (["crawl/a.warc.wet.gz"], {"sources.commoncrawl": ["crawl/*.warc.wet.gz"]}),
        (["crawl/a.warc.gz"], {"sources.commoncrawl": ["crawl/*.warc.gz"]}),
        (
            ["dumps/dewiki-pages-articles1.xml.bz2"],
            {"sources.wikipedia": ["dumps/*-pages-articles*.xml.bz2"]},
        ),
    ],
    ids=["wet-only", "warc-only", "dump-only"],
)
def test_the_text_to_mine_runs_on_a_folder_of_one_download_shape(
    tmp_path, monkeypatch, caplog, files, live
):
    from labse_common.sources import matching_globs

    monkeypatch.chdir(tmp_path)
    for f in files:
        _write(tmp_path / f, b"x")
    with caplog.at_level("WARNING", logger="labse_common.sources"):
        got = matching_globs(OWN_DATA)
    assert got == {name: live.get(name, []) for name in OWN_DATA}
    skipped = {p for pats in OWN_DATA.values() for p in pats} - {
        p for pats in live.values() for p in pats
    }
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == len(skipped) and all(any(p in w for w in warned) for p in skipped), warned


def test_the_text_to_mine_with_no_glob_matching_is_one_error_naming_the_globs(tmp_path):
    from labse_common.sources import matching_globs

    (tmp_path / "crawl").mkdir()  # a folder is not a file
    globs = {k: [str(tmp_path / p) for p in v] for k, v in OWN_DATA.items()}
    with pytest.raises(UsageError) as e:
        matching_globs(globs)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("sources.commoncrawl and sources.wikipedia:")
    assert all(p in msg for pats in globs.values() for p in pats), msg
    # a remote glob is the job's to list: kept, and nothing is refused
    remote = {"sources.commoncrawl": ["s3://b/crawl/*.warc.wet.gz", *globs["sources.commoncrawl"]]}
    assert matching_globs(remote) == {"sources.commoncrawl": ["s3://b/crawl/*.warc.wet.gz"]}
    assert matching_globs({"sources.commoncrawl": [], "sources.wikipedia": []}) == {
        "sources.commoncrawl": [],
        "sources.wikipedia": [],
    }
