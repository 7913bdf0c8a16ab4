"""``launch:`` and ``beam:`` are checked when the config loads (Beam
options against Beam's own option classes), an ``extends:`` chain is depth-limited and an empty
optional path is refused; each is one line naming the key with exit status 2, the dry run
included, instead of a traceback or a silent change once the run starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from labse_common.cli import one_line
from labse_common.config import ConfigError, from_dict, load, read_preset
from labse_common.sections.beam import BeamConfig
from labse_common.sections.launch import LaunchConfig
from tests.support.paths import REPO

ENV = {**os.environ, "PYTHONPATH": str(REPO)}
MAX_EXTENDS = 32  # labse_common.config.MAX_EXTENDS


def dry_run(tmp_path: Path, yaml_text: str) -> subprocess.CompletedProcess:
    """``python -m pipelines.run --config <yaml_text> --dry-run`` as a user runs it."""
    cfg = tmp_path / "c.yaml"
    if yaml_text:
        cfg.write_text(yaml_text)
    return dry_run_file(tmp_path, cfg)


def dry_run_file(tmp_path: Path, cfg: Path) -> subprocess.CompletedProcess:
    argv = ["--config", str(cfg), "--output", str(tmp_path / "run"), "--dry-run"]
    return subprocess.run(
        [sys.executable, "-m", "pipelines.run", *argv],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )


def assert_one_line(p: subprocess.CompletedProcess, *words: str) -> None:
    """Exit 2, one line on stderr holding ``words``, no traceback."""
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert all(w in lines[0] for w in words), lines[0]


# --- through the dry run: one case per kind ---------------------------------------------------


@pytest.mark.parametrize(
    "launch, words",
    [
        ("{nnodes: 0}", ["launch.nnodes", ">= 1"]),
        ("{nnodes: 2, rdzv_endpoint: 'head:29400', node_rank: 2}", ["launch.node_rank"]),
        ("{nnodes: 2, rdzv_endpoint: 'head node:29400'}", ["launch.rdzv_endpoint", "head node"]),
    ],
    ids=["nnodes", "node_rank", "endpoint"],
)
def test_the_dry_run_refuses_bad_launch_values(tmp_path: Path, launch: str, words: list[str]):
    assert_one_line(dry_run(tmp_path, f"extends: demo\nlaunch: {launch}\n"), *words)


@pytest.mark.slow  # imports Beam (2-3 s)
@pytest.mark.parametrize(
    "options, words",
    [
        ("{direct_num_workers: -1}", ["beam.options.direct_num_workers", ">= 0"]),
        ("{direct_num_worker: 2}", ["beam.options.direct_num_worker", "direct_num_workers?"]),
    ],
    ids=["negative-workers", "misspelt"],
)
def test_the_dry_run_refuses_bad_beam_options(tmp_path: Path, options: str, words: list[str]):
    assert_one_line(dry_run(tmp_path, f"extends: demo\nbeam:\n  options: {options}\n"), *words)


def test_the_dry_run_refuses_an_empty_init(tmp_path: Path):
    # model.init "" read as "no encoder": the run silently trained one from scratch.
    assert_one_line(dry_run(tmp_path, "extends: demo\nmodel:\n  init: ''\n"), "model.init")


@pytest.mark.slow  # 2 s on a loaded machine
def test_the_dry_run_refuses_a_long_extends_chain(tmp_path: Path):
    # 400 files: the recursion of the base code ended in a RecursionError traceback.
    for i in range(400):
        (tmp_path / f"c{i}.yaml").write_text(f"extends: c{i + 1}.yaml\n")
    (tmp_path / "c400.yaml").write_text("extends: demo\n")
    p = dry_run_file(tmp_path, tmp_path / "c0.yaml")
    assert_one_line(p, "extends", str(MAX_EXTENDS), "c0.yaml -> c1.yaml")


# --- launch -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values, key",
    [
        ({"nnodes": 0}, "launch.nnodes"),
        ({"nnodes": -1}, "launch.nnodes"),
        ({"nnodes": 1.5}, "launch.nnodes"),
        ({"nnodes": "two"}, "launch.nnodes"),
        ({"nnodes": ""}, "launch.nnodes"),
        ({"nnodes": "3:2", "rdzv_endpoint": "h:1"}, "launch.nnodes"),
        ({"nnodes": "0:2", "rdzv_endpoint": "h:1"}, "launch.nnodes"),
        ({"nnodes": 2}, "launch.nnodes"),  # no endpoint: torchrun_args' ValueError at training
        ({"node_rank": 1}, "launch.node_rank"),
        ({"nnodes": 2, "node_rank": 5, "rdzv_endpoint": "h:1"}, "launch.node_rank"),
        ({"nnodes": "1:3", "node_rank": 3, "rdzv_endpoint": "h:1"}, "launch.node_rank"),
        ({"rdzv_endpoint": "head"}, "launch.rdzv_endpoint"),
        ({"rdzv_endpoint": "head:"}, "launch.rdzv_endpoint"),
        ({"rdzv_endpoint": ":29400"}, "launch.rdzv_endpoint"),
        ({"rdzv_endpoint": "head:0"}, "launch.rdzv_endpoint"),
        ({"rdzv_endpoint": "head:65536"}, "launch.rdzv_endpoint"),
        ({"rdzv_endpoint": "head:port"}, "launch.rdzv_endpoint"),
        ({"rdzv_endpoint": "http://head:29400"}, "launch.rdzv_endpoint"),
        ({"rdzv_endpoint": "[::zz]:29400"}, "launch.rdzv_endpoint"),
        ({"rdzv_endpoint": "-head:29400"}, "launch.rdzv_endpoint"),
        ({"rdzv_endpoint": " "}, "launch.rdzv_endpoint"),
        ({"rdzv_id": ""}, "launch.rdzv_id"),
    ],
)
def test_bad_launch_values_are_refused_naming_the_key(values: dict, key: str):
    with pytest.raises(ConfigError) as e:
        from_dict(LaunchConfig, values, prefix="launch")
    assert one_line(e.value).startswith(key), one_line(e.value)


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"nproc_per_node": 8},
        {"nnodes": 2, "node_rank": 1, "rdzv_endpoint": "head-0.cluster:29400"},
        {"nnodes": "1:4", "rdzv_endpoint": "10.0.0.5:29400", "rdzv_id": "job-7"},
        {"nnodes": 2, "node_rank": 0, "rdzv_endpoint": "[fe80::1]:1"},
        {"nnodes": 1, "node_rank": 0, "rdzv_endpoint": "localhost:65535"},
    ],
)
def test_good_launch_values_load_and_the_next_rank_does_not(values: dict):
    cfg = from_dict(LaunchConfig, values, prefix="launch")
    assert "--nnodes" in cfg.args()
    nodes = int(str(cfg.nnodes).split(":")[-1])
    with pytest.raises(ConfigError, match="launch.node_rank"):
        from_dict(LaunchConfig, {**values, "node_rank": nodes}, prefix="launch")


# --- beam -------------------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def beam_imported() -> None:
    """Beam's option classes imported once for the module (2-4 s), not in the first test."""
    from apache_beam.options import pipeline_options  # noqa: F401


@pytest.mark.parametrize(
    "args, option",
    [
        (["--direct_num_workers=-1"], "direct_num_workers"),
        (["--direct_num_workers", "-3"], "direct_num_workers"),
        (["--direct_num_workers=two"], "direct_num_workers"),
        (["--direct_running_mode=threads"], "direct_running_mode"),
        (["--save_main_session=yes"], "save_main_session"),
        (["--flink_mastr=h:8081"], "flink_mastr"),
        (["parallelism"], "parallelism"),
    ],
)
def test_beam_args_beam_would_refuse_or_drop_are_errors(args: list[str], option: str):
    from labse_common.sections.beam import BeamOptionError, parse_beam_args

    with pytest.raises(BeamOptionError) as e:
        parse_beam_args(args)
    assert e.value.option == option


def test_beam_args_of_every_options_class_parse():
    from labse_common.sections.beam import parse_beam_args

    ns = parse_beam_args(
        [
            "--direct_num_workers=0",  # 0: one worker per core, as Beam and the jobs read it
            "--flink_master=h:8081",  # FlinkRunnerOptions
            "--parallelism=4",
            "--dask_client_address=h:8786",  # DaskOptions, beside Beam's Dask runner
            "--experiments=a",
            "--experiments=b",
            "--s3_endpoint_url=http://h:9000",  # S3Options
        ]
    )
    assert (ns.parallelism, ns.experiments, ns.address) == (4, ["a", "b"], "h:8786")


def test_a_misspelt_beam_option_suggests_the_right_one():
    with pytest.raises(ConfigError) as e:
        from_dict(BeamConfig, {"options": {"flink_mastr": "h:8081"}}, prefix="beam")
    assert one_line(e.value) == (
        "beam.options.flink_mastr: not a Beam pipeline option; did you mean flink_master?"
    )


@pytest.mark.parametrize(
    "values, key",
    [
        ({"options": {"direct_num_workers": -1}}, "beam.options.direct_num_workers"),
        ({"options": {"direct_num_workers": 2.5}}, "beam.options.direct_num_workers"),
        ({"options": {"direct_running_mode": "fast"}}, "beam.options.direct_running_mode"),
        ({"options": {"--parallelism": 2}}, "beam.options"),
        ({"runner": "FlinkRuner"}, "beam.runner"),
        ({"runner": ""}, "beam.runner"),
    ],
)
def test_bad_beam_values_are_refused_naming_the_key(values: dict, key: str):
    with pytest.raises(ConfigError) as e:
        from_dict(BeamConfig, values, prefix="beam")
    assert one_line(e.value).startswith(key), one_line(e.value)


def test_good_beam_values_load_and_lists_repeat_the_option():
    cfg = from_dict(
        BeamConfig,
        {
            "runner": "DaskRunner",
            "options": {"dask_client_address": "h:8786", "experiments": ["a"]},
        },
        prefix="beam",
    )
    assert cfg.args() == ["--runner=DaskRunner", "--dask_client_address=h:8786", "--experiments=a"]


def test_a_beam_commands_own_arguments_are_checked_too():
    from labse_common.errors import UsageError
    from pipelines.options import pipeline_options

    with pytest.raises(UsageError) as e:
        pipeline_options(["--direct_num_workers", "-1"])
    assert one_line(e.value).startswith("--direct_num_workers"), one_line(e.value)
    with pytest.raises(UsageError) as e:
        pipeline_options(["--direct_num_worker=2"])
    assert "did you mean --direct_num_workers?" in one_line(e.value)


# --- empty paths and extends: -----------------------------------------------------------------


@pytest.mark.parametrize("value", ["", "  "])
@pytest.mark.parametrize(
    "section, key", [("model", "init"), ("train", "vocab"), ("corpus", "lid_model")]
)
def test_an_empty_optional_path_is_refused(section: str, key: str, value: str):
    with pytest.raises(ConfigError) as e:
        load(section, "demo", [f"{key}={value!r}"])
    assert one_line(e.value).startswith(f"{section}.{key}="), one_line(e.value)
    assert load(section, "demo", [f"{key}=null"]).__dict__[key] is None  # null: none


@pytest.mark.parametrize("value", ["", "\t"])
def test_an_empty_init_flag_is_refused(value: str):
    with pytest.raises(ConfigError, match="model.init"):
        load("model", "demo", flags={"init": value})


def test_an_extends_chain_of_the_limit_loads_and_one_more_is_refused(tmp_path: Path):
    for i in range(MAX_EXTENDS):
        (tmp_path / f"c{i}.yaml").write_text(f"extends: c{i + 1}.yaml\nmining:\n  k: {i + 1}\n")
    (tmp_path / f"c{MAX_EXTENDS}.yaml").write_text("mining:\n  k: 99\n")
    assert read_preset(tmp_path / "c1.yaml")["mining"]["k"] == 2  # 32 files
    with pytest.raises(ConfigError) as e:
        read_preset(tmp_path / "c0.yaml")  # 33 files
    line = one_line(e.value)
    assert f"longer than {MAX_EXTENDS}" in line and "c0.yaml -> c1.yaml -> c2.yaml" in line, line
    assert f"c{MAX_EXTENDS}.yaml" in line and len(line) < 400, line


def test_an_extends_cycle_names_the_chain(tmp_path: Path):
    (tmp_path / "a.yaml").write_text("extends: b.yaml\n")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\n")
    with pytest.raises(ConfigError) as e:
        read_preset(tmp_path / "a.yaml")
    assert "leads back" in one_line(e.value) and "a.yaml -> b.yaml -> a.yaml" in one_line(e.value)


@pytest.mark.parametrize("base", ["''", "'  '"])
def test_an_empty_extends_is_refused(tmp_path: Path, base: str):
    (tmp_path / "a.yaml").write_text(f"extends: {base}\n")
    with pytest.raises(ConfigError, match="extends must name"):
        read_preset(tmp_path / "a.yaml")
