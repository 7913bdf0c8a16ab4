"""Whole-tree checks: the import graph."""
