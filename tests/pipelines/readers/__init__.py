"""Tests of pipelines/readers/: WARC/WET and Wikipedia dump readers, intact and damaged."""
