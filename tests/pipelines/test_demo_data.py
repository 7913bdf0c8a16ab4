"""The demo's task builder on the real samples, read back as the runner reads any sources: UD text
trains the vocabulary and MLM, PUD pairs train TLM and the dual encoder, and a share of PUD lines
is planted in the web text to be mined, the same line numbers for every language so no planted
sentence is ever trained on. Dev files of different lengths are refused, not shifted."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from labse_common.config import load
from labse_common.errors import InputError
from pipelines.demo_data import build, pud_split
from pipelines.e2e_tasks import inputs, read_gold

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
pytestmark = pytest.mark.skipif(
    not (DATA / "pud").is_dir() or not (DATA / "ud").is_dir(),
    reason=f"{DATA}/pud and ud/ (the real UD/PUD samples) are not present",
)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("prep")
    cfg = load("sources", "demo").demo
    build(DATA, base / "demo", cfg)
    inputs([], [], [], base / "inputs", 2000, demo=base / "demo")
    return base / "inputs"


def _train_texts(out: Path) -> set[str]:
    texts = set()
    for f in (out / "train_sentences").glob("*/*.parquet"):
        texts |= set(pq.read_table(f, columns=["text"]).column("text").to_pylist())
    for line in (out / "train_pairs.tsv").read_text(encoding="utf-8").splitlines():
        texts |= set(line.split("\t")[:2])
    return texts


def test_ud_text_and_pud_pairs_train_and_planted_pud_is_mined_only(prepared: Path):
    cfg = load("sources", "demo").demo
    codes = sorted(
        p.name.split(".")[1].split("-")[0] for p in (DATA / "pud").glob("train.*-eng.eng")
    )
    pud, planted = pud_split(DATA, codes, 100, cfg.shuffle_seed)
    assert len(planted) == 100 and len(pud) == 13
    train = _train_texts(prepared)
    # UD sentences of a language that is not mined reach the training sentences.
    ud_ita = (DATA / "ud" / "ita.txt").read_text(encoding="utf-8").splitlines()
    ud_parquet = pq.read_table(prepared / "train_sentences" / "it" / "text.parquet")
    assert set(ud_parquet.column("source").to_pylist()) == {"text"}
    assert set(ud_ita) - {""} <= train
    # PUD lines not planted train every PUD language; planted lines train none.
    pairs = {
        tuple(line.split("\t")[:2])
        for line in (prepared / "train_pairs.tsv").read_text(encoding="utf-8").splitlines()
    }
    for code, rows in pud.items():
        for i, (s, t) in enumerate(rows):
            assert ((s, t) in pairs) == (i not in planted), (code, i)
    planted_eng = {rows[i][1] for rows in pud.values() for i in planted}
    planted_src = {rows[i][0] for rows in pud.values() for i in planted}
    assert not (planted_eng | planted_src) & train
    # The planted lines of the mined languages are gold pairs, beside the Tatoeba dev pairs.
    gold = read_gold(prepared / "gold.tsv")
    for code in cfg.langs:
        for i in planted:
            assert any(g[2] == pud[code][i][0] and g[3] == pud[code][i][1] for g in gold), (code, i)
    assert len(gold) == 3 * (100 + 100)


def test_dev_files_of_different_lengths_are_refused_not_shifted(tmp_path: Path):
    import shutil

    data = tmp_path / "data"
    (data / "tatoeba").mkdir(parents=True)
    for f in (DATA / "tatoeba").glob("*.deu-eng.*"):
        shutil.copy(f, data / "tatoeba" / f.name)
    dev = data / "tatoeba" / "dev.deu-eng.deu"
    dev.write_text(
        "".join(dev.read_text(encoding="utf-8").splitlines(keepends=True)[:-1]), encoding="utf-8"
    )
    cfg = load("sources", "demo", ["demo.langs=[deu]", "demo.pud=false", "demo.ud=false"]).demo
    with pytest.raises(InputError, match="lines vs"):
        build(data, tmp_path / "out", cfg)
    assert not (tmp_path / "out").exists()


def test_training_groups_hold_every_pair_once_by_source(prepared: Path):
    """The train stage reads inputs/train_groups: one folder per <source>.<pair>, together
    exactly the rows of train_pairs.tsv, so train.source_weights can weigh Tatoeba and PUD."""
    flat = (prepared / "train_pairs.tsv").read_text(encoding="utf-8").splitlines()
    grouped: list[str] = []
    names = sorted(d.name for d in (prepared / "train_groups").iterdir())
    for name in names:
        lines = (prepared / "train_groups" / name / "pairs.tsv").read_text("utf-8").splitlines()
        src, pair = name.split(".")
        assert {"-".join(line.split("\t")[2:4]) for line in lines} == {pair}, name
        grouped += lines
    assert sorted(grouped) == sorted(flat)
    assert {n.split(".")[0] for n in names} == {"pud", "tatoeba"}
    assert "tatoeba.de-en" in names and "pud.de-en" in names


@pytest.mark.parametrize(
    "path,fmt,group",
    [
        ("/d/pud.de-en.tsv", "tsv", "pud.de-en"),
        ("/d/de-en.tsv.gz", "tsv", "de-en"),
        ("s3://b/news-commentary-v16.deu-eng.parquet", "parquet", "news-commentary-v16.de-en"),
        ("/d/corpus/train.de-fr.de", "moses", "train.de-fr"),
        ("/d/my corpus.v2.de-en.txt", "tsv", "my_corpus_v2.de-en"),
    ],
)
def test_train_group_names_the_source_before_the_pair(path, fmt, group):
    from labse_common.sources import PairFile
    from pipelines.e2e_tasks import train_group

    src, trg = group.rsplit(".", 1)[-1].split("-")
    pf = PairFile(src, trg, fmt, (path,), path)
    assert train_group(pf) == group
