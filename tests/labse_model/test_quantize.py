"""``quantize="int8"``: the encoder's Linear layers run in int8 on CPU (labse_model.encode), and
every embedding entry point offers it (``--quantize``, ``run.embed_quantize``).

* the vectors stay close to the float32 ones (per-row cosine) but are not the same numbers, and
  every Linear layer really is an int8 one;
* int8 on a GPU is refused before any model work: a ValueError in the library, one line and
  exit 2 on the command line;
* a store written with int8 says so in its stats.json; a float32 store keeps the same
  stats.json as before the option existed.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from labse_common.stats import check_balanced, read_report  # noqa: E402
from labse_model.__main__ import main  # noqa: E402
from labse_model.encode import Encoder, cached_encoder  # noqa: E402
from labse_model.tiny import make_tiny_checkpoint  # noqa: E402
from mining.evaluate import model_embedder  # noqa: E402

LINES = [
    f"sentence number {i} talks about topic {i % 7} and a longer tail {i * 3}" for i in range(48)
]

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    return make_tiny_checkpoint(str(tmp_path_factory.mktemp("tiny")), LINES, hidden=64, layers=2)


def test_int8_vectors_are_close_to_float32_but_computed_in_int8(tiny):
    f32 = Encoder.from_pretrained(tiny, device="cpu")
    q8 = Encoder.from_pretrained(tiny, quantize="int8")
    assert q8.device.type == "cpu"  # no device named: int8 picks the CPU even beside a GPU
    linears = [m for m in q8.model.modules() if isinstance(m, torch.nn.Linear)]
    dynamic = torch.ao.nn.quantized.dynamic.Linear
    assert not [m for m in linears if not isinstance(m, dynamic)], "a float Linear was left"
    assert any(isinstance(m, dynamic) for m in q8.model.modules())
    a, b = f32.encode(LINES), q8.encode(LINES)
    cos = (a * b).sum(axis=1)  # both are L2-normalised
    assert cos.min() > 0.99, cos.min()
    assert np.abs(a - b).max() > 1e-6  # really another computation, not the float32 model
    # What the small differences cost retrieval is measured on a trained model, not a random
    # one (bench/README.md, "Encoder and training").


def test_int8_on_a_gpu_is_refused_before_loading(tiny):
    with pytest.raises(ValueError, match="CPU only"):
        Encoder.from_pretrained(tiny, device="cuda", quantize="int8")
    with pytest.raises(ValueError, match="quantize must be one of none, int8"):
        Encoder.from_pretrained(tiny, quantize="int4")


def test_the_cache_keeps_float32_and_int8_apart(tiny):
    assert cached_encoder(tiny, "cpu", 128, "int8") is cached_encoder(tiny, "cpu", 128, "int8")
    assert cached_encoder(tiny, "cpu", 128, "int8") is not cached_encoder(tiny, "cpu", 128)
    # mining eval's embedder loads through the same cache
    vecs = model_embedder(tiny, quantize="int8")(LINES[:4], None)
    assert np.allclose(vecs, cached_encoder(tiny, "cpu", 128, "int8").encode(LINES[:4]))


def test_encode_quantize_int8_writes_a_store_that_says_so(tiny, tmp_path):
    text = tmp_path / "in.txt"
    text.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    for q in ("none", "int8"):
        out = tmp_path / q
        args = ["encode", "--model", tiny, "--input", str(text), "--output", str(out)]
        assert main([*args, "--no-progress", "--quantize", q]) == 0
        rep = read_report(str(out / "stats.json"))
        assert not check_balanced(rep)
        assert rep.get("quantize") == (None if q == "none" else "int8")


def test_encode_quantize_int8_with_a_gpu_device_is_one_line_and_exit_2(tiny, tmp_path, caplog):
    text = tmp_path / "in.txt"
    text.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    out = tmp_path / "store"
    argv = ["encode", "--model", tiny, "--input", str(text), "--output", str(out)]
    assert main([*argv, "--quantize", "int8", "--device", "cuda"]) == 2
    assert "--quantize int8" in caplog.text and "CPU only" in caplog.text
    assert "Traceback" not in caplog.text
    assert not out.exists()
