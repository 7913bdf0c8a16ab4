"""A model folder whose vocabulary does not fit its embedding table, or whose weights do
not load, is one error line and exit 2 (was an IndexError, or exit 0 with nearly every token
[UNK], or transformers' load report before the error)."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from labse_model.__main__ import main
from labse_model.model import EMBEDDING_PADDING, CheckpointError, load_encoder
from labse_model.tiny import make_tiny_checkpoint

SENTS = ["the cat sat on the mat", "der Hund schläft", "le chat dort", "a dog runs in the park"]
# Enough distinct words for a vocabulary of several hundred pieces (a smaller one cannot lose 300).
_SYL = ["ka", "lo", "mi", "ne", "su", "ra", "te", "vo", "qu", "zi", "bé", "dö", "gü", "hy"]
WORDS = [" ".join(a + b + c for c in _SYL) for a in _SYL for b in _SYL]


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    return make_tiny_checkpoint(
        str(tmp_path_factory.mktemp("tiny")), SENTS + WORDS, hidden=16, layers=1
    )


def _with_vocab(tiny: str, dest, change: int) -> str:
    """A copy of ``tiny`` whose vocab.txt has ``change`` tokens more (or fewer)."""
    out = str(dest)
    shutil.copytree(tiny, out)
    os.remove(os.path.join(out, "tokenizer.json"))  # the tokenizer is rebuilt from vocab.txt
    path = os.path.join(out, "vocab.txt")
    with open(path, encoding="utf-8") as f:
        vocab = f.read().splitlines()
    vocab = vocab + [f"extra{i}" for i in range(change)] if change > 0 else vocab[:change]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(vocab) + "\n")
    return out


def _encode(model: str, tmp_path) -> int:
    inp = tmp_path / "in.txt"
    inp.write_text("\n".join(SENTS + ["extra0 extra1 zzzz qqqq"]) + "\n", encoding="utf-8")
    return main(
        [
            "encode",
            "--model",
            model,
            "--input",
            str(inp),
            "--output",
            str(tmp_path / "o" / "x.npy"),
            "--no-progress",
        ]
    )


def _one_error(capfd, caplog) -> str:
    err = capfd.readouterr().err
    assert "Traceback" not in err and "LOAD REPORT" not in err, err
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1, errors
    return errors[0]


@pytest.mark.parametrize("change", [300, -300])
def test_vocab_that_does_not_fit_the_embeddings_is_refused(tiny, tmp_path, capfd, caplog, change):
    model = _with_vocab(tiny, tmp_path / "m", change)
    assert _encode(model, tmp_path) == 2
    line = _one_error(capfd, caplog)
    assert model in line and "embedding table" in line, line
    assert not (tmp_path / "o" / "x.npy").exists()


def test_padding_rows_are_allowed(tiny, tmp_path):
    model = _with_vocab(tiny, tmp_path / "m", -EMBEDDING_PADDING)
    enc, tok, _ = load_encoder(model)
    assert enc.bert.get_input_embeddings().num_embeddings - len(tok) == EMBEDDING_PADDING
    with pytest.raises(CheckpointError):
        load_encoder(_with_vocab(tiny, tmp_path / "m2", -EMBEDDING_PADDING - 1))


def test_weights_that_do_not_load_are_one_line_without_the_load_report(
    tiny, tmp_path, capfd, caplog
):
    model = str(tmp_path / "m")
    shutil.copytree(tiny, model)
    cfg_path = os.path.join(model, "config.json")
    with open(cfg_path, encoding="utf-8") as f:
        cfg = json.load(f)
    cfg["intermediate_size"] = cfg["intermediate_size"] * 2  # the weights no longer fit
    with open(cfg_path, "w", encoding="utf-8") as f:
        json.dump(cfg, f)
    assert _encode(model, tmp_path) == 2
    line = _one_error(capfd, caplog)
    assert model in line and "above report" not in line, line
