"""Tests of filters/bitext/: pair rules, calibration, the combined score and the final bitext."""
