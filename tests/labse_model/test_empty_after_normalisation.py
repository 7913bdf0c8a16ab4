"""Text that is only zero-width characters is nothing once normalised. A vocabulary
learned from it (5 special tokens) and training on pairs of it were exit 0; now exit 2 naming the
input, and the training scan counts such pairs (``empty_after_normalisation``) so stats balance."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from labse_common.config import load
from labse_common.errors import InputError
from labse_common.stats import StageCounter
from labse_model import stream
from labse_model.vocab.build import build_vocab, write_counts
from labse_model.vocab.pretokenize import has_words, pretokenize

ZW = ["\u200b", "\u200b\u200b \u200b", "\u200c\u200d", "\ufeff\u200b", " \u2060 "]


def test_has_words_agrees_with_the_tokenizers_cleaning():
    for text in ZW + ["a\u200b", "x", "  ", "\x01", "Straße", "\ufffd", "!", "\u200b…", "中", ""]:
        assert has_words(text) == bool(pretokenize(text).words), repr(text)


def test_vocab_from_zero_width_text_is_refused(tmp_path):
    with pytest.raises(InputError) as e:
        build_vocab(
            {"en": ZW * 3, "de": ZW}, load("vocab", None, flags={"vocab_size": 100}), tmp_path / "v"
        )
    assert "no usable word after normalisation" in str(e.value) and "de, en" in str(e.value)


def test_vocab_cli_from_zero_width_counts_is_one_line(tmp_path, capsys, caplog):
    import numpy as np

    from labse_model.vocab.__main__ import main

    counts = tmp_path / "word_counts.parquet"
    write_counts(counts, ["\u200b", "\u200c\u200d"], np.array([5.0, 3.0]), np.array([5, 3]))
    rc = main(["--counts", str(counts), "--output", str(tmp_path / "v"), "--vocab-size", "100"])
    assert rc == 2
    assert "Traceback" not in capsys.readouterr().err
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and str(counts) in errors[0] and "--counts" in errors[0], errors
    assert not (tmp_path / "v").exists()


@pytest.mark.parametrize("fmt", ["tsv", "parquet"])
def test_scan_counts_zero_width_pairs_as_dropped(tmp_path, fmt):
    pairs = [
        ("\u200b", "\u200b"),
        ("a cat", "\u200b\u200b"),
        ("ein Hund", "a dog"),
        ("\ufeff", "b"),
    ]
    if fmt == "tsv":
        path = tmp_path / "pairs.tsv"
        path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    else:
        path = tmp_path / "pairs.parquet"
        pq.write_table(pa.table({"src": [s for s, _ in pairs], "trg": [t for _, t in pairs]}), path)
    res = stream.scan({"all": [str(path)]}, stream.PAIRS)
    assert res.total_rows() == 1
    c = StageCounter()
    c.merge(res.counts)
    assert c.counts["pairs/dropped/empty_after_normalisation"] == 3
    assert c.counts["pairs/in"] == 4 and c.counts["pairs/out"] == 1
    # The blocks read back exactly what the scan counted.
    recs = [r for b in res.groups["all"] for r in stream.read_block(b, stream.PAIRS, 0.0)]
    assert recs == [("ein Hund", "a dog")]


def test_training_on_zero_width_pairs_is_exit_2(tmp_path, caplog):
    from labse_model.__main__ import main

    path = tmp_path / "pairs.tsv"
    path.write_text("\u200b\t\u200b\n" * 50, encoding="utf-8")
    rc = main(["train", "--pairs", str(path), "--output", str(tmp_path / "run"), "vocab_size=200"])
    assert rc == 2
    assert "no usable pairs" in caplog.text
