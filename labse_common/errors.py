"""The one error every command line reports as a single line with exit status 2."""

from __future__ import annotations


class UsageError(Exception):
    """A wrong path, argument or configuration value: reported clearly, exit status 2.

    ``labse_common.config.ConfigError`` is one, so an ``except UsageError`` in any CLI also
    catches a bad ``--set`` value or a malformed ``--config`` file.
    """
