"""The Beam jobs end to end on the DirectRunner.

The expensive job runs are made once and shared: one run of each real sample and one run of the
damaged CommonCrawl inputs; each test asserts its own property on them. The damaged inputs go
through 2 worker processes, as users run the jobs; the real samples through one process
(in_memory), under half the CPU (enwiki: 7 CPU-s, not 18): what is checked on them is the
output, and the runner's part in that is tests/pipelines/test_dask_runner.py's. The provenance
tests (each sentence says where it came from, and that place really holds it) are here, not in
a module of their own, so that they read this module's runs instead of paying for their own."""

import gzip
import io
import logging
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from filters.mono.quality import QualityTrainParams
from labse_common.formats import MINED_PAIR_SCHEMA, PROVENANCE_COLUMNS
from labse_common.stats import StageCounter
from mining.corpus import read_corpus
from pipelines import commoncrawl, quality, wikipedia
from tests.support.corpus_fixtures import make_bad_cc_inputs, make_bad_wiki_inputs
from tests.support.corpus_util import assert_balanced, read_rows, read_stats, shared

IN_MEMORY = ["--direct_running_mode", "in_memory", "--direct_num_workers", "1"]
COLUMNS = {"text", "lang", "lang_score", "quality_score", "source", "doc_id", "url_or_title"}
RESIDUE = re.compile(r"\{\{|\}\}|\[\[|\]\]|^\s*\||<ref|thumb\||Category:")

# One run per real sample per process: the jobs take 10-20 s each and several tests read the
# same output without writing to it.
_REAL_RUNS: dict[str, Path] = {}


def real_sample_run(kind: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The output of the job on the real sample, in one process: ``cc`` is both CommonCrawl
    files with ``--write-dropped``, ``wiki`` the enwiki sample. Run on first use, then shared;
    callers must not write into it."""
    if kind not in _REAL_RUNS:
        out = tmp_path_factory.mktemp(f"real-{kind}") / kind
        if kind == "cc":
            argv = ["--input", str(shared("commoncrawl") / "*.gz"), "--write-dropped"]
            rc = commoncrawl.main([*argv, "--output", str(out), *IN_MEMORY])
        else:
            dump = shared("wikipedia/enwiki-sample.xml.bz2")
            rc = wikipedia.main(["--input", str(dump), "--output", str(out), *IN_MEMORY])
        assert rc == 0
        _REAL_RUNS[kind] = out
    return _REAL_RUNS[kind]


@pytest.fixture(scope="module")
def real_cc(tmp_path_factory) -> Path:
    return real_sample_run("cc", tmp_path_factory)


@pytest.fixture(scope="module")
def real_wiki(tmp_path_factory) -> Path:
    return real_sample_run("wiki", tmp_path_factory)


def _on_two_workers(main: Callable[[list[str]], int], inp: Path, out: Path, *extra: str) -> None:
    """A corpus job's ``main`` on ``inp`` (a path or glob) into ``out`` on 2 worker processes
    of the DirectRunner, as users run it; ``extra`` flags after those; it must succeed."""
    argv = ["--input", str(inp), "--output", str(out), "--direct_num_workers", "2", *extra]
    assert main(argv) == 0


@pytest.fixture(scope="module")
def bad_cc(tmp_path_factory) -> tuple[Path, dict, Path]:
    """The damaged CommonCrawl inputs (make_bad_cc_inputs) through the job on 2 worker
    processes with --write-dropped: (input folder, the files, output)."""
    tmp = tmp_path_factory.mktemp("bad-cc")
    files = make_bad_cc_inputs(tmp / "in")
    out = tmp / "one"
    _on_two_workers(commoncrawl.main, tmp / "in" / "*", out, "--write-dropped")
    return tmp / "in", files, out


@pytest.mark.slow
def test_commoncrawl_real_sample_drops_boilerplate_keeps_news(real_cc):
    out = real_cc
    stats = read_stats(out)
    assert_balanced(stats)
    assert {"files", "documents", "lines", "sentences"} <= set(stats["counts"])
    assert stats["counts"]["files"]["in"] == 2
    rows = read_rows(out)
    assert rows and COLUMNS <= set(rows[0])
    texts = {r["text"] for r in rows}
    # WARC response records went through HTML extraction and landed in several languages.
    assert len({r["lang"] for r in rows}) >= 5
    assert any(r["url_or_title"].startswith("http://01spb.ru") for r in rows)
    serbian = [r for r in rows if "013info.rs" in r["url_or_title"]]
    assert any(
        t.startswith("Večeras nešto pre 19 sati na Sodari je ubijena ženska osoba") for t in texts
    )
    assert any("Nezvanično saznajemo da se ubistvo dogodilo" in r["text"] for r in serbian)
    assert len(serbian) >= 8
    for boiler in (
        "Skip to main content",
        "Share on Facebook",
        "Toggle navigation",
        "Tweet Widget",
        "Hronika",
        "Kultura",
        "sledeća vest >",
        "17. 08. 2019.",
    ):
        assert boiler not in texts, boiler
    dropped = {r["text"]: r["reason"] for r in read_rows(out, "_dropped")}
    assert "Share on Facebook" in dropped and "Skip to main content" in dropped


@pytest.mark.slow
def test_wikipedia_real_sample_has_little_residue(real_wiki):
    out = real_wiki
    stats = read_stats(out)
    assert_balanced(stats)
    docs = stats["counts"]["documents"]
    assert docs["in"] == 206 and docs["dropped"]["redirect"] >= 90
    rows = read_rows(out)
    assert len(rows) > 10_000 and COLUMNS <= set(rows[0])
    en = [r for r in rows if r["lang"] == "en"]
    assert len(en) > 0.9 * len(rows)
    residue = [r["text"] for r in rows if RESIDUE.search(r["text"])]
    assert len(residue) / len(rows) < 0.005, residue[:5]
    assert all(10 <= len(r["text"]) <= 5000 for r in rows)
    # Exact dedup across the whole job: no normalised duplicate survives.
    from filters.mono.dedup import dedup_key

    keys = [dedup_key(r["text"]) for r in rows]
    assert len(keys) == len(set(keys))


@pytest.mark.slow
def test_commoncrawl_bad_inputs_counted_and_survived(bad_cc):
    _, files, out = bad_cc
    stats = read_stats(out)
    assert_balanced(stats)
    c = stats["counts"]
    assert c["files"]["in"] == len(files)
    assert c["files"]["dropped"] == {"truncated_archive": 1, "empty_file": 1, "not_warc": 1}
    assert c["documents"]["dropped"]["malformed_record"] == 1
    assert c["documents"]["events"]["charset_fallback"] >= 1
    texts = {r["text"] for r in read_rows(out)}
    assert (
        "Die Straße in Köln wurde für den Verkehr gesperrt, berichtete die Polizei heute früh."
        in texts
    )
    assert any("Городской совет утвердил новый бюджет" in t for t in texts)
    # The same news sentence appears in four files: dedup keeps one, counts the rest.
    assert sum(t.startswith("The city council approved") for t in texts) == 1
    assert c["sentences"]["dropped"]["duplicate"] >= 3
    assert "Skip to main content" not in texts


@pytest.mark.slow
def test_wikipedia_bad_inputs_counted_and_survived(tmp_path):
    make_bad_wiki_inputs(tmp_path / "in")
    out = tmp_path / "out"
    _on_two_workers(wikipedia.main, tmp_path / "in" / "*.bz2", out, "--page-timeout", "0.3")
    c = read_stats(out)["counts"]
    assert_balanced({"counts": c})
    assert c["file_ranges"]["dropped"] == {"truncated_archive": 1, "not_xml": 1, "empty_file": 1}
    d = c["documents"]["dropped"]
    assert d["parser_timeout"] == 1 and d["malformed_page_xml"] == 1
    assert d["redirect"] == 1 and d["other_namespace"] == 1
    texts = {r["text"] for r in read_rows(out)}
    assert "The village of Topic 4 was founded by farmers in the year 1204." in texts


@pytest.mark.slow
def test_quality_bootstrap_trains_from_job_output(real_wiki, real_cc, tmp_path):
    cc = shared("commoncrawl")
    wiki_out, cc_out, model = real_wiki, real_cc, tmp_path / "q.bin"
    common = ["--direct_running_mode", "in_memory"]
    assert (
        quality.main(
            [
                "train",
                "--positive",
                str(wiki_out),
                "--positive",
                str(cc_out),
                "--negative",
                str(cc_out),
                "--output",
                str(model),
            ]
        )
        == 0
    )
    out2 = tmp_path / "cc2"
    assert (
        commoncrawl.main(
            [
                "--input",
                str(cc / "*.gz"),
                "--output",
                str(out2),
                "--quality-model",
                str(model),
                *common,
            ]
        )
        == 0
    )
    assert_balanced(read_stats(out2))
    texts = {r["text"] for r in read_rows(out2)}
    assert "Skip to main content" not in texts and "Share on Facebook" not in texts


def test_quality_train_flags_take_their_defaults_from_the_library():
    # One place per default: the CLI's flags, unset, train exactly QualityTrainParams().
    base = ["train", "--positive", "w", "--negative", "c", "--output", "q.bin"]
    args = quality.parser().parse_args(base)
    d = QualityTrainParams()
    flags = (args.max_per_class, args.epoch, args.dim, args.word_ngrams, args.quantize, args.seed)
    assert flags == (d.max_per_class, d.epoch, d.dim, d.word_ngrams, d.quantize, d.seed)
    assert quality.parser().parse_args([*base, "--dim", "7"]).dim == 7


@pytest.mark.parametrize(
    "args, message",
    [
        (["--input", "/nonexistent/*.warc.gz"], "input not found"),
        (["--lid-model", "/nonexistent/lid.bin"], "fastText model not found"),
        (["--config", "/nonexistent.yaml"], "config file not found"),
    ],
)
def test_usage_errors_exit_nonzero_with_clear_message(tmp_path, caplog, args, message):
    # The command's main() in this process: exit status 2 and one ERROR line. That the line
    # reaches stderr of `python -m pipelines.commoncrawl` is tests/end_to_end/test_cli_errors.py's.
    base = {"--input": str(tmp_path / "x.warc.gz"), "--output": str(tmp_path / "out")}
    (tmp_path / "x.warc.gz").write_bytes(b"")
    for i in range(0, len(args), 2):
        base[args[i]] = args[i + 1]
    argv = [x for kv in base.items() for x in kv]
    caplog.clear()
    assert commoncrawl.main(argv) == 2
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and message in errors[0] and "\n" not in errors[0], errors


def test_unreadable_quality_model_and_nonempty_output(tmp_path):
    src = tmp_path / "x.warc.gz"
    src.write_bytes(b"")
    bad = tmp_path / "q.bin"
    bad.write_bytes(b"garbage")
    assert (
        commoncrawl.main(
            ["--input", str(src), "--output", str(tmp_path / "o"), "--quality-model", str(bad)]
        )
        == 2
    )
    out = tmp_path / "full"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    assert commoncrawl.main(["--input", str(src), "--output", str(out)]) == 2
    assert (out / "keep.txt").exists()


def test_help_documents_options(capsys):
    # main(["--help"]) prints what `python -m pipelines.wikipedia --help` prints (that command's
    # own process: tests/end_to_end/test_cli_contract.py).
    with pytest.raises(SystemExit) as e:
        wikipedia.main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for opt in (
        "--input",
        "--output",
        "--lid-model",
        "--quality-model",
        "--langs",
        "--index",
        "--page-timeout",
        "FlinkRunner",
        "DataflowRunner",
    ):
        assert opt in out


@pytest.mark.slow
def test_dedup_is_exact_across_hash_shards_and_optional(bad_cc, tmp_path):
    """Sharding the dedup groups changes the files, never the rows; --no-dedup keeps copies."""
    inp, _, one = bad_cc
    outs = {"one": one}
    # The sharded and the --no-dedup runs in one process: what they prove is the grouping, not
    # the runner (the "one" run is the 2-worker job of the bad-input test).
    for name, extra in (
        ("three", ["--shards-per-language", "3"]),
        ("nodup", ["--no-dedup"]),
    ):
        outs[name] = tmp_path / name
        rc = commoncrawl.main(
            [
                "--input",
                str(inp / "*"),
                "--output",
                str(outs[name]),
                "--direct_running_mode",
                "in_memory",
                *extra,
            ]
        )
        assert rc == 0
    runs = {}
    for name, out in outs.items():
        assert_balanced(read_stats(out))
        runs[name] = (read_stats(out)["counts"]["sentences"], read_rows(out))
    (s1, rows1), (s3, rows3), (sn, rowsn) = runs["one"], runs["three"], runs["nodup"]
    as_set = lambda rows: sorted((r["lang"], r["text"], r["dup_count"], r["doc_id"]) for r in rows)  # noqa: E731
    assert as_set(rows1) == as_set(rows3)
    assert len(list(outs["three"].glob("en/part-*.parquet"))) > 1
    assert s1 == s3
    # Every kept copy is either a survivor or counted under "duplicate".
    assert sum(r["dup_count"] for r in rows1) == len(rowsn) == sn["out"]
    assert s1["dropped"]["duplicate"] == len(rowsn) - len(rows1) > 0
    assert "duplicate" not in sn["dropped"] and {r["dup_count"] for r in rowsn} == {1}
    assert sum(r["text"].startswith("The city council approved") for r in rowsn) >= 4
    # --write-dropped also lists the collapsed copies, none of them the kept representative.
    dup_rows = [r for r in read_rows(one, "_dropped") if r["reason"] == "duplicate"]
    assert len(dup_rows) == s1["dropped"]["duplicate"]
    kept = {(r["text"], r["doc_id"]) for r in rows1}
    assert not kept & {(r["text"], r["doc_id"]) for r in dup_rows}


# -- provenance: the WARC record at the locator's offset has the sentence's record id; a
# Wikipedia sentence names its dump, page id and title. The columns travel into the mining
# corpus (and from there, per side, into the pairs).


def _record_id_at(data: bytes, offset: int) -> str:
    rec = next(iter(ArchiveIterator(io.BytesIO(data[offset:]), check_digests=False)))
    return rec.rec_headers.get_header("WARC-Record-ID").strip("<>")


@pytest.mark.slow
def test_warc_locator_points_at_the_record(real_cc):
    cc = shared("commoncrawl")
    warc = cc / "cc-main-2020-34-sample.warc.gz"
    # The job's run on both real files (this WARC and a WET file, whose sentences are checked
    # in the loop's other branch only for naming their file).
    out = real_cc
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


@pytest.mark.slow
def test_wikipedia_sentences_name_dump_page_and_title(real_wiki):
    wiki = shared("wikipedia") / "enwiki-sample.xml.bz2"
    out = real_wiki
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
