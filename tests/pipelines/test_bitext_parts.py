"""The runner's bitext stage exports each language pair on its own (``filters export --pair``,
``pipelines.export --pair``: a part a killed run keeps) and assembles the parts
(``pipelines.pair_assembly bitext``): the folder equals the one ``filters export`` writes from
the same inputs, file for file, and the parts are gone."""

from __future__ import annotations

import json

import pytest

from tests.pipelines.test_export_engine import (
    DIRECT,
    PAIRS,
    _args,
    assert_same_folder,
    files_of,
    inputs,  # noqa: F401 (the module fixture: mine/, rules/ and combine/ of two pairs)
    local_export,
)

pytestmark = pytest.mark.slow


def _parts_then_assemble(d, variant: str, out, pair_main, extra=()) -> None:
    from pipelines.pair_assembly import main as assemble

    # Reverse order: the assembly puts the pairs in the whole export's order.
    for p in reversed(PAIRS):
        argv = [*_args(str(d), variant), "--pair", p, "--output", str(out / "_parts" / p)]
        assert pair_main([*argv, *extra]) == 0
    part = json.loads((out / "_parts" / PAIRS[0] / "stats.json").read_text())
    assert part["pair"] == PAIRS[0] and part["counts"]["pairs"]["in"] == 30
    assert assemble(["bitext", str(out), "--pairs", *PAIRS]) == 0


@pytest.mark.parametrize("variant", ["combined", "rules", "margin"])
def test_parts_assembled_are_the_whole_export(inputs, tmp_path, variant):  # noqa: F811
    from filters.bitext.cli_export import main

    want = files_of(local_export(inputs, variant, tmp_path / "whole"))
    out = tmp_path / "bitext"
    _parts_then_assemble(inputs, variant, out, main)
    assert not (out / "_parts").exists()
    assert_same_folder(files_of(out), want)


def test_beam_jobs_per_pair_assembled_are_the_whole_export(inputs, tmp_path):  # noqa: F811
    from pipelines.export import main

    want = files_of(local_export(inputs, "combined", tmp_path / "whole"))
    out = tmp_path / "bitext"
    _parts_then_assemble(inputs, "combined", out, main, DIRECT)
    assert_same_folder(files_of(out), want)


def test_a_missing_part_or_a_bad_pair_is_one_line(inputs, tmp_path, caplog):  # noqa: F811
    from filters.bitext.cli_export import main
    from pipelines.pair_assembly import main as assemble

    def errors() -> list[str]:
        got = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
        caplog.clear()
        return got

    out = tmp_path / "bitext"
    first = out / "_parts" / PAIRS[0]
    assert main([*_args(str(inputs), "rules"), "--pair", PAIRS[0], "--output", str(first)]) == 0
    assert assemble(["bitext", str(out), "--pairs", *PAIRS]) == 2
    [err] = errors()
    assert f"_parts/{PAIRS[1]}" in err and "no stats.json" in err
    bad = [*_args(str(inputs), "rules"), "--pair", "de_en", "--output", str(tmp_path / "b")]
    assert main(bad) == 2
    [err] = errors()
    assert "--pair 'de_en'" in err
    missing = [*_args(str(inputs), "rules"), "--pair", "xx-en", "--output", str(tmp_path / "c")]
    assert main(missing) == 2
    [err] = errors()
    assert "xx-en/mined.parquet" in err


def test_parts_and_folder_on_s3(inputs, tmp_path):  # noqa: F811
    """A remote run folder: the Beam jobs write their parts to the bucket and the assembly
    reads them there, writes the folder there and removes them."""
    from pipelines.export import main
    from pipelines.pair_assembly import main as assemble
    from tests.pipelines.test_export_engine import BUCKET
    from tests.support.scaleout_util import s3_args, s3_test_server

    want = files_of(local_export(inputs, "combined", tmp_path / "whole"))
    with s3_test_server(tmp_path / "moto", BUCKET) as (endpoint, client):
        for p in sorted(inputs.rglob("*")):
            if p.is_file():
                client.upload_file(str(p), BUCKET, f"run/{p.relative_to(inputs)}")
        out = f"s3://{BUCKET}/run/bitext"
        for p in PAIRS:
            argv = [*_args(f"s3://{BUCKET}/run", "combined"), "--pair", p]
            argv += ["--output", f"{out}/_parts/{p}", *DIRECT, *s3_args(endpoint)]
            assert main(argv) == 0
        assert assemble(["bitext", out, "--pairs", *PAIRS, *s3_args(endpoint)]) == 0
        prefix = "run/bitext/"
        listed = client.list_objects_v2(Bucket=BUCKET, Prefix=prefix)["Contents"]
        got = {
            o["Key"][len(prefix) :]: client.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read()
            for o in listed
        }
    assert_same_folder(got, want)  # _parts/ removed: nothing but the folder's files
