"""The ``run:`` section: settings of the stage runner (``python -m pipelines.run``)."""

from __future__ import annotations

from dataclasses import dataclass

from labse_common.config import option


@dataclass
class RunConfig:
    langs: list[str] = option(
        ["deu", "fra", "spa"],
        help="Tatoeba codes (XXX of XXX-eng) whose pairs train/evaluate and whose dev sentences "
        "are hidden in the web text to be mined against English",
    )
    max_train_pairs: int | None = option(
        None, min=1, help="cap on training pairs per language (null = the whole train split)"
    )
    heldout: int = option(
        50, min=10, help="pairs per language held out of the train split to evaluate and calibrate"
    )
    train_languages: list[str] | None = option(
        None, help="Tatoeba codes whose train pairs train the encoder (null = every one in --data)"
    )
    doc_sentences: int = option(
        5, min=1, help="shuffled Tatoeba sentences per synthetic web document"
    )
    shuffle_seed: int = option(0, help="seed of the shuffles that hide the alignment")
    ud: bool = option(
        True,
        help="add the Universal Dependencies sentences of --data/ud (when present) to the training "
        "sentences: the vocabulary and MLM pretraining learn from real text of every language",
    )
    pud: bool = option(
        True,
        help="use the human-translated PUD pairs of --data/pud (when present): pud_planted lines are "
        "hidden in the web text and mined (beside the Tatoeba dev pairs), the other lines of every "
        "language train TLM and the dual encoder",
    )
    pud_planted: int = option(
        100,
        min=0,
        max=800,
        help="PUD lines hidden in the web text per mined language; the same line numbers for every "
        "language (line i is the same English sentence in every PUD file), so no planted English "
        "sentence is ever trained on",
    )
    quality_bootstrap: bool = option(
        True, help="train the fastText quality classifier and rerun CommonCrawl with it"
    )
    min_margin: float = option(
        1.05, help="bitext without the filter stages: keep mined pairs with margin >= this"
    )
    synthetic_seed: int = option(0, help="seed of the embedded synthetic sample")
    synthetic_train: int = option(300, min=10, help="synthetic training pairs per language")
    synthetic_dev: int = option(100, min=10, help="synthetic dev pairs per language (mined)")
    cds_trusted_pairs: int = option(
        2000,
        min=100,
        help="trusted pairs the CDS scorer trains on (an even sample of the training pairs)",
    )
    embed_batch_size: int = option(64, min=1, help="batch size of the embedding stage")
    report_examples: int = option(5, min=1, help="kept and rejected pairs shown in the report")


CONFIG = RunConfig
