"""Lists that must agree come from one definition: rule names, combine features, retrieval modes
and margins from the config sections (the bottom layer; the libraries implement them and check
the match when they load), language codes from labse_common.langs,
and each stage's library takes its typed section (no look-alike config classes)."""

from __future__ import annotations

import dataclasses
import inspect
import typing

import numpy as np
import pytest

from filters.bitext import pair_rules
from labse_common.config import ConfigError, load, reference
from labse_common.langs import ISO3_TO_1, TATOEBA_LANGS, TATOEBA_TO_LID, base_lang
from labse_common.sections import mining as mining_section
from labse_common.sections.eval import EvalConfig
from labse_common.sections.model import ModelConfig
from labse_common.sections.pair_rules import ALL_RULES, PairRulesConfig
from labse_common.sections.pretrain import PretrainConfig
from labse_common.sections.train import TrainConfig
from mining import margin, retrieval


def test_rule_registry_implements_the_sections_rule_names():
    names = [cls.name for cls in pair_rules.RULE_CLASSES]
    assert len(set(names)) == len(names), "two rule classes share a name"
    assert list(pair_rules.RULES) == names == list(ALL_RULES)
    # A class missing, extra or out of order is refused when the registry is built (at import).
    for classes in (
        pair_rules.RULE_CLASSES[:-1],
        (*pair_rules.RULE_CLASSES, pair_rules.CdsStep),
        pair_rules.RULE_CLASSES[::-1],
    ):
        with pytest.raises(RuntimeError, match="do not match the config section's rules"):
            pair_rules.rule_registry(classes)
    assert PairRulesConfig().steps == names  # the default order is the classes' order
    assert all(issubclass(cls, pair_rules.Rule) for cls in pair_rules.RULES.values())
    # Every rule the config accepts builds from the config (lang needs a model: not built here).
    ctx = pair_rules.RuleContext(PairRulesConfig())
    for name, cls in pair_rules.RULES.items():
        if name != "lang":
            step = cls.from_context(ctx)
            assert isinstance(step, cls) and step.name == name
    # ... and one the classes do not define is refused, naming it.
    with pytest.raises(ConfigError, match="unknown rule.*nope"):
        load("pair_rules", "demo", ["steps=[empty, nope]"])
    assert "known: " + ", ".join(names) in reference(["pair_rules"])


def test_combine_features_are_the_sections_names():
    from filters.bitext import combine
    from labse_common.sections import combine as combine_section

    assert tuple(combine.DERIVED) == combine_section.DERIVED_FEATURES
    assert combine.SCORE_COLUMNS is combine_section.SCORE_COLUMNS
    assert combine.known_feature is combine_section.known_feature
    # The section checks the names at load, without the library: a derived feature passes, a
    # misspelt one is one error line listing them.
    features = load("combine", "demo", ["features=[digits_agree, rule_copy]"]).features
    assert features == ["digits_agree", "rule_copy"]
    with pytest.raises(ConfigError, match="unknown feature.*'digit_agree'.*known: margin"):
        load("combine", "demo", ["features=[digit_agree]"])


def test_retrieval_modes_and_margins_have_one_definition():
    hints = typing.get_type_hints(mining_section.MiningConfig)
    assert typing.get_args(hints["mode"]) == mining_section.RETRIEVAL_MODES == retrieval.MODES
    assert typing.get_args(hints["margin"]) == mining_section.MARGINS
    # One declaration: the library re-exports the section's tuple, it does not list its own.
    assert (
        margin.MARGINS is mining_section.MARGINS
        and retrieval.MODES is mining_section.RETRIEVAL_MODES
    )
    with pytest.raises(ValueError, match="unknown margin 'nope'"):
        margin.margin_fn("nope")
    rng = np.random.default_rng(0)
    sims = rng.random((6, 3)).astype(np.float32)
    inds = rng.integers(0, 5, (6, 3))
    for mode in mining_section.RETRIEVAL_MODES:  # every mode the config accepts is implemented
        pairs = retrieval.retrieve(sims, inds, sims[:5], inds[:5] % 6, mode)
        assert len(pairs) > 0, mode
    # Each name computes its own formula (a = the pair's cosine, b = the neighbourhood mean).
    expected = {"ratio": 3.0 / 1.5, "distance": 3.0 - 1.5, "absolute": 3.0}
    assert set(expected) == set(mining_section.MARGINS)
    for name in mining_section.MARGINS:
        assert margin.margin_fn(name)(np.float32(3.0), np.float32(1.5)) == pytest.approx(
            expected[name]
        ), name
    # Index kinds are mining.indexes' registry; the section's help (prose, below that package)
    # names each of them.
    from mining import indexes

    index_help = next(
        f.metadata["help"]
        for f in dataclasses.fields(mining_section.MiningConfig)
        if f.name == "index"
    )
    assert all(kind in index_help for kind in (*indexes.KINDS, indexes.AUTO)), index_help
    with pytest.raises(ConfigError, match="mining.mode='sideways' is not one of"):
        load("mining", "demo", ["mode=sideways"])
    from mining.__main__ import build_parser

    mine = build_parser()._subparsers._group_actions[0].choices["mine"]
    choices = {a.dest: tuple(a.choices) for a in mine._actions if a.choices}
    assert choices["mode"] == retrieval.MODES and choices["margin"] == mining_section.MARGINS
    ev = build_parser()._subparsers._group_actions[0].choices["eval"]
    scoring = next(a for a in ev._actions if a.dest == "scoring")
    assert tuple(scoring.choices) == typing.get_args(typing.get_type_hints(EvalConfig)["scoring"])
    from filters.bitext.cli_margin_score import build_parser as margin_parser

    margin_flag = next(a for a in margin_parser()._actions if a.dest == "margin")
    assert tuple(margin_flag.choices) == mining_section.MARGINS


def test_one_language_code_table():
    assert set(TATOEBA_TO_LID) == set(TATOEBA_LANGS)
    assert all(TATOEBA_TO_LID[c] == ISO3_TO_1[c] for c in TATOEBA_LANGS)
    assert base_lang("cmn_Hani") == "zh" and base_lang("deu") == "de" and base_lang("EN") == "en"
    from bench import rules_bench, scale_bench
    from filters.bitext import scripts
    from pipelines import demo_data, synthetic

    assert scripts.base_lang is base_lang
    assert demo_data.LID_CODE == TATOEBA_TO_LID
    assert all(synthetic.WIKI_CODE[c] == TATOEBA_TO_LID[c] for c in synthetic.LANGS)
    assert all(rules_bench.ISO1[c] == ISO3_TO_1[c] for c in rules_bench.LANGS)
    assert scale_bench.ISO1 == {c: ISO3_TO_1[c] for c in TATOEBA_LANGS if c != "eng"}


def test_libraries_take_the_typed_sections():
    from labse_model import loop, pretrain, train

    assert inspect.signature(train.train).parameters["cfg"].annotation in (
        "TrainConfig",
        TrainConfig,
    )
    assert train.TrainConfig is TrainConfig  # not a subclass re-declaring the section
    assert pretrain.PretrainConfig is PretrainConfig
    # The model: section too, as loaded: no dict of it, no second set of shape defaults.
    for fn in (train.train, pretrain.pretrain):
        assert inspect.signature(fn).parameters["model"].annotation in ("ModelConfig", ModelConfig)
    with pytest.raises(TypeError, match="ModelConfig"):
        train.train({"hidden_size": 32}, load("train", "demo"), ["x.tsv"], "out")
    with pytest.raises(TypeError, match="TrainConfig"):
        train.train(load("model", "demo"), {"steps": 3}, ["x.tsv"], "out")
    with pytest.raises(TypeError, match="ModelConfig"):
        pretrain.pretrain({}, load("pretrain", "demo"), None, ["x.tsv"], "out")
    # The loop's settings are the section itself, for both stages: nothing copied field by field.
    keys = set(typing.get_type_hints(loop.LoopKeys))
    for section in (TrainConfig, PretrainConfig):
        assert keys <= {f.name for f in dataclasses.fields(section)}, section
    t = load("train", "demo", ["lr=0.01"])
    run = loop.LoopConfig.of(t, 10, stop_at_step=4)
    assert run.section is t and (run.total_steps, run.halt_at, run.eval_every) == (10, 4, 0)
    p = load("pretrain", "demo", ["eval_every=7"])
    assert loop.LoopConfig.of(p, 5).eval_every == 7 and loop.LoopConfig.of(p, 5).halt_at == 5
    assert {f.name for f in dataclasses.fields(loop.LoopConfig)} == {
        "section",
        "total_steps",
        "halt_at",
    }
