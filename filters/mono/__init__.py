"""Monolingual cleaning: sentence splitting, length, language ID, quality and dedup keys.

Each module answers keep (None) or a named drop reason for one document or sentence; the Beam
jobs in ``pipelines/`` wire them into DoFns, :mod:`filters.mono.cleaner` chains them.
"""
