"""Source readers: plain Python (no Beam) generators from raw files to Documents.

They never raise on bad input: every problem is counted in the StageCounter passed in, under
the units ``files`` and ``documents``, and reading goes on with what can be recovered.
"""
