"""Scale ladder of the corpus jobs: cost per MB and peak memory from 1x to 100x input.

    .venv/bin/python bench/scale_corpus.py [--stages commoncrawl wikipedia] [--sizes 1 10 100]
        [--cc-base-mb 10] [--wiki-base-mb 5] [--workdir bench_out/scale_corpus] [--seed 0]
        [-- BEAM/JOB FLAGS...]

Inputs of DISTINCT content at every size (repeated text would be removed by dedup and measure
nothing): each generated sentence joins the first half of one real sentence with the second half
of another of the same language (UD, PUD and Tatoeba text from ../shared/data, 14+ languages), so
the number of possible sentences per language is the square of its pool (millions) and LID still
sees one language. CommonCrawl: WET files of text records (``--cc-base-mb`` of decompressed text
at 1x). Wikipedia: one multistream ``pages-articles`` dump (100 pages per bz2 stream, as the real
dumps; ``--wiki-base-mb`` of bz2 at 1x) with the templates, refs, tables and links of real pages.

Each job runs as its own child process (``python -m pipelines.<stage>``); its peak memory is the
peak of the sum of RSS over its process tree (sampled every 0.2 s; at least the largest process's
kernel high-water mark, read when it exits). Printed per stage and size:
input MB, seconds, seconds per MB, sentences out, microseconds per sentence out, peak RSS (the
tree's sum, and the largest single process: a worker or the driver), disk written, and the
ratio of each per-unit cost and of both peaks to the 1x run. The goal: per-unit ratios within
1.2 and peak memory flat. Generated inputs are kept in the workdir and reused.
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import io
import json
import logging
import os
import random
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from xml.sax.saxutils import escape

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

log = logging.getLogger("scale_corpus")
DATA = REPO.parent / "shared" / "data"
MB = 1 << 20


# --- distinct-content text ------------------------------------------------------------------


def load_pools(data: Path) -> dict[str, list[str]]:
    """Real sentences per language (ISO 639-3) from ud/, pud/ and tatoeba/."""
    pools: dict[str, list[str]] = {}
    for f in sorted((data / "ud").glob("*.txt")):
        pools.setdefault(f.stem, []).extend(f.read_text(encoding="utf-8").splitlines())
    for sub in ("pud", "tatoeba"):
        for f in sorted((data / sub).glob("*.*-eng.*")):
            lang = f.suffix[1:]
            pools.setdefault(lang, []).extend(f.read_text(encoding="utf-8").splitlines())
    pools = {k: sorted({s.strip() for s in v if len(s.strip()) >= 20}) for k, v in pools.items()}
    if not pools:
        log.error("no text under %s (ud/, pud/, tatoeba/): this bench needs it (--data)", data)
        raise SystemExit(2)  # a wrong --data, like every usage error
    return pools


_NO_SPACE = {"cmn", "jpn"}


def _halves(s: str, lang: str) -> tuple[str, str]:
    if lang in _NO_SPACE:
        m = len(s) // 2
        return s[:m], s[m:]
    w = s.split()
    m = max(1, len(w) // 2)
    return " ".join(w[:m]), " ".join(w[m:])


class SentenceMaker:
    """Sentences of one language: first half of a random pool sentence + second half of another."""

    def __init__(self, pools: dict[str, list[str]], seed: int) -> None:
        self.rng = random.Random(seed)
        self.split = {k: [_halves(s, k) for s in v] for k, v in pools.items()}
        self.langs = sorted(self.split)

    def sentence(self, lang: str) -> str:
        h = self.split[lang]
        a, b = self.rng.choice(h)[0], self.rng.choice(h)[1]
        return a + b if lang in _NO_SPACE else f"{a} {b}"

    def doc(self, lang: str, n: int) -> list[str]:
        return [self.sentence(lang) for _ in range(n)]


# --- CommonCrawl WET ------------------------------------------------------------------------


def _wet_record(url: str, text: bytes, n: int) -> bytes:
    rid = uuid.uuid5(uuid.NAMESPACE_URL, url)
    head = (
        f"WARC/1.0\r\nWARC-Type: conversion\r\nWARC-Target-URI: {url}\r\n"
        f"WARC-Date: 2024-03-12T00:00:00Z\r\nWARC-Record-ID: <urn:uuid:{rid}>\r\n"
        f"Content-Type: text/plain\r\nContent-Length: {len(text)}\r\n\r\n"
    ).encode()
    return gzip.compress(head + text + b"\r\n\r\n", compresslevel=5)


def write_wet(path: Path, mb: float, seed: int, pools: dict[str, list[str]]) -> dict:
    """WET files of about ``mb`` MB of decompressed text, 64 MB per file (one gzip member per
    record, as CommonCrawl's)."""
    maker = SentenceMaker(pools, seed)
    path.mkdir(parents=True, exist_ok=True)
    target, written, docs, files, n = mb * MB, 0, 0, 0, 0
    out = None
    while written < target:
        if out is None or out.tell() > 64 * MB:
            if out:
                out.close()
            out = open(path / f"scale-{files:04d}.warc.wet.gz", "wb")
            files += 1
        lang = maker.langs[docs % len(maker.langs)]
        text = "\n".join(maker.doc(lang, 30)).encode("utf-8")
        out.write(_wet_record(f"https://{lang}.scale.example.org/{docs}", text, n))
        written += len(text)
        docs += 1
    out.close()
    return {
        "text_mb": written / MB,
        "docs": docs,
        "files": files,
        "bytes": sum(f.stat().st_size for f in path.iterdir()),
    }


# --- Wikipedia multistream dump ------------------------------------------------------------


def _page(title: str, pid: int, sents: list[str]) -> str:
    s = sents
    text = (
        f"{{{{Infobox thing\n| name = {title}\n| founded = {{{{start date|19{pid % 100:02d}}}}}\n}}}}\n"
        f"'''{title}''' {s[0]}<ref>{{{{cite web|url=https://example.org/{pid}|title=Src}}}}</ref> "
        f"[[Link {pid}|{s[1]}]]\n\n== History ==\n{s[2]} {s[3]}\n\n"
        f'[[File:Img{pid}.jpg|thumb|Caption]]\n{{| class="wikitable"\n|-\n! a !! b\n|-\n| 1 || 2\n|}}\n'
        f"{' '.join(s[4:])}\n\n== References ==\n{{{{Reflist}}}}\n[[Category:Scale pages]]\n"
    )
    return (
        f"  <page>\n    <title>{escape(title)}</title>\n    <ns>0</ns>\n    <id>{pid}</id>\n"
        f"    <revision>\n      <id>{pid * 10}</id>\n      <model>wikitext</model>\n"
        f'      <format>text/x-wiki</format>\n      <text xml:space="preserve">{escape(text)}</text>\n'
        f"    </revision>\n  </page>\n"
    )


def write_wiki(
    path: Path, mb: float, seed: int, pools: dict[str, list[str]], lang: str = "eng"
) -> dict:
    """One multistream dump of about ``mb`` MB of bz2: a header stream, then streams of 100 pages
    (every page of one language; the job's LID decides per sentence)."""
    maker = SentenceMaker({lang: pools[lang]}, seed)
    path.mkdir(parents=True, exist_ok=True)
    f = path / "scalewiki-pages-articles-multistream.xml.bz2"
    head = (
        '<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10" '
        'xml:lang="en">\n  <siteinfo>\n    <sitename>Scale</sitename>\n'
        "    <dbname>scalewiki</dbname>\n  </siteinfo>\n"
    )
    pages = 0
    with open(f, "wb") as out:
        out.write(bz2.compress(head.encode()))
        while out.tell() < mb * MB:
            buf = io.StringIO()
            for _ in range(100):
                pages += 1
                buf.write(_page(f"Scale article {pages}", pages, maker.doc(lang, 12)))
            out.write(bz2.compress(buf.getvalue().encode("utf-8"), 6))
        out.write(bz2.compress(b"</mediawiki>\n"))
    return {"bz2_mb": f.stat().st_size / MB, "pages": pages, "bytes": f.stat().st_size}


# --- measuring one job ------------------------------------------------------------------------


def _tree_rss(p: psutil.Process) -> tuple[int, int]:
    """(sum, largest) of the RSS of the processes in ``p``'s tree."""
    total, largest = 0, 0
    for q in [p, *p.children(recursive=True)]:
        try:
            r = q.memory_info().rss
        except psutil.Error:
            continue
        total, largest = total + r, max(largest, r)
    return total, largest


def reap(proc: subprocess.Popen) -> bool:
    """Non-blocking wait for ``proc``: False while it runs; once it has ended, True, with its
    return code set."""
    pid, status, _usage = os.wait4(proc.pid, os.WNOHANG)
    if pid == 0:
        return False
    proc.returncode = os.waitstatus_to_exitcode(status)
    return True


def proc_hwm(pid: int) -> int:
    """The kernel high-water RSS of process ``pid``'s own address space (``VmHWM``), in bytes;
    0 where it cannot be read (the process has ended)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class HighWater:
    """The largest ``VmHWM`` seen of each process of a tree, sampled with the RSS.

    The high-water mark is monotonic, so a sample sees every spike before it, however short
    (0.2 s RSS samples miss a batch's tensors, and a longer run is likelier to land on one);
    only a rise in a process's last interval before it exits is missed.

    Not ``wait4``'s ``ru_maxrss``: for a child started by ``subprocess`` (vfork, then exec)
    Linux counts the parent's high-water mark into the child's, so once a bench had generated a
    large input in-process every later stage read the bench's own peak (measured: a 13 MiB
    child read 1,514 MiB after its parent had held 1.5 GB; the 2026-11-26 note in
    bench/README.md says which figures it touched)."""

    def __init__(self) -> None:
        self.by_pid: dict[int, int] = {}

    def sample(self, root: psutil.Process) -> None:
        try:
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return
        for q in procs:
            self.by_pid[q.pid] = max(self.by_pid.get(q.pid, 0), proc_hwm(q.pid))

    def largest(self) -> int:
        return max(self.by_pid.values(), default=0)


def run_measured(cmd: list[str], allow_fail: bool = False) -> dict:
    """Run ``cmd`` and measure it: wall seconds, ``peak_rss`` (the process tree's summed RSS,
    sampled every 0.2 s, or the largest process's high-water mark where that is higher: a
    one-process stage's peak, see :class:`HighWater`), ``peak_proc_rss`` (largest process) and
    ``sampled_peak_rss`` (the sampling alone, as the figures before 2026-11-25 were taken)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    ps, peak, peak_proc = psutil.Process(proc.pid), 0, 0
    hw = HighWater()
    err = []
    reader = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)
    reader.start()
    while not reap(proc):
        total, largest = _tree_rss(ps)
        hw.sample(ps)
        peak, peak_proc = max(peak, total), max(peak_proc, largest)
        time.sleep(0.2)
    reader.join()
    dt = time.perf_counter() - t0
    tail = err[0].decode(errors="replace")[-3000:]
    if proc.returncode and not allow_fail:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{tail}")
    # The tree's sum grows with the number of busy workers (one per input file here, up to
    # --direct_num_workers); the largest process is what one worker or the driver needs.
    hwm = hw.largest()
    return {
        "seconds": dt,
        "peak_rss": max(peak, hwm),
        "peak_proc_rss": max(peak_proc, hwm),
        "sampled_peak_rss": peak,
        "returncode": proc.returncode,
        "stderr_tail": tail if proc.returncode else "",
    }


def dir_bytes(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def sentences_out(stats_file: Path) -> int:
    st = json.loads(stats_file.read_text())
    counts = st.get("counts", {})
    c = counts.get("sentences") or next(iter(counts.values()))
    return int(c["out"])


# --- the ladder -----------------------------------------------------------------------------


def ladder(
    stage: str,
    sizes: list[int],
    base_mb: float,
    work: Path,
    seed: int,
    pools: dict[str, list[str]],
    extra: list[str],
) -> list[dict]:
    rows = []
    for x in sizes:
        inp = work / f"{stage}-in-{x}x"
        meta = inp / "_meta.json"
        if not meta.exists():
            t0 = time.perf_counter()
            info = (write_wet if stage == "commoncrawl" else write_wiki)(
                inp, base_mb * x, seed + x, pools
            )
            meta.write_text(json.dumps(info))
            log.info("%s %dx input written in %.0f s: %s", stage, x, time.perf_counter() - t0, info)
        info = json.loads(meta.read_text())
        files = sorted(str(f) for f in inp.iterdir() if f.name.endswith((".gz", ".bz2")))
        out = work / f"{stage}-out-{x}x"
        cmd = [
            sys.executable,
            "-m",
            f"pipelines.{stage}",
            *[a for f in files for a in ("--input", f)],
            "--output",
            str(out),
            "--overwrite",
            *extra,
        ]
        m = run_measured(cmd)
        n = sentences_out(out / "stats.json")
        mb_in = info["bytes"] / MB
        rows.append(
            {
                "stage": stage,
                "x": x,
                "input_mb": mb_in,
                **m,
                "sentences": n,
                "s_per_mb": m["seconds"] / mb_in,
                "us_per_sentence": 1e6 * m["seconds"] / max(n, 1),
                "disk_written": dir_bytes(out),
            }
        )
        log.info("%s %dx: %s", stage, x, rows[-1])
    base = rows[0]
    for r in rows:
        r["ratio_s_per_mb"] = r["s_per_mb"] / base["s_per_mb"]
        r["ratio_us_per_sentence"] = r["us_per_sentence"] / base["us_per_sentence"]
        r["ratio_peak_rss"] = r["peak_rss"] / base["peak_rss"]
        r["ratio_peak_proc_rss"] = r["peak_proc_rss"] / base["peak_proc_rss"]
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--stages",
        nargs="+",
        default=["commoncrawl", "wikipedia"],
        choices=["commoncrawl", "wikipedia"],
        help="corpus jobs to measure",
    )
    ap.add_argument(
        "--sizes", nargs="+", type=int, default=[1, 10, 100], help="multiples of the base input"
    )
    ap.add_argument("--cc-base-mb", type=float, default=10.0, help="1x CommonCrawl: MB of WET text")
    ap.add_argument("--wiki-base-mb", type=float, default=5.0, help="1x Wikipedia: MB of bz2 dump")
    ap.add_argument("--data", type=Path, default=DATA, help="../shared/data (ud/, pud/, tatoeba/)")
    ap.add_argument("--workdir", type=Path, default=REPO / "bench_out" / "scale_corpus")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="also write the rows here")
    ap.add_argument(
        "extra", nargs="*", help="after --: flags passed to every job (e.g. Beam options)"
    )
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    pools = load_pools(a.data)
    rows = []
    for st in a.stages:
        base = a.cc_base_mb if st == "commoncrawl" else a.wiki_base_mb
        rows += ladder(st, sorted(a.sizes), base, a.workdir, a.seed, pools, a.extra)
    hdr = (
        f"{'stage':<12}{'x':>5}{'in MB':>9}{'s':>8}{'s/MB':>8}{'sent out':>11}{'us/sent':>9}"
        f"{'peak RSS MiB':>14}{'largest proc MiB':>18}{'disk MiB':>10}{'s/MB ratio':>12}"
        f"{'us/sent ratio':>15}{'RSS ratio':>11}{'proc ratio':>12}"
    )
    lines = [hdr]
    for r in rows:
        lines.append(
            f"{r['stage']:<12}{r['x']:>5}{r['input_mb']:>9.1f}{r['seconds']:>8.1f}{r['s_per_mb']:>8.2f}"
            f"{r['sentences']:>11,}{r['us_per_sentence']:>9.1f}{r['peak_rss'] / MB:>14,.0f}"
            f"{r['peak_proc_rss'] / MB:>18,.0f}{r['disk_written'] / MB:>10.1f}"
            f"{r['ratio_s_per_mb']:>12.2f}{r['ratio_us_per_sentence']:>15.2f}"
            f"{r['ratio_peak_rss']:>11.2f}{r['ratio_peak_proc_rss']:>12.2f}"
        )
    print("\n".join(lines))
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
