"""Tests of filters/bitext/cds/ and its two commands, ``filters cds-train`` and ``cds-score``."""
