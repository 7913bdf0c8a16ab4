"""One logging set-up for every CLI, so messages look the same across stages."""

from __future__ import annotations

import logging
import os


def setup_logging(level: str | None = None) -> None:
    logging.basicConfig(
        level=(level or os.environ.get("LABSE_LOG_LEVEL", "INFO")).upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    # Beam's runner and SDK-harness chatter drowns the job's own messages at INFO.
    for name in ("apache_beam", "apache_beam.runners", "__main__"):
        logging.getLogger(name).setLevel(logging.WARNING)
