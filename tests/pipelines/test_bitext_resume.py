"""The runner's ``cds_score`` stage by language pair: one ``filters cds-score`` per
pair, each a unit a killed run keeps (pipelines/run/units.py), then ``pipelines.pair_assembly
scored`` joining them into the ``scored.parquet`` and ``stats.json`` the later stages read, in
the rules' ``kept_all.parquet`` order. The kill and rerun through the runner itself:
tests/pipelines/test_run_own_data.py (``test_a_killed_cds_score_stage_keeps_the_pairs_it_scored``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from filters.__main__ import main as filters_main
from labse_common.stats import check_balanced
from pipelines.pair_assembly import main as assembly_main
from tests.support.cds_toy import TINY, toy_pairs

PAIRS = ("de-en", "fr-en")
SCORE = ["--device", "cpu", "--threads", "1", "--batch-size", "8"]


def _kept(path: Path, src: list[str], trg: list[str], lang: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    n = len(src)
    cols = {"src": src, "trg": trg, "src_lang": [lang] * n, "trg_lang": ["en"] * n}
    cols["margin"] = pa.array(np.linspace(1.0, 1.5, n), pa.float32())
    pq.write_table(pa.table(cols), path)
    return path


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A tiny CDS model (cds_train/) and the rules' kept pairs of two language pairs, the
    second with fewer pairs than a model batch, plus their concatenation (kept_all.parquet)."""
    d = tmp_path_factory.mktemp("cds_resume")
    src, trg = toy_pairs(60, 7)
    for name, part in (("noisy", slice(0, 40)), ("trusted", slice(40, 60))):
        text = "".join(f"{a}\t{b}\n" for a, b in zip(src[part], trg[part]))
        (d / f"{name}.tsv").write_text(text, encoding="utf-8")
    train = ["cds-train", "--noisy", str(d / "noisy.tsv"), "--trusted", str(d / "trusted.tsv")]
    sets = [a for kv in [*TINY, "noisy_epochs=1"] for a in ("--set", kv)]  # enough: any model
    assert filters_main([*train, "--output", str(d / "cds_train"), "--threads", "1", *sets]) == 0
    s, t = toy_pairs(31, 9)
    kept = [
        _kept(d / "rules" / "de-en" / "kept.parquet", s[:25], t[:25], "de"),
        _kept(d / "rules" / "fr-en" / "kept.parquet", s[25:], t[25:], "fr"),
    ]
    tables = [pq.read_table(k) for k in kept]
    pq.write_table(pa.concat_tables(tables), d / "rules" / "kept_all.parquet")
    return d


def _score(d: Path, pairs: str, out: Path, *extra: str) -> int:
    argv = ["cds-score", "--model", str(d / "cds_train"), "--pairs", pairs, "--output", str(out)]
    return filters_main([*argv, *SCORE, *extra])


@pytest.mark.slow
def test_scores_by_pair_joined_are_the_whole_files_rows_and_scores(run_dir: Path, tmp_path):
    """The stage's commands (one cds-score per pair, then the join) give kept_all's rows in
    its order with the scores one cds-score over kept_all gives (batches of other pairs may
    pad differently: equal to float32 rounding), and stats.json sums the pairs' counts."""
    stage = tmp_path / "cds_score"
    for p in PAIRS:
        kept = str(run_dir / "rules" / p / "kept.parquet")
        assert _score(run_dir, kept, stage / p, "--allow-empty") == 0
    assert assembly_main(["scored", str(stage), "--pairs", *PAIRS]) == 0
    got = pq.read_table(stage / "scored.parquet")
    assert _score(run_dir, str(run_dir / "rules" / "kept_all.parquet"), tmp_path / "whole") == 0
    whole = pq.read_table(tmp_path / "whole" / "scored.parquet")
    assert got.column_names == whole.column_names
    text = ["src", "trg", "src_lang", "trg_lang", "margin"]
    assert got.select(text).equals(whole.select(text))
    for col in ("cds_score", "xent_clean"):
        print(
            col, "max |by pair - whole|:", np.abs(got[col].to_numpy() - whole[col].to_numpy()).max()
        )
        np.testing.assert_allclose(got[col].to_numpy(), whole[col].to_numpy(), atol=1e-4)
    stats = json.loads((stage / "stats.json").read_text())
    assert stats["stage"] == "cds_score" and stats["shards"] == 2 and not check_balanced(stats)
    assert stats["counts"]["pairs"]["in"] == stats["counts"]["pairs"]["out"] == 31
    assert stats["pairs"] == list(PAIRS) and stats["outputs"] == ["scored.parquet"]
    # The join is a pure function of the pairs' folders: run again, the same file.
    before = (stage / "scored.parquet").read_bytes()
    assert assembly_main(["scored", str(stage), "--pairs", *PAIRS]) == 0
    assert pq.read_table(stage / "scored.parquet").equals(got)
    assert (stage / "scored.parquet").read_bytes() == before


@pytest.mark.slow
def test_a_pair_the_rules_kept_nothing_of_scores_as_an_empty_file(run_dir: Path, tmp_path):
    """Scored alone, a language pair with no kept pair is an empty file with the score
    columns (the runner's --allow-empty), not the error a whole empty input is."""
    empty = tmp_path / "rules" / "xx-en" / "kept.parquet"
    _kept(empty, [], [], "xx")
    assert _score(run_dir, str(empty), tmp_path / "refused") == 2
    assert _score(run_dir, str(empty), tmp_path / "xx-en", "--allow-empty") == 0
    t = pq.read_table(tmp_path / "xx-en" / "scored.parquet")
    assert t.num_rows == 0 and {"src", "trg", "cds_score", "xent_clean"} <= set(t.column_names)
    stats = json.loads((tmp_path / "xx-en" / "stats.json").read_text())
    assert stats["counts"]["pairs"]["in"] == stats["counts"]["pairs"]["out"] == 0


def test_the_join_keeps_the_order_given_and_unifies_schemas(tmp_path, caplog):
    """Per-pair files written as cds-score writes them: joined in --pairs order (not the
    folder's), a pair with fewer columns promoted as the rules' concat does; a pair missing
    its file is one line and exit status 2."""
    stage = tmp_path / "cds_score"
    rows = {
        "b-x": [{"src": "b1", "trg": "x", "margin": 1.2, "cds_score": 0.5}],
        "a-x": [
            {"src": "a1", "trg": "x", "cds_score": 0.1},
            {"src": "a2", "trg": "y", "cds_score": 0.2},
        ],
    }
    for pair, rs in rows.items():
        (stage / pair).mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(rs), stage / pair / "scored.parquet")
        report = {"stage": "cds_score", "counts": {"pairs": {"in": len(rs), "out": len(rs)}}}
        (stage / pair / "stats.json").write_text(json.dumps(report))
    assert assembly_main(["scored", str(stage), "--pairs", "b-x", "a-x"]) == 0
    got = pq.read_table(stage / "scored.parquet").to_pylist()
    assert [r["src"] for r in got] == ["b1", "a1", "a2"] and got[1]["margin"] is None
    stats = json.loads((stage / "stats.json").read_text())
    assert stats["counts"]["pairs"]["out"] == 3 and stats["shards"] == 2
    caplog.clear()
    assert assembly_main(["scored", str(stage), "--pairs", "b-x", "c-x"]) == 2
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "c-x" in errors[0] and "scored.parquet" in errors[0]


def test_the_local_cds_score_stage_is_one_resumable_command_per_pair(tmp_path):
    from pipelines.run.bitext_stages import CDS_SCORE
    from pipelines.run.units import output_of
    from tests.pipelines.test_run_rerun_keys import context

    ctx = context(tmp_path, "mining.pairs=[de-en, fr-en]")
    assert CDS_SCORE.resumable
    *scores, joined = CDS_SCORE.command_lines(ctx)
    for cmd, pair in zip(scores, PAIRS, strict=True):
        assert cmd[2:4] == ["filters", "cds-score"] and "--allow-empty" in cmd
        assert cmd[cmd.index("--pairs") + 1] == str(tmp_path / "rules" / pair / "kept.parquet")
        assert output_of(cmd, ctx.d(CDS_SCORE)) == tmp_path / "cds_score" / pair
    # The join has no --output: never kept as a unit, it always runs, and it never removes
    # the stage folder as an unfinished unit's output.
    assert joined[2:5] == ["pipelines.pair_assembly", "scored", str(tmp_path / "cds_score")]
    assert output_of(joined, ctx.d(CDS_SCORE)) is None
