"""Tests of filters/mono/: the monolingual cleaning steps."""
