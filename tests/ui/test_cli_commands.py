"""The CLI's command table: every command listed once, built lazily, with one help line."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from ui.cli.commands import COMMANDS
from ui.cli.main import build_parser, run
from ui.cli.output import EXIT_USAGE


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:  # type: ignore[type-arg]
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub


def _helps(parser: argparse.ArgumentParser) -> dict[str, str | None]:
    return {a.dest: a.help for a in _subparsers(parser)._choices_actions}


def test_the_full_parser_has_every_command_of_the_table_with_its_help_line() -> None:
    full = build_parser()
    assert list(_subparsers(full).choices) == list(COMMANDS)
    assert _helps(full) == {name: c.help for name, c in COMMANDS.items()}


def test_a_lazy_parser_lists_the_same_commands_and_builds_only_the_one_asked_for() -> None:
    for name in COMMANDS:
        lazy = build_parser([name])
        assert _helps(lazy) == _helps(build_parser())
        choices = _subparsers(lazy).choices
        assert choices[name]._actions[1:], f"{name} has no arguments of its own"
        others = [n for n, c in COMMANDS.items() if c.module != COMMANDS[name].module]
        assert all(len(choices[n]._actions) == 1 for n in others)  # -h alone


def test_ggtune_inspect_imports_no_other_command_module() -> None:
    code = (
        "import sys, json; from ui.cli.main import run; run(['inspect', 'catalog:qwen3-8b', "
        "'--json']); print(json.dumps(sorted(m for m in sys.modules if m.startswith('ui.'))))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    commands = {c.module for c in COMMANDS.values()}
    assert set(loaded) & commands == {"ui.cli.inspect"}


def test_a_usage_error_points_at_the_right_help(capsys: pytest.CaptureFixture[str]) -> None:
    # The top-level parser once said "see ggtune ggtune --help".
    assert run(["bogus"]) == EXIT_USAGE
    assert capsys.readouterr().err.strip().endswith("(see ggtune --help)")
    assert run(["inspect"]) == EXIT_USAGE
    assert capsys.readouterr().err.strip().endswith("(see ggtune inspect --help)")
