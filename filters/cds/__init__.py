"""Contrastive data selection (CDS): θ_noisy vs θ_clean translation models score pairs.

``filters.cds.score.CdsScorer`` scores; ``filters.cds.fit.train_cds`` trains a model directory.
"""
