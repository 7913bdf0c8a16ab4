"""A data folder in a layout the demo never uses, for the runner's own-data tests: CommonCrawl
WET/WARC files and Wikipedia dumps under their own names, training pairs as TSV (de-en) and Moses
files (de-fr, no English), an evaluation alignment as TSV and Parquet (ISO 639-3 names), and a
small random encoder in the LaBSE layout to start from (model.init)."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def make_layout(
    root: Path, n_train: int = 120, n_dev: int = 40, n_web: int = 360
) -> dict[str, object]:
    from labse_model.tiny import make_tiny_checkpoint
    from pipelines.demo_data import write_wet
    from pipelines.synthetic import split_sentences, write_web, write_wikipedia

    splits = split_sentences(0, n_train, n_dev)
    web = splits["web"]["all"][:n_web]  # a few hundred pages: every stage runs, in seconds
    write_web(root / "crawl", web, 0)
    write_wikipedia(root / "dumps", web, 0)
    de_en = [(r["deu"], r["eng"]) for r in splits["dev"]["deu"]]
    de_fr = [(r["deu"], r["fra"]) for r in splits["dev"]["fra"]]
    hidden = [x for p in de_en + de_fr for x in p]
    random.Random(0).shuffle(hidden)
    docs = [hidden[i : i + 5] for i in range(0, len(hidden), 5)]
    write_wet(root / "crawl" / "hidden.warc.wet.gz", docs, "https://own.example/doc")
    (root / "gold").mkdir()
    (root / "gold" / "dev.de-en.tsv").write_text(
        "".join(f"{s}\t{t}\n" for s, t in de_en), encoding="utf-8"
    )
    pq.write_table(
        pa.table({"src": [s for s, _ in de_fr], "trg": [t for _, t in de_fr]}),
        root / "gold" / "dev.deu-fra.parquet",
    )
    par = root / "parallel"
    par.mkdir()
    train_en = [(r["deu"], r["eng"]) for r in splits["train"]["deu"]]
    train_fr = [(r["deu"], r["fra"]) for r in splits["train"]["fra"]]
    (par / "train.de-en.tsv").write_text(
        "".join(f"{s}\t{t}\n" for s, t in train_en), encoding="utf-8"
    )
    (par / "corpus.de-fr.de").write_text("".join(s + "\n" for s, _ in train_fr), encoding="utf-8")
    (par / "corpus.de-fr.fr").write_text("".join(t + "\n" for _, t in train_fr), encoding="utf-8")
    sents = [x for p in train_en + train_fr for x in p]
    model = make_tiny_checkpoint(str(root / "labse"), sentences=sents, hidden=64, layers=2, heads=2)
    return {"model": model, "gold": {"de-en": de_en, "de-fr": de_fr}}
