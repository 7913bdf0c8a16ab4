"""Contrastive data selection (CDS): θ_noisy vs θ_clean translation models score pairs.

``filters.bitext.cds.score.CdsScorer`` scores; ``filters.bitext.cds.fit.train_cds`` trains a model directory.
"""
