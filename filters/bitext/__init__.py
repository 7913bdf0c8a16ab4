"""Bitext filtering: hard pair rules, margin and CDS scores, calibration, the final export.

The ``python -m filters <command>`` commands live here as ``cli_<command>.py``.
"""
