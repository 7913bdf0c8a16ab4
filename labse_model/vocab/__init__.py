"""Multilingual wordpiece vocabulary: pre-tokeniser, language smoothing, learner, export."""

from labse_model.vocab.build import build_vocab, finish_vocab
from labse_model.vocab.learner import LearnerParams, learn_vocab
from labse_model.vocab.smoothing import language_weights, smooth_counts

__all__ = [
    "LearnerParams",
    "build_vocab",
    "finish_vocab",
    "language_weights",
    "learn_vocab",
    "smooth_counts",
]
