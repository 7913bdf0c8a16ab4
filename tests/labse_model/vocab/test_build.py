"""In-process vocabulary building on real Tatoeba text: smoothing effect, round trip, bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from labse_common.config import load
from labse_common.stats import check_balanced, read_report
from labse_model.vocab import build_vocab
from labse_model.vocab.export import read_vocab
from tests.support.paths import SHARED_DATA as DATA

TATOEBA = DATA / "tatoeba"
SMALL = ["hin", "ell", "kor"]


def _read(split: str) -> dict[str, list[str]]:
    if not TATOEBA.is_dir():
        pytest.skip(f"real Tatoeba sample not found at {TATOEBA} (see ../shared/data/README.md)")
    out: dict[str, list[str]] = {}
    for f in sorted(TATOEBA.glob(f"{split}.*-eng.*")):
        lang = f.suffix[1:]
        lines = f.read_text(encoding="utf-8").splitlines()
        if lang == "eng" and split == "dev":
            lines = lines if "eng" not in out else []  # one English held-out set is enough
        out.setdefault(lang, []).extend(lines)
    return out


@pytest.fixture(scope="module")
def tatoeba_vocabs(tmp_path_factory):
    train, dev = _read("train"), _read("dev")
    assert len(train) == 17
    out = {}
    for alpha in (0.3, 1.0):
        d = tmp_path_factory.mktemp(f"alpha{alpha}")
        cfg = load(
            "vocab", None, flags={"vocab_size": 8000, "smoothing": alpha, "heldout_fraction": 0.0}
        )
        out[alpha] = build_vocab(train, cfg, d, heldout_by_lang=dev)
    return out, train, dev


def _wpw(vocab_dir: Path) -> dict[str, float]:
    stats = json.loads((vocab_dir / "vocab_stats.json").read_text("utf-8"))
    return {k: v["heldout"]["wordpieces_per_word"] for k, v in stats["languages"].items()}


@pytest.mark.slow
def test_smoothing_gives_small_languages_more_vocabulary(tatoeba_vocabs):
    vocabs, _, _ = tatoeba_vocabs
    smooth, raw = _wpw(vocabs[0.3]), _wpw(vocabs[1.0])
    # English is ~half of the word occurrences (it is the pivot of every pair).
    stats = json.loads((vocabs[1.0] / "vocab_stats.json").read_text("utf-8"))
    assert stats["languages"]["eng"]["raw_share"] > 0.4
    # Measured on held-out sentences: English needs more pieces per word with alpha = 0.3 ...
    assert smooth["eng"] > raw["eng"]
    # ... the small languages fewer (or as many), and on average clearly fewer.
    for lang in SMALL:
        assert smooth[lang] <= raw[lang] + 1e-9, lang
    others = [k for k in smooth if k != "eng"]
    gain = sum(raw[k] - smooth[k] for k in others) / len(others)
    assert gain > 0.03, gain
    sizes = [len(read_vocab(v / "vocab.txt")) for v in vocabs.values()]
    assert all(0.95 * 8000 <= s <= 8000 for s in sizes), sizes


@pytest.mark.slow
def test_round_trip_with_transformers(tatoeba_vocabs):
    from tokenizers import Tokenizer
    from transformers import BertTokenizerFast

    vocabs, train, dev = tatoeba_vocabs
    d = vocabs[0.3]
    vocab = read_vocab(d / "vocab.txt")
    tok = BertTokenizerFast.from_pretrained(str(d))
    assert tok.convert_tokens_to_ids(vocab) == list(range(len(vocab)))  # id = line number
    assert Tokenizer.from_file(str(d / "tokenizer.json")).get_vocab() == tok.get_vocab()
    # Cased, accents kept: nothing is lowercased or stripped on the way.
    assert "".join(tok.tokenize("Café ÉCOLE")).replace("##", "") == "CaféÉCOLE"
    unk = tok.unk_token_id
    for lang, sents in train.items():
        sample = sents[:40] + dev[lang][:20]
        enc = tok(sample, add_special_tokens=True)["input_ids"]
        for s, ids in zip(sample, enc):
            assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
            if unk in ids:
                assert s in dev[lang], f"[UNK] in a training sentence of {lang}: {s!r}"
                continue
            text = tok.decode(ids, skip_special_tokens=True)
            assert re.sub(r"\s+", "", text) == re.sub(r"\s+", "", s), (lang, s, text)


def test_bad_input_is_counted_not_fatal(tmp_path):
    sentences = {
        "en": ["The cat sat on the mat.", "Dogs bark loudly at night."] * 20,
        "empty": [],
        "blank": ["   ", "\x00\x01"],
        "one": ["Μία πρόταση μόνο."],
        "dirty": [
            "bad\x00control\u200bchars here",
            "lone \ud800 surrogate text",
            "w" * 150 + " short words",
            None,
            "",
        ],
    }
    cfg = load("vocab", None, flags={"vocab_size": 200, "min_count": 0.5, "heldout_fraction": 0.0})
    out = build_vocab(sentences, cfg, tmp_path / "v")
    report = read_report(str(out / "stats.json"))
    assert check_balanced(report) == []
    c = report["counts"]
    assert c["languages"] == {"in": 5, "out": 3, "dropped": {"empty": 2}}
    s = c["sentences"]
    assert s["dropped"]["malformed"] == 1
    assert s["dropped"]["empty"] == 3
    assert s["events"] == {"control_chars_cleaned": 2, "unpaired_surrogates_removed": 1}
    assert c["words"]["dropped"]["too_long"] == 1
    vocab = read_vocab(out / "vocab.txt")
    assert not re.search("[\ud800-\udfff\x00\u200b]", "".join(vocab))
    stats = json.loads((out / "vocab_stats.json").read_text("utf-8"))
    assert stats["languages"]["one"]["sentences"] == 1
    assert set(stats["languages"]) == {"en", "one", "dirty"}
