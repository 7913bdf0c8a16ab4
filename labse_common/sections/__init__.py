"""One dataclass per preset section, each in its own module exported as ``CONFIG``.

``labse_common.config.load("<section>", preset, overrides)`` imports ``sections.<section>`` by
name, so a new stage adds its own module here and touches no shared file.
"""
