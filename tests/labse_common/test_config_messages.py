"""A config error is one short line. The echoed value is capped (an alias-expanded
YAML value was a 522 KB error line) and a YAML document whose aliases expand to millions of
values ("billion laughs") is refused before it is built."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from labse_common.cli import one_line
from labse_common.config import MAX_EXPANDED_VALUES, SHOWN_CHARS, ConfigError, load, read_preset


def _laughs(levels: int, width: int = 10) -> str:
    lines = ["a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def test_an_alias_expanded_value_is_echoed_short(tmp_path: Path):
    # 10**4 values behind one key: allowed by the expansion limit, refused by the type; the
    # line names the key and shows the start of the value only.
    f = tmp_path / "c.yaml"
    parts = ["&a0 [" + ", ".join(["lol"] * 10) + "]"]
    parts += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in (1, 2)]
    f.write_text("mining:\n  k: [" + ", ".join(parts) + ", [" + ", ".join(["*a2"] * 10) + "]]\n")
    with pytest.raises(ConfigError) as e:
        load("mining", f)
    line = one_line(e.value)
    assert "mining.k" in line and len(line) < SHOWN_CHARS + 200, len(line)


def test_a_billion_laughs_is_refused_quickly(tmp_path: Path):
    f = tmp_path / "c.yaml"
    f.write_text(_laughs(9) + "mining:\n  k: 4\n")
    t0 = time.perf_counter()
    with pytest.raises(ConfigError) as e:
        read_preset(f)
    assert time.perf_counter() - t0 < 5
    line = one_line(e.value)
    assert str(f) in line and "aliases expand" in line and str(MAX_EXPANDED_VALUES) in line, line
    assert len(line) < 1000


def test_a_long_set_value_is_echoed_short():
    with pytest.raises(ConfigError) as e:
        load("mining", "demo", ["k=" + "x" * 100_000])
    line = one_line(e.value)
    assert (
        "mining.k" in line and ("…" in line or "..." in line) and len(line) < SHOWN_CHARS + 100
    ), len(line)


def test_an_unknown_key_that_is_not_text_is_one_line(tmp_path: Path):
    f = tmp_path / "c.yaml"
    f.write_text("mining:\n  1: 2\n  k: 4\n")
    with pytest.raises(ConfigError) as e:
        load("mining", f)
    assert "unknown config key(s) mining.1" in str(e.value)


def test_small_aliases_still_work(tmp_path: Path):
    f = tmp_path / "c.yaml"
    f.write_text("combine:\n  features: &f [margin, cds_score]\n  target: 0.8\n")
    assert load("combine", f).features == ["margin", "cds_score"]
