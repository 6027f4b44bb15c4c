"""The ``tiered`` parser tree: help for every option and subcommand, ``--json`` on every
subcommand, ``--version``."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

import tiered_core
from tiered_core.cli import build_parser, main


def walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ("tiered",)):
    """Yield ``(path, parser, subparsers action or None)`` for every parser of the tree."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    yield path, parser, (subs[0] if subs else None)
    for action in subs:
        for name, child in action.choices.items():
            yield from walk(child, (*path, name))


TREE = list(walk(build_parser()))
LEAVES = [(p, parser) for p, parser, subs in TREE if subs is None]


def test_the_tree_has_every_command():
    names = {" ".join(p) for p, _ in LEAVES}
    for expected in ("tiered drivers", "tiered conformance", "tiered demo", "tiered put", "tiered get",
                     "tiered stat", "tiered metadata convert", "tiered metadata rebuild",
                     "tiered spark export", "tiered spark migrate", "tiered spark import"):
        assert expected in names, sorted(names)


@pytest.mark.parametrize("path, parser", [(p, parser) for p, parser, _ in TREE], ids=lambda v: " ".join(v)
                         if isinstance(v, tuple) else "")
def test_every_option_and_subcommand_has_help(path, parser):
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helped = {choice.dest for choice in action._choices_actions if choice.help}
            missing += [f"subcommand {name!r}" for name in action.choices if name not in helped]
            continue
        if not action.help or action.help == argparse.SUPPRESS:
            missing.append("/".join(action.option_strings) or action.dest)
    assert not missing, f"{' '.join(path)}: no help text for {missing}"


@pytest.mark.parametrize("path, parser", LEAVES, ids=lambda v: " ".join(v) if isinstance(v, tuple) else "")
def test_every_subcommand_has_json(path, parser):
    flags = {s for a in parser._actions for s in a.option_strings}
    assert "--json" in flags, f"{' '.join(path)} has no --json"


def test_the_walk_would_see_a_missing_help():
    """The check above can fail: an option without help is reported."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--silent")
    assert [a.dest for a in parser._actions if not a.help] == ["silent"]


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"tiered {tiered_core.__version__}"


def test_version_of_the_console_script():
    script = Path(sys.executable).with_name("tiered")
    proc = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"tiered {tiered_core.__version__}"


def test_help_lists_the_exit_codes(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "exit status:" in out and "NOT_FOUND" in out and "BACKEND" in out


def test_no_command_is_a_usage_error(capsys):
    assert main([]) == 2
    assert "COMMAND" in capsys.readouterr().err
