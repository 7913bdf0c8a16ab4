"""``pipelines.filter_pairs --same-as cds-score --allow-empty`` (the runner's cds_score stage on
the Beam engine) accepts a language pair the rules kept nothing of, as ``filters cds-score
--allow-empty`` does: an empty scored.parquet with the same columns and the same balanced
stats.json; without the flag an empty input is still one line and exit 2."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from filters.__main__ import main as filters_main
from labse_common.stats import check_balanced
from pipelines.filter_pairs import run as filter_pairs
from tests.support.cds_toy import TINY, toy_pairs

pytestmark = pytest.mark.slow  # trains a toy CDS model (seconds) and runs a Beam job
DIRECT = ["--direct_running_mode", "in_memory", "--direct_num_workers", "1"]
SETS = ["--set", "device=cpu", "--set", "threads=1"]
OWN = {"seconds", "input", "pairs_file", "model"}


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("cds_empty")
    src, trg = toy_pairs(60, 7)
    for name, part in (("noisy", slice(0, 40)), ("trusted", slice(40, 60))):
        text = "".join(f"{a}\t{b}\n" for a, b in zip(src[part], trg[part]))
        (d / f"{name}.tsv").write_text(text, encoding="utf-8")
    argv = ["cds-train", "--noisy", str(d / "noisy.tsv"), "--trusted", str(d / "trusted.tsv")]
    argv += [
        "--output",
        str(d / "model"),
        "--threads",
        "1",
        *(a for kv in TINY for a in ("--set", kv)),
    ]
    assert filters_main(argv) == 0
    return d / "model"


def _empty_pairs(path: Path) -> Path:
    """What the rules leave for a pair they kept nothing of: kept.parquet with no row."""
    cols = {"src": pa.array([], pa.string()), "trg": pa.array([], pa.string())}
    cols["margin"] = pa.array([], pa.float32())
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(cols), path)
    return path


def test_an_empty_pair_scores_as_the_local_command_does(model, tmp_path, caplog):
    kept = str(_empty_pairs(tmp_path / "rules" / "de-en" / "kept.parquet"))
    local = ["cds-score", "--model", str(model), "--pairs", kept, "--allow-empty", *SETS]
    assert filters_main([*local, "--output", str(tmp_path / "local")]) == 0
    job = ["--input", kept, "--same-as", "cds-score", "--cds-model", str(model), *SETS, *DIRECT]
    out = tmp_path / "engine"
    assert filter_pairs([*job, "--allow-empty", "--output", str(out)]) == 0
    got, want = (
        pq.read_table(out / "scored.parquet"),
        pq.read_table(tmp_path / "local" / "scored.parquet"),
    )
    assert got.num_rows == 0 and got.schema == want.schema
    assert sorted(p.name for p in out.iterdir()) == ["scored.parquet", "stats.json"]
    stats = json.loads((out / "stats.json").read_text())
    assert check_balanced(stats) == []
    assert stats["counts"]["pairs"]["in"] == stats["counts"]["pairs"]["out"] == 0
    local_stats = json.loads((tmp_path / "local" / "stats.json").read_text())
    assert {k: v for k, v in stats.items() if k not in OWN} == {
        k: v for k, v in local_stats.items() if k not in OWN
    }
    # Without --allow-empty the job still refuses it: one line, exit 2.
    caplog.set_level(logging.ERROR)
    assert filter_pairs([*job, "--output", str(tmp_path / "refused")]) == 2
    assert "no pair in the input" in caplog.text
