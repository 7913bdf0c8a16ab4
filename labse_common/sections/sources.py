"""The ``sources:`` section: what a run reads. Every input of ``python -m pipelines.run`` is named
here (relative paths are taken from ``--data`` when it is given, else from the current folder), so
a run on a user's own crawl, dumps and pairs is a config file, not a folder layout.

The demo is one preset of this section: ``sources.demo`` turns on its task builder, which hides
pairs with a known alignment in generated web text and hands the run ordinary sources (pair files,
an evaluation alignment, a web-text file, plain text). Nothing outside that builder knows the
layout of the demo's data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from labse_common.config_values import option


@dataclass
class DemoSource:
    """The demo's task builder (``python -m pipelines.demo_data``): from a folder in the layout of
    ``../shared/data`` (``tatoeba/{train,dev}.XXX-eng.*``, ``pud/``, ``ud/``) it writes training
    pairs, held-out pairs, the dev (and planted PUD) pairs hidden, shuffled, in one WET file, and
    their alignment as the run's evaluation set."""

    langs: list[str] = option(
        ["deu", "fra", "spa"],
        help="Tatoeba codes (XXX of XXX-eng) whose dev pairs are hidden in the web text; each must "
        "be mined (mining.pairs holds XX-en for it)",
    )
    max_train_pairs: int | None = option(
        None, min=1, help="cap on training pairs per language (null = the whole train split)"
    )
    heldout: int = option(
        50, min=10, help="pairs per mined language held out of the train split for retrieval"
    )
    train_languages: list[str] | None = option(
        None, help="Tatoeba codes whose train pairs train the encoder (null = every one in --data)"
    )
    doc_sentences: int = option(5, min=1, help="shuffled hidden sentences per generated document")
    shuffle_seed: int = option(0, help="seed of the shuffles that hide the alignment")
    ud: bool = option(
        True,
        help="the Universal Dependencies sentences of --data/ud (when present) become plain-text "
        "sources: the vocabulary and MLM pretraining learn from real text of every language",
    )
    pud: bool = option(
        True,
        help="use the human-translated PUD pairs of --data/pud (when present): pud_planted lines are "
        "hidden in the web text and mined, the other lines of every language train the encoder",
    )
    pud_planted: int = option(
        100,
        min=0,
        max=800,
        help="PUD lines hidden per mined language; the same line numbers for every language (line i "
        "is the same English sentence in every PUD file), so no planted sentence is trained on",
    )
    synthetic_seed: int = option(0, help="seed of the embedded synthetic sample (no --data)")
    synthetic_train: int = option(300, min=10, help="synthetic training pairs per language")
    synthetic_dev: int = option(100, min=10, help="synthetic dev pairs per language (hidden)")

    def validate(self) -> None:
        # No mined language: no planted pairs, an empty evaluation and an empty labelled sample,
        # which the run would only discover stages later (or never: exit 0 with empty gold).
        if not self.langs:
            raise ValueError(
                "langs is empty: the demo hides the dev pairs of at least one language"
            )


@dataclass
class SourcesConfig:
    commoncrawl: list[str] = option(
        [],
        help="CommonCrawl inputs: globs of WET/WARC files (local, s3:// or gs://) or *.paths[.gz] "
        "segment lists (their lines joined to commoncrawl_prefix). With wikipedia, the text to "
        "mine: a glob matching no file is skipped (a WARNING) while another of the two matches, "
        "an error when none does",
    )
    commoncrawl_prefix: str | None = option(
        None, help="base URL/folder the lines of a *.paths list are relative to"
    )
    wikipedia: list[str] = option([], help="Wikipedia dumps: globs of *.xml.bz2 / *.xml files")
    text: list[str] = option(
        [],
        help="plain monolingual text, one sentence a line, for the vocabulary and MLM pretraining: "
        "globs with {lang} in the name give the language (mono/{lang}.txt); without it each line's "
        "language is detected with the language-ID model",
    )
    pairs: list[str] = option(
        [],
        help="training pairs: globs whose file names carry the pair as {src}-{trg} "
        "(parallel/{src}-{trg}.tsv: two-column TSV[.gz]; .parquet with src, trg; Moses files "
        "corpus.{src}-{trg}.{lang}); any pair of languages. A glob matching no file is skipped "
        "(a WARNING) while another matches, an error when none does (as for eval and text)",
    )
    eval: list[str] = option(
        [],
        help="known alignments the final bitext is measured against (precision/recall), in the "
        "pair formats above; optional",
    )
    label_from: Literal["person", "eval"] = option(
        "person",
        help="who labels the sample of mined pairs: person = the run stops (exit 3) until a person "
        "labels it (python -m filters label FILE); eval = half 0 of the eval alignment labels it "
        "and only half 1 measures the bitext (the demo's planted pairs)",
    )
    demo: DemoSource | None = option(
        None, help="the demo's task builder (null for a run on your own data)"
    )


CONFIG = SourcesConfig
