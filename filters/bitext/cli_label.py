"""label a sample of mined pairs GOOD/BAD in a local web page, saving each label to the TSV

``python -m filters label FILE [--port N] [--host 127.0.0.1] [--no-browser]``

FILE is a labelling TSV: ``sample.tsv`` from ``python -m filters sample``, or the
``labels.tsv`` the runner asks for (the same columns, possibly with the provenance of both
sides). This serves a page on this machine only (a loopback address) and logs its URL; open it
in a browser. The page heads with what GOOD means (combine.label_guideline) and shows one pair
at a time, starting at the first unlabelled one, with its margin and the provenance of both
sides (a link to the page it came from). The file's rows are in labelling order (round-robin
over language pairs and margin strata), so labelling from the top gives a stratified sample at
every point. Keys: g = GOOD, b = BAD, s or space = skip to the next unlabelled pair, u = undo
the last label (and go back to that pair), left/right arrows = previous/next pair; the buttons
do the same. Live, as you label: the labels per language pair and per margin stratum; whether
they are enough to continue (combine.min_labelled and combine.min_per_label, judged by
combine's own check, overall and per pair); and the GOOD share combine would estimate at its
threshold, with its interval (combine's own fit, on the mined pairs of --pairs).

Once the first round is enough to continue and has a threshold, the page offers a second round
("label near the threshold"): --near-threshold pairs (default 50) drawn around and above the
threshold with known inclusion probabilities (seed combine.seed), appended to FILE with the
columns round, round_score, round_threshold and inclusion_probability and served next; the page
then shows the two-round estimate of GOOD at that threshold (unbiased) next to combine's.

The mined pairs and settings are found beside FILE when not given: the source.json that
``filters sample`` writes next to sample.tsv names the pairs, and for the runner's
OUTPUT/labels.tsv, OUTPUT/sample/source.json and the run's OUTPUT/_config.yaml.

Every label is written to FILE as soon as it is given (the whole file is rewritten atomically,
every column and the row order kept), so closing the tab or stopping the server loses nothing,
and FILE stays a plain TSV that a spreadsheet opens and ``filters combine --labels`` reads.
Stop with Ctrl-C: the labels per language pair are logged.

FILE may be an s3:// or gs:// URL (the labels.tsv of a run folder on object storage, labelled
from a machine other than the one running the pipeline): the page works on a private local copy
and uploads the whole file to the URL after every label (one atomic put), only while the object
is still the version it last read or wrote; when something else changed it, nothing more is
saved, the page says so and the command ends with exit status 2. The run's _config.yaml and
sample/source.json beside the URL are used as beside a local file.

On a remote machine, forward the port: ``ssh -L 8765:127.0.0.1:8765 HOST`` and run with
``--port 8765``, then open http://127.0.0.1:8765/ locally.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from filters.bitext.cliutil import local_input
from filters.bitext.label_page import check_loopback, make_server, url_of
from filters.bitext.label_rounds import DEFAULT_SIZE, rounds_of
from filters.bitext.label_store import LabelSheet, summary_lines
from labse_common.cli import (
    add_config_options,
    add_log_level_option,
    command_parser,
    doc_details,
    load_config,
    run_main,
)
from labse_common.datafiles import read_parquet
from labse_common.errors import InputError, UsageError
from labse_common.filesystems import is_remote
from labse_common.logs import setup_logging
from labse_common.sections.combine import CombineConfig

log = logging.getLogger("filters.bitext.label")


def build_parser() -> argparse.ArgumentParser:
    p = command_parser(
        "python -m filters label",
        "Label a sample of mined pairs GOOD or BAD in a local web page; each label is saved to the TSV as soon as it is given.",
        doc_details(__doc__),
        examples=[
            "python -m filters label sample/sample.tsv",
            "python -m filters label s3://bucket/run/labels.tsv --port 8765 --no-browser",
        ],
    )
    p.add_argument(
        "file",
        metavar="FILE",
        help="the labelling TSV to label in place (a header with at least src, trg "
        "and label; label is GOOD, BAD or blank); it must be UTF-8 in a writable "
        "folder, or an s3:// or gs:// URL, saved back there after every label",
    )
    p.add_argument(
        "--port",
        type=int,
        default=0,
        metavar="N",
        help="TCP port to listen on (default 0: a free one; the URL is logged)",
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        metavar="ADDR",
        help="loopback address to listen on: 127.0.0.1 (default), ::1 or localhost; "
        "other addresses are refused (forward the port with ssh -L)",
    )
    p.add_argument(
        "--no-browser",
        action="store_true",
        help="never open a browser; by default one is opened only when a graphical "
        "session is detected (DISPLAY/WAYLAND_DISPLAY, macOS, Windows), otherwise "
        "the URL is only logged",
    )
    p.add_argument(
        "--pairs",
        metavar="PAIRS.parquet",
        help="the mined pairs combine fits on, for the live estimate of GOOD at the threshold "
        "(default: the pairs named by source.json beside FILE, or by OUTPUT/sample/source.json "
        "for the runner's OUTPUT/labels.tsv; none found: no estimate)",
    )
    p.add_argument(
        "--near-threshold",
        type=int,
        default=DEFAULT_SIZE,
        metavar="N",
        help=f"pairs the second round draws near the threshold (default {DEFAULT_SIZE})",
    )
    add_config_options(
        p,
        "combine",
        example='label_guideline="GOOD: ..."',
        default="demo, or _config.yaml beside FILE",
    )
    p.set_defaults(config=None)  # not given: the run's own config beside FILE, else demo
    add_log_level_option(p)
    return p


def _beside(file: Path, *names: str) -> Path | None:
    for name in names:
        if (file.parent / name).is_file():
            return file.parent / name
    return None


def _pairs_path(args: argparse.Namespace) -> str | None:
    """--pairs, else the pairs the sample beside FILE was drawn from (its source.json)."""
    if args.pairs:
        return args.pairs
    source = _beside(Path(args.file), "source.json", os.path.join("sample", "source.json"))
    if source is None:
        return None
    try:
        pairs = json.loads(source.read_text(encoding="utf-8"))["pairs"]
    except (OSError, ValueError, KeyError, TypeError):
        log.warning("%s: not a sample's source.json; no live estimate", source)
        return None
    if not os.path.isfile(pairs):
        log.warning("%s names %s, which is gone; no live estimate", source, pairs)
        return None
    return pairs


def _config(args: argparse.Namespace) -> CombineConfig:
    if args.config is None:
        run_config = _beside(Path(args.file), "_config.yaml")
        args.config = str(run_config) if run_config else "demo"
    return load_config("combine", args)


def _earlier(cfg: CombineConfig) -> dict[tuple[str, str], str] | None:
    """combine.labels (an earlier run's labels): the run adds them to the person's."""
    if not cfg.labels:
        return None
    from filters.bitext import label_match as lm
    from labse_common.stats import StageCounter

    rows = lm.read_rows(cfg.labels, "combine.labels")[1]
    return lm.known_labels(rows, StageCounter(), "earlier_labels", cfg.labels)


def _sheet(args: argparse.Namespace, sheet_class: Callable[..., LabelSheet]) -> LabelSheet:
    cfg = _config(args)
    sheet = sheet_class(args.file, cfg)  # the file checked first: it is what the person gave
    pairs_path = _pairs_path(args)
    if pairs_path is None:
        log.info("no mined pairs given (--pairs): the page shows no estimate")
        return sheet
    pairs = read_parquet(pairs_path, flag="--pairs", required=("src", "trg"))
    if pairs.num_rows == 0:
        raise InputError(pairs_path, "no pairs", "--pairs")
    sheet.use_pairs(pairs, _earlier(cfg))
    log.info("live estimate: combine's fit on %s (config %s)", pairs_path, args.config)
    return sheet


def _graphical() -> bool:
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def run(args: argparse.Namespace, sheet_class: Callable[..., LabelSheet] = LabelSheet) -> int:
    if is_remote(args.file):  # s3://, gs://: a working copy uploaded after every save
        from filters.bitext.label_remote import run_remote

        return run_remote(args, run)
    local_input(args.file, "FILE", "a local labelling TSV and rewrites it in place")
    check_loopback(args.host)
    if args.near_threshold < 1:
        raise UsageError(f"--near-threshold {args.near_threshold}: must be at least 1")
    sheet = _sheet(args, sheet_class)
    rounds_of(sheet, args.near_threshold)
    server = make_server(sheet, args.host, args.port)
    url = url_of(server)
    p = sheet.progress()
    log.info(
        "labelling %s: %d pairs, %d labelled; open %s (Ctrl-C to stop)",
        sheet.path,
        p["total"],
        p["labelled"],
        url,
    )
    if not args.no_browser and _graphical():
        import webbrowser

        webbrowser.open(url)
    try:
        server.serve_forever()
    finally:
        server.server_close()
        with sheet.lock:  # a label being saved is finished first
            for line in summary_lines(sheet):
                log.info("%s", line)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)
    return run_main(lambda: run(args), log)
