"""Tests of labse_model/vocab/: the WordPiece learner, smoothing and the in-process build."""
