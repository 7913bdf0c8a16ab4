"""`make demo`: the corpus stages end to end on an embedded default input, on one laptop.

Uses ../shared/data when it is there (the real samples), else the small samples bundled in
pipelines/sample_data. Steps: Wikipedia job -> CommonCrawl job (rule-based quality, dropped rows
kept) -> train the fastText quality classifier from those outputs -> CommonCrawl job again with
the trained classifier. Every step writes its stats.json; a summary table closes the run.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from labse_common.logs import setup_logging

log = logging.getLogger("demo")

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data"
BUNDLED = Path(__file__).resolve().parent / "sample_data"


def default_inputs() -> tuple[str, str]:
    wiki = SHARED / "wikipedia" / "enwiki-sample.xml.bz2"
    cc = SHARED / "commoncrawl"
    if wiki.is_file() and cc.is_dir():
        return str(wiki), str(cc / "*.gz")
    return str(BUNDLED / "enwiki-sample-15pages.xml.bz2"), str(BUNDLED / "*.warc.wet.gz")


def _summary(out: Path, steps: list[str]) -> str:
    lines = ["| step | documents in/out | sentences in/out | languages |", "|---|---|---|---|"]
    for s in steps:
        r = json.loads((out / s / "stats.json").read_text())
        d, se = r["counts"].get("documents", {}), r["counts"].get("sentences", {})
        langs = sorted(p.name for p in (out / s).iterdir() if p.is_dir() and p.name[0] != "_")
        lines.append(f"| {s} | {d.get('in', 0)}/{d.get('out', 0)} | "
                     f"{se.get('in', 0)}/{se.get('out', 0)} | {len(langs)} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipelines.demo", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--output", default="demo_out", help="demo output folder (replaced)")
    ap.add_argument("--wiki", help="Wikipedia dump (default: shared sample or bundled)")
    ap.add_argument("--cc", help="CommonCrawl WET/WARC glob (default: shared sample or bundled)")
    args = ap.parse_args(argv)
    setup_logging()
    from pipelines import commoncrawl, quality, wikipedia

    wiki_in, cc_in = default_inputs()
    wiki_in, cc_in = args.wiki or wiki_in, args.cc or cc_in
    out = Path(args.output)
    os.makedirs(out, exist_ok=True)
    common = ["--overwrite", "--config", "demo"]
    steps = [
        ("wikipedia", lambda: wikipedia.main(
            ["--input", wiki_in, "--output", str(out / "wikipedia"), *common])),
        ("commoncrawl", lambda: commoncrawl.main(
            ["--input", cc_in, "--output", str(out / "commoncrawl"), "--write-dropped", *common])),
        ("quality", lambda: quality.main(
            ["train", "--positive", str(out / "wikipedia"), "--positive", str(out / "commoncrawl"),
             "--negative", str(out / "commoncrawl"), "--output", str(out / "quality.bin")])),
        ("commoncrawl_q", lambda: commoncrawl.main(
            ["--input", cc_in, "--output", str(out / "commoncrawl_q"),
             "--quality-model", str(out / "quality.bin"), *common])),
    ]  # fmt: skip
    for name, step in steps:
        log.info("=== demo step: %s", name)
        rc = step()
        if rc != 0:
            log.error("demo step %s failed with exit status %d", name, rc)
            return rc
    table = _summary(out, ["wikipedia", "commoncrawl", "commoncrawl_q"])
    sys.stdout.write(f"\nDemo finished; outputs in {out}/\n\n{table}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
