"""The one typed configuration loader (labse_common.config) and the CLI helpers around it."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import pickle

import pytest

from labse_common.cli import (
    UsageError,
    add_config_options,
    add_log_level_option,
    add_output_option,
    load_config,
    run_main,
)
from labse_common.config import (
    ConfigError,
    ConfigFileNotFound,
    load,
    reference,
    section_names,
    to_dict,
)
from labse_common.config import main as config_main
from labse_common.sections.corpus import CorpusConfig
from labse_common.sections.vocab import VocabConfig


@pytest.mark.slow
def test_every_preset_loads_every_section():
    assert {"corpus", "vocab", "model", "train", "mining", "eval"} <= set(section_names())
    for preset in ("demo", "paper"):
        for name in section_names():
            load(name, preset)
    assert config_main(["--check", "paper"]) == 0


@pytest.mark.parametrize(
    ("override", "key", "what"),
    [
        ("quality_threshold=nan", "corpus.quality_threshold", "finite"),
        ("quality_threshold=.inf", "corpus.quality_threshold", "finite"),
        ("lid_threshold=abc", "corpus.lid_threshold", "not a number"),
        ("lid_threshold=1.5", "corpus.lid_threshold", "<= 1.0"),
        ("min_chars=-5", "corpus.min_chars", ">= 1"),
        ("min_chars=2.5", "corpus.min_chars", "not an integer"),
        ("rows_per_file=0", "corpus.rows_per_file", ">= 1"),
        ("shards_per_language=0", "corpus.shards_per_language", ">= 1"),
        ("dedup=maybe", "corpus.dedup", "boolean"),
        ("max_chars=5", "max_chars=5", "min_chars=10"),
        ("page_timeout_s=0", "corpus.page_timeout_s", "> 0"),
        ("no_such_key=1", "corpus.no_such_key", "unknown"),
        ("langs=3", "corpus.langs", "list"),
    ],
)
def test_bad_corpus_values_name_the_key(override, key, what):
    with pytest.raises(ConfigError) as e:
        load("corpus", "demo", [override])
    assert key in str(e.value) and what in str(e.value)


def test_types_are_coerced():
    cfg = load(
        "corpus",
        "demo",
        ["min_chars=12", "lid_threshold=1e-1", "dedup=false", "langs=en,sr", "lid_model=null"],
    )
    assert (cfg.min_chars, cfg.lid_threshold, cfg.dedup, cfg.langs) == (
        12,
        0.1,
        False,
        ["en", "sr"],
    )
    assert isinstance(cfg.min_chars, int) and cfg.lid_model is None
    assert load("corpus", "demo", ["rows_per_file=2.0"]).rows_per_file == 2
    assert load("mining", "demo", ["threshold=1.05"]).threshold == 1.05
    with pytest.raises(ConfigError, match="mining.mode='sideways' is not one of"):
        load("mining", "demo", ["mode=sideways"])


def test_nested_sections():
    cfg = load("vocab", "demo", ["learner.max_unique_chars=300", "learner.decrement=selected"])
    assert cfg.learner.max_unique_chars == 300 and cfg.learner.decrement == "selected"
    with pytest.raises(ConfigError, match=r"vocab\.learner\.bogus"):
        load("vocab", "demo", ["learner.bogus=1"])
    with pytest.raises(ConfigError, match=r"vocab\.learner\.slack_ratio=nan"):
        load("vocab", "demo", ["learner.slack_ratio=nan"])
    with pytest.raises(ConfigError, match="vocab.learner=3 is not a mapping|vocab.learner"):
        load("vocab", "demo", ["learner=3"])
    with pytest.raises(ConfigError, match="vocab.vocab_size=5 must be >= 7"):
        load("vocab", "demo", ["vocab_size=5"])


def test_flags_win_over_set_and_set_over_preset():
    assert load("corpus", "demo").min_chars == 10
    assert load("corpus", "demo", ["min_chars=20"]).min_chars == 20
    assert load("corpus", "demo", ["min_chars=20"], {"min_chars": 30}).min_chars == 30
    assert load("corpus", "demo", ["min_chars=20"], {"min_chars": None}).min_chars == 20
    # The flag replaces the --set value before the check: only the value in force is checked.
    assert load("corpus", "demo", ["min_chars=-5"], {"min_chars": 7}).min_chars == 7
    with pytest.raises(ConfigError, match="corpus.min_chars=-5"):
        load("corpus", "demo", ["min_chars=20"], {"min_chars": -5})


def test_malformed_and_missing_files(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("corpus:\n  min_chars: [10\n  max_chars: 5000\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid YAML") as e:
        load("corpus", bad)
    assert str(bad) in str(e.value) and "line" in str(e.value)
    listed = tmp_path / "list.yaml"
    listed.write_text("- a\n- b\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="mapping of sections"):
        load("corpus", listed)
    section = tmp_path / "section.yaml"
    section.write_text("corpus: 3\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="section 'corpus' must be a mapping"):
        load("corpus", section)
    with pytest.raises(ConfigFileNotFound) as e:
        load("corpus", tmp_path / "missing.yaml")
    assert isinstance(e.value, FileNotFoundError) and "missing.yaml" in str(e.value)
    # Every CLI's `except UsageError` (exit 2) catches a config error too.
    assert isinstance(e.value, UsageError) and issubclass(ConfigError, ValueError)
    assert config_main(["--check", str(bad)]) == 2


def test_partial_file_gets_defaults(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("corpus:\n  min_chars: 15\n", encoding="utf-8")
    cfg = load("corpus", f)
    assert cfg.min_chars == 15 and cfg.max_chars == CorpusConfig().max_chars


def test_config_travels_to_workers_and_cleaner_uses_it():
    from filters.mono.cleaner import CleanerConfig

    cfg = load("corpus", "demo", ["min_chars=11"])
    assert CleanerConfig is CorpusConfig  # one dataclass, no second set of defaults
    again = pickle.loads(pickle.dumps(cfg))
    assert again == cfg and to_dict(again)["min_chars"] == 11


def test_mining_library_takes_the_section_itself():
    """No look-alike config in mining: the loaded section goes straight to the library."""
    import inspect

    from mining import knn, many, mine

    cfg = load("mining", "demo", ["k=7", "index=ivf", "mem_gb=0.5", "gpu=false"])
    assert (cfg.k, cfg.index, cfg.mem_gb, cfg.unify, cfg.gpu) == (7, "ivf", 0.5, True, False)
    for fn in (
        knn.knn,
        knn.search_flat,
        knn.build_index,
        mine.mine_vectors,
        mine.run_mine,
        mine.prepare_inputs,
        many.run_many,
    ):
        hint = str(inspect.signature(fn).parameters["cfg"].annotation)
        assert "MiningConfig" in hint, (fn.__name__, hint)
    # Keys the library reads from the section are not repeated as parameters.
    for fn in (mine.run_mine, mine.prepare_inputs, many.run_many):
        assert not {"batch_size", "workers", "shard_rows"} & set(inspect.signature(fn).parameters)


def test_reference_lists_every_key():
    text = reference()
    for name in section_names():
        assert f"## `{name}`" in text
    for f in dataclasses.fields(VocabConfig):
        if f.name != "learner":
            assert f"| {f.name} |" in text
    assert "| learner.max_unique_chars | int | `20000` | >= 1 |" in text
    assert "| quality_threshold | float | `0.5` | [0.0, 1.0] |" in text


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="x")
    add_output_option(p, "where")
    add_config_options(p, "corpus", "min_chars=3")
    add_log_level_option(p)
    return p


def test_common_flags():
    # The removed aliases (--out, --output-dir, --preset) are refused: tests/labse_common/
    # test_cli_flags.py.
    p = _parser()
    a = p.parse_args(["--output", "o", "--config", "paper", "--set", "min_chars=3"])
    assert (a.output, a.config, a.set) == ("o", "paper", ["min_chars=3"])
    help_text = p.format_help()
    for shown in ("--output", "--config", "--set", "--log-level"):
        assert shown in help_text
    for gone in ("--out ", "--output-dir", "--preset"):
        assert gone not in help_text
    cfg = load_config("corpus", a, {"max_chars": 40})
    assert (cfg.min_chars, cfg.max_chars) == (3, 40)


def test_run_main_maps_usage_errors_to_status_2(caplog):
    def boom(exc):
        def body():
            raise exc

        return body

    with caplog.at_level(logging.ERROR):
        assert run_main(boom(UsageError("bad --thing")), "t") == 2
        assert run_main(boom(ConfigError("a:\n  line two")), "t") == 2
        # An OSError naming a file is the user's (exit 2); one naming none stays a traceback.
        assert run_main(boom(FileNotFoundError(2, "No such file", "nope.txt")), "t") == 2
    assert "a: line two" in caplog.text and "nope.txt" in caplog.text
    assert run_main(lambda: 0, "t") == 0
    with pytest.raises(RuntimeError):  # a bug is not a usage error: it keeps its traceback
        run_main(boom(RuntimeError("bug")), "t")
