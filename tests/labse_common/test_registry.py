"""The registry mechanism (labse_common.registry): a name registered once, beside its code, in
the module the registry names; that module imported on the first lookup; an unknown name a
ConfigError naming the key, the name and the known ones."""

from __future__ import annotations

import argparse
import subprocess
import sys
import textwrap
from dataclasses import dataclass

import pytest

from labse_common.config_values import ConfigError, from_dict, option
from labse_common.registry import Registry, RegistryError
from tests.support.paths import REPO


@pytest.fixture
def widgets(tmp_path, monkeypatch):
    """A registry in a "section" module whose entries live in a separate, not yet imported,
    "implementation" module (as labse_common.sections.* and the upper packages)."""
    (tmp_path / "widget_names.py").write_text(
        "from labse_common.registry import Registry\nWIDGETS = Registry('widget', 'widget_impl')\n"
    )
    (tmp_path / "widget_impl.py").write_text(
        textwrap.dedent(
            """
            from widget_names import WIDGETS

            @WIDGETS.register("gear")
            def gear():
                return "gear"

            @WIDGETS.register()
            class Spring:
                name = "spring"
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import widget_names

    yield widget_names.WIDGETS
    for name in ("widget_names", "widget_impl"):
        sys.modules.pop(name, None)


def test_the_home_module_is_imported_on_the_first_lookup(widgets):
    assert "widget_impl" not in sys.modules
    assert widgets.names() == ("gear", "spring")  # registration order
    assert "widget_impl" in sys.modules
    assert widgets.get("gear")() == "gear" and widgets.get("spring").name == "spring"
    assert "gear" in widgets and "bolt" not in widgets and len(widgets) == 2
    assert list(widgets) == ["gear", "spring"]


def test_registering_twice_or_after_the_lookup_is_refused(widgets):
    reg = Registry("part", __name__)
    reg.add("a", 1)
    with pytest.raises(RegistryError, match="part 'a' registered twice"):
        reg.add("a", 2)
    with pytest.raises(RegistryError, match="non-empty string"):
        reg.register()(object())  # no name given and none on the entry
    assert reg.names() == ("a",)
    # Once read, a registry is sealed: a late entry would be missing from what was checked.
    with pytest.raises(RegistryError, match="part 'b' registered after"):
        reg.add("b", 3)
    widgets.names()
    with pytest.raises(RegistryError, match="widget 'gear' registered after"):
        widgets.add("gear", None)


def test_an_unknown_name_is_refused_at_load_naming_the_key_and_the_known_ones(widgets):
    @dataclass
    class Section:
        one: str = option("gear", names=widgets)
        many: list[str] = option(default_factory=list, names=widgets)

    assert from_dict(Section, {"one": "spring", "many": ["gear"]}, "sec").one == "spring"
    with pytest.raises(ConfigError) as e:
        from_dict(Section, {"one": "bolt"}, "sec")
    assert str(e.value) == "sec.one='bolt' is not one of the known widgets: gear, spring"
    with pytest.raises(ConfigError) as e:
        from_dict(Section, {"many": ["gear", "nut", "bolt"]}, "sec")
    assert str(e.value) == "sec.many: unknown widget(s) 'nut', 'bolt'; known: gear, spring"
    with pytest.raises(ConfigError, match="widget='bolt' is not one of the known widgets"):
        widgets.get("bolt")
    # A registry is an argparse ``choices``: a CLI offers exactly the registered names.
    ap = argparse.ArgumentParser()
    ap.add_argument("--w", choices=widgets)
    assert ap.parse_args(["--w", "spring"]).w == "spring" and "{gear,spring}" in ap.format_help()


def test_an_open_registry_lists_its_names_but_takes_other_text(widgets):
    reg = Registry("kind", __name__, closed=False)
    reg.add("flat", 1)

    @dataclass
    class Section:
        index: str = option("flat", names=reg)

    assert from_dict(Section, {"index": "IVF8,Flat"}).index == "IVF8,Flat"
    assert reg.names() == ("flat",)


def test_a_fresh_process_checks_names_without_importing_the_library_first():
    # The entries live above labse_common: loading a config alone must still see them all.
    code = (
        "import sys\n"
        "from labse_common.config import ConfigError, load\n"
        "assert 'mining.margin' not in sys.modules\n"
        "try:\n"
        "    load('mining', 'demo', ['margin=nope'])\n"
        "except ConfigError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert "mining.margin='nope'" in out.stdout and "ratio, distance, absolute" in out.stdout
