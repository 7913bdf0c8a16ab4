"""One logging set-up for every CLI, so messages look the same across stages."""

from __future__ import annotations

import logging
import os

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
# Beam's filesystems log each listing on the root logger at INFO: on an object store that is
# a line per file match, which drowns the job's own messages (the runner lists every stage).
# Its import warns about BigQuery clients this project does not use: a one-line error would
# become two.
_BEAM_CHATTER = ("Finished listing", "Starting the size estimation", "apitools not found")


def _not_chatter(record: logging.LogRecord) -> bool:
    return not (
        record.name == "root"
        and record.levelno <= logging.WARNING
        and str(record.msg).startswith(_BEAM_CHATTER)
    )


def setup_logging(level: str | None = None) -> None:
    name = (level or os.environ.get("LABSE_LOG_LEVEL", "INFO")).upper()
    bad = name not in LEVELS  # --log-level is checked by argparse; this is $LABSE_LOG_LEVEL
    name = "INFO" if bad else name
    root = logging.getLogger()
    # Importing Beam logs a warning, which installs a plain stderr handler on the root logger
    # before ours: replace such handlers (only exact StreamHandlers, so test-capture handlers
    # stay), else basicConfig would do nothing and the level and format would not apply.
    for h in list(root.handlers):
        if type(h) is logging.StreamHandler:
            root.removeHandler(h)
    logging.basicConfig(
        level=name, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S"
    )
    root.setLevel(name)
    for h in root.handlers:
        if _not_chatter not in h.filters:
            h.addFilter(_not_chatter)
    # Beam's runner and SDK-harness chatter drowns the job's own messages at INFO.
    for lg in ("apache_beam", "apache_beam.runners", "__main__"):
        logging.getLogger(lg).setLevel(logging.WARNING)
    if bad:
        logging.getLogger(__name__).warning(
            "LABSE_LOG_LEVEL=%s is not one of %s; using INFO",
            os.environ.get("LABSE_LOG_LEVEL"),
            ", ".join(LEVELS),
        )
