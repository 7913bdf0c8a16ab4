"""label a sample of mined pairs GOOD/BAD in a local web page, saving each label to the TSV

``python -m filters label FILE [--port N] [--host 127.0.0.1] [--no-browser]``

FILE is a labelling TSV: ``sample.tsv`` from ``python -m filters sample``, or the
``labels.tsv`` the runner asks for (the same columns, possibly with the provenance of both
sides). This serves a page on this machine only (a loopback address) and logs its URL; open it
in a browser. The page shows one pair at a time, starting at the first unlabelled one, with its
margin and the provenance of both sides. Keys: g = GOOD, b = BAD, s or space = skip to the next
unlabelled pair, u = undo the last label (and go back to that pair), left/right arrows =
previous/next pair; the buttons do the same. A progress bar and a table per language pair show
what is labelled.

Every label is written to FILE as soon as it is given (the whole file is rewritten atomically,
every column and the row order kept), so closing the tab or stopping the server loses nothing,
and FILE stays a plain TSV that a spreadsheet opens and ``filters combine --labels`` reads.
Stop with Ctrl-C: the labels per language pair are logged.

On a remote machine, forward the port: ``ssh -L 8765:127.0.0.1:8765 HOST`` and run with
``--port 8765``, then open http://127.0.0.1:8765/ locally.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from filters.bitext.cliutil import local_input
from filters.bitext.label_page import (
    LabelSheet,
    check_loopback,
    make_server,
    summary_lines,
    url_of,
)
from labse_common.cli import add_log_level_option, run_main
from labse_common.logs import setup_logging

log = logging.getLogger("filters.bitext.label")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m filters label",
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "file",
        metavar="FILE",
        help="the labelling TSV to label in place (a header with at least src, trg "
        "and label; label is GOOD, BAD or blank); it must be UTF-8 in a writable "
        "folder",
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
    add_log_level_option(p)
    return p


def _graphical() -> bool:
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def run(args: argparse.Namespace) -> int:
    local_input(args.file, "FILE", "a local labelling TSV and rewrites it in place")
    check_loopback(args.host)
    sheet = LabelSheet(args.file)
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
