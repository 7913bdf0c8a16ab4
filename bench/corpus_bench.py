"""Benchmark: the corpus pipelines against wikiextractor (Wikipedia) and datatrove (CommonCrawl).

    python bench/corpus_bench.py [--only wiki|cc] [--repeat 10] [--cc-repeat 200] [--json out.json]

Wikipedia. The sample dump (../shared/data/wikipedia) is replicated ``--repeat`` times under new
titles and page ids and written as a multistream .bz2 (100 pages per stream, like real dumps).
Ours: the whole Beam job (``python -m pipelines.wikipedia``, DirectRunner in_memory, one worker,
plus its wikitext parse helper). Peer: ``wikiextractor --no-templates --processes 1`` (a reader,
one extract process and one output process). Pages = articles (namespace 0, not redirects) for
both. Speed is reported as pages per wall second and pages per CPU second (user+sys of the whole
process tree): on a shared machine the CPU figure is the honest "per core" number. Residue: the
fraction of output sentences (ours; wikiextractor's lines are also split with our splitter) and
lines (wikiextractor) that contain wiki markup. The peer is also run doing the same work as our
whole job: wikiextractor's output through the same ``SentenceCleaner``, an in-memory dedup dict
and Parquet per language, in one plain Python process (its CPU added to wikiextractor's).

CommonCrawl. A WET file is built with warcio from the sample WET records plus the text that
resiliparse extracts from the sample WARC's HTML, replicated ``--cc-repeat`` times with distinct
URLs and record ids. MB = UTF-8 bytes of WET text. Ours (library path, one process):
``iter_warc_documents`` + ``SentenceCleaner.clean`` per document, i.e. exactly what the Beam DoFn
runs; the whole Beam job is timed too, for the record. Peer: a one-process datatrove pipeline
with the same steps: ``WarcReader`` -> lines -> sentences (datatrove's regex splitter
``WhitespaceTokenizer``: its NLTK/spaCy splitters need downloaded data or packages not installed)
-> length 10..5000 (``LambdaFilter``) -> ``LanguageFilter`` (our packaged lid.176.ftz set on
its ``FT176LID``; no download) -> ``C4QualityFilter`` per sentence. Residue: on the
Serbian news page, the fraction of kept sentences that are not part of the article body, and the
fraction of the article body's characters kept.

Every system runs in its own subprocess, one after the other; ratios are ours/peer.
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import io
import json
import logging
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from labse_common.logs import setup_logging  # noqa: E402

log = logging.getLogger("corpus_bench")
ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
WIKI_SAMPLE = DATA / "wikipedia" / "enwiki-sample.xml.bz2"
WET_SAMPLE = DATA / "commoncrawl" / "cc-main-2019-35-sample.warc.wet.gz"
WARC_SAMPLE = DATA / "commoncrawl" / "cc-main-2020-34-sample.warc.gz"
PY = sys.executable

# Wiki markup that should never reach a sentence corpus.
MARKUP = {
    "{{": re.compile(r"\{\{"),
    "}}": re.compile(r"\}\}"),
    "[[": re.compile(r"\[\["),
    "]]": re.compile(r"\]\]"),
    "table_row": re.compile(r"^\s*(\{\||\|)"),
    "<ref": re.compile(r"<ref", re.I),
    "thumb|": re.compile(r"thumb\|"),
    "Category:": re.compile(r"Category:"),
}
SERBIAN_URL = "http://013info.rs/vesti/hronika/pancevo-ubistvo-na-sodari"
# The article body of the Serbian page, hand-labelled: every other line is navigation, share
# buttons, dates or the related-news list.
SERBIAN_BODY_PREFIXES = ("Večeras nešto pre 19 sati", "Nezvanično saznajemo", "Po onome što smo")


# ---------------------------------------------------------------------------------------------
# Measuring


def run_timed(cmd: list[str], env: dict | None = None) -> dict:
    """Run a command to completion; wall seconds and CPU seconds of its whole process tree."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[:4]}... exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu, "stdout": proc.stdout}


def residue(texts: list[str]) -> dict:
    """Fraction of texts containing any markup, and per marker."""
    n = len(texts)
    per = {k: sum(1 for t in texts if rx.search(t)) for k, rx in MARKUP.items()}
    anyn = sum(1 for t in texts if any(rx.search(t) for rx in MARKUP.values()))
    return {"n": n, "hits": anyn, "any": anyn / n if n else 0.0, "per_marker_hits": per}


# ---------------------------------------------------------------------------------------------
# Wikipedia


def _renamed_page(page: str, k: int) -> str:
    """Copy k of a page: new title and page id (the first <id> of a page is the page's)."""
    page = re.sub(r"<title>(.*?)</title>", rf"<title>\1 (copy {k})</title>", page, count=1)
    shift = k * 100_000_000
    return re.sub(r"<id>(\d+)</id>", lambda m: f"<id>{int(m.group(1)) + shift}</id>", page, count=1)


def build_wiki_dump(dst: Path, repeat: int) -> dict:
    """Sample pages repeated under new titles/ids, as a multistream bz2 of 100 pages a stream."""
    xml = bz2.decompress(WIKI_SAMPLE.read_bytes()).decode("utf-8")
    first = xml.index("<page>")
    last = xml.rindex("</page>") + len("</page>")
    header, footer = xml[:first], xml[last:]
    pages = re.findall(r"<page>.*?</page>", xml[first:last], flags=re.S)
    articles = sum(1 for p in pages if "<ns>0</ns>" in p and "<redirect" not in p)
    if not dst.exists():
        tmp = dst.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.write(bz2.compress(header.encode("utf-8")))
            batch: list[str] = []
            for k in range(repeat):
                for p in pages:
                    if k:
                        p = _renamed_page(p, k)
                    batch.append("  " + p + "\n")
                    if len(batch) == 100:
                        f.write(bz2.compress("".join(batch).encode("utf-8")))
                        batch = []
            if batch:
                f.write(bz2.compress("".join(batch).encode("utf-8")))
            f.write(bz2.compress(footer.encode("utf-8")))
        tmp.rename(dst)
    return {
        "pages": len(pages) * repeat,
        "articles": articles * repeat,
        "bytes_bz2": dst.stat().st_size,
    }


def read_parquet_texts(out: Path) -> list[str]:
    import pyarrow.parquet as pq

    texts: list[str] = []
    for f in sorted(out.glob("*/*.parquet")):
        if f.parent.name.startswith("_"):
            continue
        texts.extend(pq.read_table(f, columns=["text"]).column("text").to_pylist())
    return texts


def read_wikiextractor(out: Path) -> tuple[int, list[str]]:
    docs, lines = 0, []
    for f in sorted(out.rglob("wiki_*")):
        for ln in f.read_text("utf-8").splitlines():
            if ln.startswith("<doc "):
                docs += 1
            elif ln.strip() and ln != "</doc>":
                lines.append(ln)
    return docs, lines


def bench_wiki(work: Path, repeat: int, workers: int) -> dict:
    from filters.mono.splitter import split_sentences

    dump = work / f"enwiki-x{repeat}-multistream.xml.bz2"
    info = build_wiki_dump(dump, repeat)
    log.info("wiki dump %s: %d pages, %d articles", dump, info["pages"], info["articles"])

    res: dict = {"input": {**info, "path": str(dump)}}
    out = work / "wiki_ours"
    ours = run_timed(
        [
            PY,
            "-m",
            "pipelines.wikipedia",
            "--input",
            str(dump),
            "--output",
            str(out),
            "--overwrite",
            "--direct_running_mode",
            "in_memory",
            "--direct_num_workers",
            "1",
            "--log-level",
            "WARNING",
        ]
    )
    stats = json.loads((out / "stats.json").read_text())
    n_ours = stats["counts"]["documents"]["out"] + sum(
        v
        for k, v in stats["counts"]["documents"]["dropped"].items()
        if k not in ("other_namespace", "redirect")
    )
    sents = read_parquet_texts(out)
    res["ours"] = {
        "system": "pipelines.wikipedia (Beam in_memory, 1 worker + parse helper)",
        "processes": 2,
        "articles": n_ours,
        "wall_s": ours["wall_s"],
        "cpu_s": ours["cpu_s"],
        "output_sentences": len(sents),
        "residue_sentences": residue(sents),
    }

    ext = run_timed(
        [
            PY,
            str(Path(__file__).resolve()),
            "--worker",
            "ours_wiki_extract",
            str(dump),
            str(work / "wiki_extract.json"),
        ]
    )
    n_ext = json.loads((work / "wiki_extract.json").read_text())["articles"]
    res["ours_extract"] = {
        "system": "ours, extraction only (read + wikitext -> text)",
        "processes": 1,
        "articles": n_ext,
        "wall_s": ext["wall_s"],
        "cpu_s": ext["cpu_s"],
    }

    if workers > 1:
        out_mp = work / "wiki_ours_mp"
        mp = run_timed(
            [
                PY,
                "-m",
                "pipelines.wikipedia",
                "--input",
                str(dump),
                "--output",
                str(out_mp),
                "--overwrite",
                "--direct_running_mode",
                "multi_processing",
                "--direct_num_workers",
                str(workers),
                "--log-level",
                "WARNING",
            ]
        )
        res["ours_multi"] = {
            "system": f"pipelines.wikipedia (multi_processing, {workers} workers)",
            "processes": workers,
            "wall_s": mp["wall_s"],
            "cpu_s": mp["cpu_s"],
        }

    wout = work / "wiki_wikiextractor"
    if wout.exists():
        import shutil

        shutil.rmtree(wout)
    peer = run_timed(
        [
            PY,
            "-m",
            "wikiextractor.WikiExtractor",
            str(dump),
            "-o",
            str(wout),
            "--no-templates",
            "--processes",
            "1",
            "-q",
        ]
    )
    n_peer, lines = read_wikiextractor(wout)
    peer_sents = [s for ln in lines for s in split_sentences(ln)]
    res["peer"] = {
        "system": "wikiextractor 3.1.0 --no-templates --processes 1",
        "processes": 3,
        "articles": n_peer,
        "wall_s": peer["wall_s"],
        "cpu_s": peer["cpu_s"],
        "output_lines": len(lines),
        "residue_lines": residue(lines),
        "residue_sentences": residue(peer_sents),
    }
    filt_out = work / "wiki_wikiextractor_filtered"
    filt = run_timed(
        [
            PY,
            str(Path(__file__).resolve()),
            "--worker",
            "wikiextractor_filters",
            str(wout),
            str(filt_out),
        ]
    )
    filt_sents = read_parquet_texts(filt_out)
    filt_counts = json.loads((filt_out / "counts.json").read_text())
    sc = stats["counts"]["sentences"]
    res["ours"]["kept_sentences_before_dedup"] = sc["out"] + sc["dropped"].get("duplicate", 0)
    res["peer_same_work"] = {
        "system": "wikiextractor + the same filters, dedup and Parquet (plain Python loop)",
        "processes": 3,
        "articles": n_peer,
        "wall_s": peer["wall_s"] + filt["wall_s"],
        "cpu_s": peer["cpu_s"] + filt["cpu_s"],
        "output_sentences": len(filt_sents),
        "residue_sentences": residue(filt_sents),
        "kept_sentences_before_dedup": filt_counts.get("sentences/out", 0),
    }
    for side in ("ours", "ours_extract", "peer", "peer_same_work"):
        r = res[side]
        r["pages_per_s"] = r["articles"] / r["wall_s"]
        r["pages_per_s_per_process"] = r["pages_per_s"] / r["processes"]
        r["pages_per_cpu_s"] = r["articles"] / r["cpu_s"]
    res["ratio"] = {
        "pages_per_cpu_s": res["ours"]["pages_per_cpu_s"] / res["peer"]["pages_per_cpu_s"],
        "pages_per_s_per_process": res["ours"]["pages_per_s_per_process"]
        / res["peer"]["pages_per_s_per_process"],
        "pages_per_s": res["ours"]["pages_per_s"] / res["peer"]["pages_per_s"],
        "extraction_pages_per_cpu_s": res["ours_extract"]["pages_per_cpu_s"]
        / res["peer"]["pages_per_cpu_s"],
        "same_work_pages_per_cpu_s": res["ours"]["pages_per_cpu_s"]
        / res["peer_same_work"]["pages_per_cpu_s"],
        # Useful output per CPU second: the extractors leave different amounts of text per page.
        "same_work_kept_sentences_per_cpu_s": (
            res["ours"]["kept_sentences_before_dedup"] / res["ours"]["cpu_s"]
        )
        / (res["peer_same_work"]["kept_sentences_before_dedup"] / res["peer_same_work"]["cpu_s"]),
        "residue_sentences": _safe_ratio(
            res["ours"]["residue_sentences"]["any"], res["peer"]["residue_sentences"]["any"]
        ),
    }
    return res


def _safe_ratio(a: float, b: float) -> float | None:
    return a / b if b else None


# ---------------------------------------------------------------------------------------------
# CommonCrawl


def build_wet(dst: Path, repeat: int) -> dict:
    """WET of the sample WET records + resiliparse text of the sample WARC, replicated."""
    from warcio.warcwriter import WARCWriter

    from labse_common.stats import StageCounter
    from pipelines.readers.warc import iter_warc_documents

    # The sample WET has a wrong Content-Length (warcio alone stops there); our reader repairs it.
    base: list[tuple[str, bytes]] = []
    logging.getLogger("pipelines.readers.warc").setLevel(logging.ERROR)
    for sample in (WET_SAMPLE, WARC_SAMPLE):
        with open(sample, "rb") as f:
            for doc in iter_warc_documents(f, str(sample), StageCounter()):
                base.append((doc.url_or_title, doc.text.encode("utf-8")))
    text_bytes = sum(len(b) for _, b in base) * repeat
    if not dst.exists():
        tmp = dst.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            writer = WARCWriter(f, gzip=True)
            for k in range(repeat):
                for url, payload in base:
                    u = url if k == 0 else f"{url}{'&' if '?' in url else '?'}copy={k}"
                    # Without a payload type datatrove's reader asks libmagic, which calls
                    # the Serbian page "application/vnd.hp-HPGL" and drops it: state it.
                    headers = {
                        "WARC-Date": "2019-08-17T20:32:22Z",
                        "WARC-Identified-Payload-Type": "text/plain",
                    }
                    rec = writer.create_warc_record(
                        u, "conversion", payload=io.BytesIO(payload), warc_headers_dict=headers
                    )
                    rec.rec_headers.replace_header("Content-Type", "text/plain")
                    writer.write_record(rec)
        tmp.rename(dst)
    return {
        "documents": len(base) * repeat,
        "text_bytes": text_bytes,
        "bytes_gz": dst.stat().st_size,
    }


def serbian_residue(kept: list[tuple[str, str]]) -> dict:
    """Residue/recall on the first copy of the Serbian page. kept: (url, sentence).

    Each kept sentence is traced to the page line it came from: the article body (hand-labelled),
    a related-news headline (the line after a ``dd. mm. yyyy.`` date line: real sentences, but
    not this page's content), or navigation (menus, share buttons, dates, footer: the rest).
    """
    raw = gzip.decompress(WET_SAMPLE.read_bytes()).decode("utf-8")
    lines = [ln.strip() for ln in raw.splitlines() if ln.strip()]  # other record: no such dates
    body = [ln for ln in lines if ln.startswith(SERBIAN_BODY_PREFIXES)]
    headlines = [ln for prev, ln in zip(lines, lines[1:]) if _SR_DATE.match(prev)]
    sents = [s.strip() for u, s in kept if u == SERBIAN_URL and s.strip()]
    kinds = {"body": 0, "headline": 0, "navigation": 0}
    examples = []
    for s in sents:
        kind = (
            "body"
            if any(s in b for b in body)
            else "headline"
            if any(s in h for h in headlines)
            else "navigation"
        )
        kinds[kind] += 1
        if kind != "body":
            examples.append(s)
    n = len(sents)
    body_chars = sum(len(b) for b in body)
    kept_chars = sum(len(s) for s in sents if any(s in b for b in body))
    return {
        "kept_sentences": n,
        "by_origin": kinds,
        "residue": (n - kinds["body"]) / n if n else 0.0,
        "navigation_residue": kinds["navigation"] / n if n else 0.0,
        "body_chars_kept": min(1.0, kept_chars / body_chars) if body_chars else 0.0,
        "boilerplate_examples": examples[:8],
    }


_SR_DATE = re.compile(r"^\d{1,2}\. \d{2}\. \d{4}\.$")


def worker_ours_cc(wet: str, dump: str) -> dict:
    """Library path, one process: reader + SentenceCleaner, as the Beam DoFn runs them."""
    from filters.mono.cleaner import CleanerConfig, SentenceCleaner
    from labse_common.stats import StageCounter
    from pipelines.readers.warc import iter_warc_documents

    t0 = time.perf_counter()
    cleaner = SentenceCleaner(CleanerConfig())
    counter = StageCounter()
    kept: list[tuple[str, str]] = []
    with open(wet, "rb") as f:
        for doc in iter_warc_documents(f, wet, counter):
            for row in cleaner.clean(doc, counter).kept:
                kept.append((row["url_or_title"], row["text"]))
    wall = time.perf_counter() - t0
    Path(dump).write_text(json.dumps(kept, ensure_ascii=False))
    return {"wall_s_inproc": wall, "kept": len(kept), "counts": counter.counts}


def worker_ours_wiki_extract(dump: str, out: str) -> dict:
    """Extraction only, one process: read the dump and turn each article's wikitext into text
    (the work wikiextractor does; no splitting, LID, quality, dedup or Parquet)."""
    from filters.mono.wikitext import wikitext_to_text
    from labse_common.stats import StageCounter
    from pipelines.readers.wikidump import iter_range_pages, plan_ranges

    counter = StageCounter()
    n = chars = 0
    with open(dump, "rb") as raw:
        ranges = plan_ranges(dump, raw, None, 50)
    for rng in ranges:
        with open(dump, "rb") as raw:
            for page in iter_range_pages(raw, rng, counter):
                if page.ns == 0 and not page.redirect:
                    chars += len(wikitext_to_text(page.text))
                    n += 1
    Path(out).write_text(json.dumps({"articles": n, "chars": chars}))
    return {"articles": n, "chars": chars}


def worker_datatrove_cc(wet: str, dump: str) -> dict:
    """The equivalent datatrove pipeline in one process (LocalPipelineExecutor, 1 task)."""
    from datatrove.data import Document
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.base import PipelineStep
    from datatrove.pipeline.filters import C4QualityFilter, LambdaFilter, LanguageFilter
    from datatrove.pipeline.readers import WarcReader
    from datatrove.utils.lid import FT176LID
    from datatrove.utils.word_tokenizers import WhitespaceTokenizer
    from fasttext.FastText import _FastText

    from filters.langid import default_lid_model_path

    class SplitSentences(PipelineStep):
        """One document -> one document per sentence of each non-empty line."""

        name = "sentence split"

        def __init__(self) -> None:
            super().__init__()
            self.tok = WhitespaceTokenizer()

        def run(self, data, rank: int = 0, world_size: int = 1):
            for doc in data:
                for i, line in enumerate(doc.text.splitlines()):
                    line = line.strip()
                    if not line:
                        continue
                    # The regex keeps a trailing piece without terminal punctuation out; add it.
                    sents = self.tok.sent_tokenize(line + "\n")
                    for j, s in enumerate(sents):
                        self.stat_update("sentences")
                        yield Document(
                            text=s,
                            id=f"{doc.id}/{i}/{j}",
                            metadata={"url": doc.metadata.get("url")},
                        )

    class Collect(PipelineStep):
        """Writes the kept sentences to ``dump`` (the executor runs a deep copy of the steps)."""

        name = "collect"

        def run(self, data, rank: int = 0, world_size: int = 1):
            kept = []
            for doc in data:
                kept.append((doc.metadata.get("url"), doc.text))
                yield doc
            Path(dump).write_text(json.dumps(kept, ensure_ascii=False))

    class LocalFT176(FT176LID):
        """datatrove's lid.176 wrapper, loading the local lid.176.ftz instead of downloading."""

        @property
        def model(self):
            if self._model is None:
                self._model = _FastText(default_lid_model_path())
            return self._model

    t0 = time.perf_counter()
    lid = LanguageFilter(language_threshold=0.5)
    lid.model = LocalFT176(None)  # no download: the executor deep-copies steps, so load lazily
    wet_path = Path(wet)
    pipeline = [
        WarcReader(str(wet_path.parent), glob_pattern=wet_path.name),
        SplitSentences(),
        LambdaFilter(lambda d: 10 <= len(d.text) <= 5000),
        lid,
        C4QualityFilter(split_paragraph=True, min_num_sentences=-1),
    ]
    # C4 rewrites a document to its kept lines; with min_num_sentences=-1 a sentence whose only
    # line it dropped stays as an empty document: drop those, as ours drops them.
    pipeline.append(LambdaFilter(lambda d: bool(d.text.strip())))
    pipeline.append(Collect())
    logdir = wet_path.parent / "datatrove_logs"
    LocalPipelineExecutor(
        pipeline=pipeline, tasks=1, workers=1, logging_dir=str(logdir), skip_completed=False
    ).run()
    wall = time.perf_counter() - t0
    return {"wall_s_inproc": wall}


def bench_cc(work: Path, repeat: int, beam: bool) -> dict:
    wet_dir = work / "wet"
    wet_dir.mkdir(exist_ok=True)
    wet = wet_dir / f"cc-x{repeat}.warc.wet.gz"
    info = build_wet(wet, repeat)
    mb = info["text_bytes"] / 1e6
    log.info("WET %s: %d documents, %.1f MB text", wet, info["documents"], mb)
    res: dict = {"input": {**info, "path": str(wet)}}
    for side, fn, name in (
        ("ours", "ours_cc", "filters.mono.cleaner.SentenceCleaner + readers.warc (1 process)"),
        ("peer", "datatrove_cc", "datatrove 0.10.1 WarcReader+split+length+LanguageFilter+C4"),
    ):
        dump = work / f"cc_{side}_kept.json"
        r = run_timed([PY, str(Path(__file__).resolve()), "--worker", fn, str(wet), str(dump)])
        inner = json.loads(r["stdout"].strip().splitlines()[-1])
        kept = [tuple(x) for x in json.loads(dump.read_text())]
        res[side] = {
            "system": name,
            "processes": 1,
            "wall_s": r["wall_s"],
            "cpu_s": r["cpu_s"],
            "wall_s_inproc": inner["wall_s_inproc"],
            "kept_sentences": len(kept),
            "MB_per_s": mb / r["wall_s"],
            "MB_per_cpu_s": mb / r["cpu_s"],
            "serbian": serbian_residue(kept),
        }
    if beam:
        out = work / "cc_beam"
        r = run_timed(
            [
                PY,
                "-m",
                "pipelines.commoncrawl",
                "--input",
                str(wet),
                "--output",
                str(out),
                "--overwrite",
                "--direct_running_mode",
                "in_memory",
                "--direct_num_workers",
                "1",
                "--log-level",
                "WARNING",
            ]
        )
        res["ours_beam"] = {
            "system": "pipelines.commoncrawl (Beam in_memory, 1 worker)",
            "processes": 1,
            "wall_s": r["wall_s"],
            "cpu_s": r["cpu_s"],
            "MB_per_s": mb / r["wall_s"],
            "MB_per_cpu_s": mb / r["cpu_s"],
        }
    res["ratio"] = {
        "MB_per_cpu_s": res["ours"]["MB_per_cpu_s"] / res["peer"]["MB_per_cpu_s"],
        "MB_per_s": res["ours"]["MB_per_s"] / res["peer"]["MB_per_s"],
        "serbian_residue": _safe_ratio(
            res["ours"]["serbian"]["residue"], res["peer"]["serbian"]["residue"]
        ),
    }
    if beam:
        res["ratio"]["beam_MB_per_cpu_s"] = (
            res["ours_beam"]["MB_per_cpu_s"] / res["peer"]["MB_per_cpu_s"]
        )
    return res


# ---------------------------------------------------------------------------------------------
# Report


def worker_wikiextractor_filters(wout: str, out: str) -> dict:
    """The rest of our job done the plain way on wikiextractor's output, one process: each
    extracted article through ``SentenceCleaner.clean`` (split, length, LID, quality), exact
    dedup with an in-memory dict on ``dedup_key``, Parquet per language. Added to
    wikiextractor's own CPU it is the peer doing the same work as our whole job."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from filters.mono.cleaner import CleanerConfig, Document, SentenceCleaner
    from filters.mono.dedup import dedup_key
    from labse_common.stats import StageCounter

    cleaner = SentenceCleaner(CleanerConfig())
    counter = StageCounter()
    seen: dict[str, dict] = {}
    docs = 0
    for f in sorted(Path(wout).rglob("wiki_*")):
        title, body = "", []
        for ln in f.read_text("utf-8").splitlines():
            if ln.startswith("<doc "):
                title, body = ln, []
            elif ln == "</doc>":
                docs += 1
                doc = Document("\n".join(body[1:]), "wikipedia", str(docs), title)
                for row in cleaner.clean(doc, counter).kept:
                    seen.setdefault(dedup_key(row["text"]), row)
            else:
                body.append(ln)
    by_lang: dict[str, list[dict]] = {}
    for row in seen.values():
        by_lang.setdefault(row["lang"], []).append(row)
    for lang, rows in by_lang.items():
        rows.sort(key=lambda r: r["text"])
        Path(out, lang).mkdir(parents=True, exist_ok=True)
        pq.write_table(
            pa.Table.from_pylist(rows), str(Path(out, lang, "part-0.parquet")), compression="zstd"
        )
    Path(out, "counts.json").write_text(json.dumps(counter.drain()))
    return {"articles": docs, "kept": len(seen)}


def _wiki_row(r: dict) -> tuple:
    return (
        r["system"],
        r["processes"],
        r["articles"],
        f"{r['wall_s']:.1f}",
        f"{r['cpu_s']:.1f}",
        f"{r['pages_per_s']:.1f}",
        f"{r['pages_per_s_per_process']:.1f}",
        f"{r['pages_per_cpu_s']:.1f}",
        f"{r['residue_sentences']['hits']}/{r['residue_sentences']['n']}",
    )


def print_tables(results: dict) -> None:
    if "wiki" in results:
        w = results["wiki"]
        print(
            f"\nWikipedia: {w['input']['articles']} articles "
            f"({w['input']['pages']} pages, {w['input']['bytes_bz2'] / 1e6:.1f} MB bz2)"
        )
        rows = [
            (
                "system",
                "procs",
                "articles",
                "wall s",
                "CPU s",
                "pages/s",
                "pages/s/proc",
                "pages/CPU-s",
                "markup sents",
            )
        ]
        rows += [_wiki_row(w[side]) for side in ("ours", "peer")]
        ra = w["ratio"]
        rows.append(
            (
                "ratio ours/peer",
                "",
                "",
                "",
                "",
                f"{ra['pages_per_s']:.2f}",
                f"{ra['pages_per_s_per_process']:.2f}",
                f"{ra['pages_per_cpu_s']:.2f}",
                "n/a"
                if ra["residue_sentences"] is None
                else f"{ra['residue_sentences']:.3f} (fraction)",
            )
        )
        r = w["peer_same_work"]
        rows.append(_wiki_row(r))
        rows.append(
            (
                "ratio ours/peer with the same filters",
                "",
                "",
                "",
                "",
                "",
                "",
                f"{ra['same_work_pages_per_cpu_s']:.2f}",
                "",
            )
        )
        _table(rows)
        print(
            f"kept sentences before dedup: ours {w['ours']['kept_sentences_before_dedup']}, "
            f"peer + same filters {r['kept_sentences_before_dedup']}; kept sentences per "
            f"CPU-s, ours/peer with the same filters: "
            f"{ra['same_work_kept_sentences_per_cpu_s']:.2f}"
        )
        e = w["ours_extract"]
        print(
            f"{e['system']}: {e['articles']} articles, CPU {e['cpu_s']:.1f} s, "
            f"{e['pages_per_cpu_s']:.1f} pages/CPU-s; ratio to the peer "
            f"{ra['extraction_pages_per_cpu_s']:.2f}"
        )
        pl = w["peer"]["residue_lines"]
        print(
            f"residue = output sentences with wiki markup; wikiextractor per line: "
            f"{pl['hits']}/{pl['n']} = {pl['any']:.2e}. Per marker, ours / peer sentences:"
        )
        for k in MARKUP:
            print(
                f"  {k:10s} {w['ours']['residue_sentences']['per_marker_hits'][k]:6d} / "
                f"{w['peer']['residue_sentences']['per_marker_hits'][k]:6d}"
            )
        if "ours_multi" in w:
            m = w["ours_multi"]
            print(
                f"{m['system']}: wall {m['wall_s']:.1f} s, CPU {m['cpu_s']:.1f} s, "
                f"{w['input']['articles'] / m['wall_s']:.1f} pages/s"
            )
    if "cc" in results:
        c = results["cc"]
        print(
            f"\nCommonCrawl: {c['input']['documents']} WET documents, "
            f"{c['input']['text_bytes'] / 1e6:.1f} MB text"
        )
        rows = [
            (
                "system",
                "procs",
                "wall s",
                "CPU s",
                "MB/s",
                "MB/CPU-s",
                "kept sent",
                "sr body/headline/nav",
                "sr residue",
                "sr nav residue",
                "sr body kept",
            )
        ]
        for side in ("ours", "peer", "ours_beam"):
            if side not in c:
                continue
            r = c[side]
            sr = r.get("serbian")
            rows.append(
                (
                    r["system"],
                    r["processes"],
                    f"{r['wall_s']:.1f}",
                    f"{r['cpu_s']:.1f}",
                    f"{r['MB_per_s']:.2f}",
                    f"{r['MB_per_cpu_s']:.2f}",
                    r.get("kept_sentences", ""),
                    "/".join(str(v) for v in sr["by_origin"].values()) if sr else "",
                    f"{sr['residue']:.3f}" if sr else "",
                    f"{sr['navigation_residue']:.3f}" if sr else "",
                    f"{sr['body_chars_kept']:.3f}" if sr else "",
                )
            )
        ra = c["ratio"]
        rows.append(
            (
                "ratio ours/peer (library)",
                "",
                "",
                "",
                f"{ra['MB_per_s']:.2f}",
                f"{ra['MB_per_cpu_s']:.2f}",
                "",
                "",
                "n/a" if ra["serbian_residue"] is None else f"{ra['serbian_residue']:.3f}",
                "",
                "",
            )
        )
        if "beam_MB_per_cpu_s" in ra:
            rows.append(
                (
                    "ratio ours Beam job/peer",
                    "",
                    "",
                    "",
                    "",
                    f"{ra['beam_MB_per_cpu_s']:.2f}",
                    "",
                    "",
                    "",
                    "",
                    "",
                )
            )
        _table(rows)
        for side in ("ours", "peer"):
            ex = c[side]["serbian"]["boilerplate_examples"]
            print(f"{side} boilerplate kept on the Serbian page: {ex}")


def _table(rows: list[tuple]) -> None:
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for n, r in enumerate(rows):
        print(
            "  ".join(
                str(v).ljust(w) if i == 0 else str(v).rjust(w)
                for i, (v, w) in enumerate(zip(r, widths))
            )
        )
        if n == 0:
            print("  ".join("-" * w for w in widths))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 2)[2],
    )
    p.add_argument("--only", choices=("wiki", "cc"), help="run one benchmark (default: both)")
    p.add_argument(
        "--repeat",
        type=int,
        default=10,
        help="copies of the sample Wikipedia dump's pages (106 articles each)",
    )
    p.add_argument(
        "--cc-repeat",
        type=int,
        default=200,
        help="copies of the 18 sample CommonCrawl documents in the benchmark WET",
    )
    p.add_argument(
        "--wiki-workers",
        type=int,
        default=1,
        help="also run our Wikipedia job in multi_processing with N workers (N>1)",
    )
    p.add_argument(
        "--no-beam",
        action="store_true",
        help="skip timing the whole CommonCrawl Beam job (library path only)",
    )
    p.add_argument(
        "--workdir",
        default="/tmp/corpus_bench",
        metavar="DIR",
        help="where generated inputs (reused across runs) and outputs go",
    )
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    p.add_argument("--worker", nargs=3, metavar=("FN", "WET", "DUMP"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.worker:
        fn, wet, dump = args.worker
        logging.disable(logging.WARNING)
        out = {
            "ours_cc": worker_ours_cc,
            "datatrove_cc": worker_datatrove_cc,
            "ours_wiki_extract": worker_ours_wiki_extract,
            "wikiextractor_filters": worker_wikiextractor_filters,
        }[fn](wet, dump)
        print(json.dumps(out))
        return 0

    setup_logging("INFO")
    if args.repeat < 1 or args.cc_repeat < 1:
        p.error("--repeat and --cc-repeat must be >= 1")
    for f in (WIKI_SAMPLE, WET_SAMPLE, WARC_SAMPLE):
        if not f.is_file():
            p.error(f"sample data not found: {f} (the benchmark reads ../shared/data)")
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    results: dict = {"cpu_count": os.cpu_count()}
    if args.only in (None, "wiki"):
        results["wiki"] = bench_wiki(work, args.repeat, args.wiki_workers)
    if args.only in (None, "cc"):
        results["cc"] = bench_cc(work, args.cc_repeat, not args.no_beam)
    print_tables(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
        log.info("results written to %s", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
