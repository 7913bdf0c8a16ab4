"""Each kind of named thing has one declaration: rule names, margins, retrieval modes, index
kinds and combine features are registered beside their code (labse_common.registry), and the
config sections hold only the empty registries; language codes come from labse_common.langs,
and each stage's library takes its typed section (no look-alike config classes)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import typing

import numpy as np
import pytest

from labse_common.config import ConfigError, load, reference
from labse_common.langs import ISO3_TO_1, TATOEBA_LANGS, TATOEBA_TO_LID, base_lang
from labse_common.registry import Registry
from labse_common.sections import combine as combine_section
from labse_common.sections import mining as mining_section
from labse_common.sections import pair_rules as rules_section
from labse_common.sections.model import ModelConfig
from labse_common.sections.pair_rules import PairRulesConfig
from labse_common.sections.pretrain import PretrainConfig
from labse_common.sections.train import TrainConfig

#: (registry, the section module holding it) for every kind.
KINDS = (
    (rules_section.RULES, rules_section),
    (mining_section.MARGINS, mining_section),
    (mining_section.RETRIEVAL_MODES, mining_section),
    (mining_section.INDEX_KINDS, mining_section),
    (combine_section.FEATURES, combine_section),
)


def _defined_in(entry: object) -> str | None:
    """The module whose code an entry is: a class or function's own, or that of the first
    function a (dataclass) entry holds; None for a score column (read, not computed)."""
    if entry is None:
        return None
    if inspect.isclass(entry) or inspect.isfunction(entry):
        return entry.__module__
    return next(
        getattr(entry, f.name).__module__
        for f in dataclasses.fields(entry)
        if callable(getattr(entry, f.name))
    )


@pytest.mark.parametrize("reg,section", KINDS, ids=[r.kind for r, _ in KINDS])
def test_every_kinds_names_come_from_its_code(reg: Registry, section) -> None:
    names = reg.names()
    assert names, reg
    # Each entry is code of the registry's home module (the upper package), none elsewhere.
    homes = {_defined_in(entry) for _, entry in reg.items()} - {None}
    assert homes == {reg.home}, (reg, homes)
    # The section lists none of them: apart from a field's default value, no name is a string
    # in its source (a list there would be a second declaration to keep equal).
    tree = ast.parse(inspect.getsource(section))
    strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)]
    listed = [s for s in strings if isinstance(s, str) and s in names]
    assert len(listed) <= 1, (reg.kind, listed)
    # The reference (docs/config-reference.md) lists them, from the registry.
    if reg is not combine_section.FEATURES:
        assert ", ".join(map(repr, names)) in reference([section.__name__.rsplit(".", 1)[1]])


def test_each_registered_name_works():
    from filters.bitext import combine, pair_rules
    from mining import indexes, margin, retrieval

    # Every rule builds from the config (lang needs a model: not built here), in the
    # declared order, which is the default ``steps``.
    assert PairRulesConfig().steps == list(rules_section.RULES)
    ctx = pair_rules.RuleContext(PairRulesConfig())
    for name, cls in rules_section.RULES.items():
        assert issubclass(cls, pair_rules.Rule) and cls.name == name
        if name != "lang":
            assert isinstance(cls.from_context(ctx), cls)
    # Each margin computes its own formula (a = the pair's cosine, b = the neighbourhood mean).
    expected = {"ratio": 3.0 / 1.5, "distance": 3.0 - 1.5, "absolute": 3.0}
    assert set(expected) == set(mining_section.MARGINS)
    for name in mining_section.MARGINS:
        got = margin.margin_fn(name)(np.float32(3.0), np.float32(1.5))
        assert got == pytest.approx(expected[name]), name
    with pytest.raises(ConfigError, match="margin='nope'.*ratio, distance, absolute"):
        margin.margin_fn("nope")
    rng = np.random.default_rng(0)
    sims = rng.random((6, 3)).astype(np.float32)
    inds = rng.integers(0, 5, (6, 3))
    for mode in mining_section.RETRIEVAL_MODES:
        assert len(retrieval.retrieve(sims, inds, sims[:5], inds[:5] % 6, mode)) > 0, mode
    for kind in mining_section.INDEX_KINDS:
        assert indexes.factory(kind, 50_000, 64), kind
    assert set(indexes.AUTO_KINDS) < set(indexes.KINDS) == set(mining_section.INDEX_KINDS)
    assert set(combine.DERIVED) | set(combine.SCORE_COLUMNS) == set(combine_section.FEATURES)
    for fn in combine.DERIVED.values():
        assert len(fn(["a 1"], ["b 1"])) == 1


def test_the_config_refuses_an_unknown_name_at_load_naming_the_known_ones():
    with pytest.raises(ConfigError) as e:
        load("mining", "demo", ["margin=nope"])
    assert str(e.value) == (
        "mining.margin='nope' is not one of the known margins: ratio, distance, absolute"
    )
    with pytest.raises(ConfigError, match="mining.mode='sideways' is not one of the known"):
        load("mining", "demo", ["mode=sideways"])
    with pytest.raises(
        ConfigError, match=r"pair_rules.steps: unknown rule\(s\) 'nope'; known: empty"
    ):
        load("pair_rules", "demo", ["steps=[empty, nope]"])
    with pytest.raises(ConfigError, match="unknown feature.*'digit_agree'.*known: margin"):
        load("combine", "demo", ["features=[digit_agree]"])
    # An open registry lists its names but takes other text (a FAISS factory string).
    assert load("mining", "demo", ["index=IVF8,Flat"]).index == "IVF8,Flat"
    features = load("combine", "demo", ["features=[digits_agree, rule_copy]"]).features
    assert features == ["digits_agree", "rule_copy"]


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
