"""The command groups of labse_model, mining and the runner's tasks, and the runner's --help:
one mechanism (labse_common.command_group: a command per module, its parser from
labse_common.cli.command_parser), every command name kept, shortened flags refused, and a help
that says what the command does, then its options, then examples."""

from __future__ import annotations

import importlib
import re

import pytest

GROUPS = {
    "labse_model": {"encode", "pretrain", "train"},
    "mining": {"embed", "eval", "mine", "mine-many", "plan"},
    "pipelines.e2e_tasks": {"concat", "embed", "inputs", "labels", "score", "sentences"},
}
CASES = [(group, name) for group, names in GROUPS.items() for name in sorted(names)]


def _command_module(group: str, name: str):
    main = importlib.import_module(f"{group}.__main__" if group != "pipelines.e2e_tasks" else group)
    return importlib.import_module(main.GROUP.module_names()[name])


@pytest.mark.parametrize("group", GROUPS)
def test_every_command_is_kept_and_listed_with_its_help(group):
    main = importlib.import_module(f"{group}.__main__" if group != "pipelines.e2e_tasks" else group)
    listed = main.commands()
    assert set(listed) == GROUPS[group]
    assert all(listed.values()), listed  # each module's docstring gives its one-line help


@pytest.mark.parametrize(("group", "name"), CASES)
def test_a_shortened_flag_is_an_unknown_flag(group, name, capsys):
    parser = _command_module(group, name).build_parser()
    flags = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
    for flag in (f for f in flags if len(f) > 5 and f[:-1] not in flags):
        with pytest.raises(SystemExit) as e:  # also where unknown flags go on (Beam's)
            parser.parse_known_args([flag[:-1]])
        err = capsys.readouterr().err
        assert e.value.code == 2 and f"unrecognized arguments: {flag[:-1]}" in err, err


@pytest.mark.parametrize(("group", "name"), CASES)
def test_a_commands_help_is_summary_options_examples(group, name):
    text = _command_module(group, name).build_parser().format_help()
    prog = "python -m " + group + " " + name
    assert text.startswith(f"usage: {prog}"), text[:80]
    assert text.index("options:") < text.index("examples:"), text
    assert not re.search(r":(mod|func|class|data):`", text), text


def test_an_option_before_the_command_reaches_it(capfd, caplog):
    from mining.__main__ import main

    argv = ["plan", "--n-src", "1000", "--n-trg", "1000", "--mem-gb", "1", "--json"]
    assert main(["--log-level", "WARNING", *argv]) == 0
    assert "nprobe" in capfd.readouterr().out
    assert main(["plann"]) == 2  # an unknown command: one line, exit 2
    assert any("unknown command 'plann'" in r.getMessage() for r in caplog.records)


def test_the_runners_help_says_what_it_does_then_options_then_examples():
    from pipelines.run.cli import build_parser

    parser = build_parser()
    text = parser.format_help()
    assert not parser.allow_abbrev
    assert not re.search(r":(mod|func|class|data):`|``", text), "source-code roles in --help"
    assert "manifest.json" not in text and "@stage" not in text  # internals: docs/stages.md
    assert text.index("Run the whole pipeline") < text.index("options:") < text.index("examples:")
    assert "python -m pipelines.run --config demo --output demo_out --dry-run" in text
