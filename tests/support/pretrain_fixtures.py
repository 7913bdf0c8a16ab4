"""Pretraining inputs from ../shared/data/tatoeba: <lang>/ sentence folders, a pair file, a vocab.

Shared by the pretraining tests and bench/pretrain_bench.py. Only the train split is used for
inputs; the dev split is the held-out retrieval evaluation.
"""

from __future__ import annotations

import glob
from pathlib import Path

import numpy as np

from tests.support.paths import TATOEBA as DATA


def tatoeba_langs(data: Path = DATA) -> list[str]:
    return sorted(p.split(".")[-2].split("-")[0] for p in glob.glob(str(data / "train.*-eng.eng")))


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def write_tatoeba_inputs(
    out: Path,
    vocab_size: int = 8000,
    data: Path = DATA,
    row_group_size: int = 256,
    corpus_dev: bool = False,
) -> dict[str, str]:
    """sentences/<lang>/part-0.parquet (both sides of train), pairs.tsv, vocab/ (the project's
    deterministic learner); returns their paths.

    ``corpus_dev``: the monolingual folders also hold the dev sentences, each side shuffled on
    its own, as the demo's corpus stages produce them (the demo mines the dev split hidden in web
    text). Pretraining then sees the evaluation sentences as unaligned text, never their pairing;
    the vocabulary and the pairs stay train-only.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from labse_model.train import learn_vocab_from

    out.mkdir(parents=True, exist_ok=True)
    eng: list[str] = []
    rows: list[str] = []
    texts: list[str] = []  # train only, both sides: what the vocabulary is learned from
    train_eng: list[str] = []
    for lang in tatoeba_langs(data):
        src = _lines(data / f"train.{lang}-eng.{lang}")
        trg = _lines(data / f"train.{lang}-eng.eng")
        mono_src, mono_trg = list(src), list(trg)
        if corpus_dev:
            rng = np.random.default_rng(len(lang) * 1000 + sum(map(ord, lang)))
            mono_src += list(rng.permutation(_lines(data / f"dev.{lang}-eng.{lang}")))
            mono_trg += list(rng.permutation(_lines(data / f"dev.{lang}-eng.eng")))
        (out / "sentences" / lang).mkdir(parents=True, exist_ok=True)
        pq.write_table(
            pa.table({"text": mono_src, "lang": [lang] * len(mono_src)}),
            out / "sentences" / lang / "part-0.parquet",
            row_group_size=row_group_size,
        )
        eng += mono_trg
        texts += src
        train_eng += trg
        rows += [f"{s}\t{t}\t{lang}\teng\n" for s, t in zip(src, trg, strict=True)]
    (out / "sentences" / "eng").mkdir(parents=True, exist_ok=True)
    pq.write_table(
        pa.table({"text": eng, "lang": ["eng"] * len(eng)}),
        out / "sentences" / "eng" / "part-0.parquet",
        row_group_size=row_group_size,
    )
    (out / "pairs.tsv").write_text("".join(rows), encoding="utf-8")
    if not (out / "vocab" / "vocab.txt").exists():
        learn_vocab_from(iter(texts + train_eng), str(out / "vocab"), vocab_size)
    return {
        "sentences": str(out / "sentences"),
        "pairs": str(out / "pairs.tsv"),
        "vocab": str(out / "vocab"),
    }


def dev_accuracy(model_dir: str, data: Path = DATA) -> dict[str, float]:
    """Tatoeba dev retrieval accuracy (xx -> eng, nearest cosine) per language and on average."""
    from labse_model.encode import Encoder

    enc = Encoder.from_pretrained(model_dir, device="cpu")
    accs = {}
    for lang in tatoeba_langs(data):
        x = enc.encode(_lines(data / f"dev.{lang}-eng.{lang}"))
        y = enc.encode(_lines(data / f"dev.{lang}-eng.eng"))
        accs[lang] = float(((x @ y.T).argmax(1) == np.arange(len(x))).mean())
    accs["average"] = float(np.mean(list(accs.values())))
    return accs
