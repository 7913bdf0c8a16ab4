"""``python -m pipelines.run``: the stage runner (see :mod:`pipelines.run`)."""

import signal

from labse_common.cli import exit_with
from pipelines.run.cli import main


def _terminate(signum: int, frame: object) -> None:
    # SIGTERM unwinds like Ctrl-C: the running stage is stopped and the claim released.
    raise KeyboardInterrupt


def _signals() -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _terminate)


def script() -> None:
    """The ``labse-run`` console script: ``python -m pipelines.run``, signals included."""
    _signals()
    exit_with(main)


if __name__ == "__main__":
    _signals()
    exit_with(main)
