"""``tiered drivers [--json]``."""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from tiered_core.cli import main
from tiered_core.cli.drivers import capability_summary, format_table
from tiered_core.plugins import Registry
from tiered_core.spi import Capabilities

INSTALLED = {"memory": "tiered-driver-memory", "posix": "tiered-driver-posix", "sqlite": "tiered-driver-sqlite"}
BROKEN_DIST = "tiered-driver-broken-demo"


@pytest.fixture
def clean_env(monkeypatch):
    monkeypatch.delenv("TIERED_STRICT_PLUGINS", raising=False)
    monkeypatch.delenv("TIERED_DISABLE_PLUGINS", raising=False)


@pytest.fixture
def broken_plugin(tmp_path, monkeypatch, clean_env) -> pathlib.Path:
    """A throw-away distribution whose module fails to import, first on sys.path."""
    site = tmp_path / "site"
    info = site / "tiered_driver_broken_demo-0.9.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {BROKEN_DIST}\nVersion: 0.9\n")
    (info / "entry_points.txt").write_text("[tiered_core]\nbrokendemo = tiered_cli_broken_demo\n")
    (site / "tiered_cli_broken_demo.py").write_text("raise ImportError('needs libfoo >= 2')\n")
    monkeypatch.syspath_prepend(str(site))
    return site


def table_rows(text: str) -> dict[str, list[str]]:
    header, *rows = text.splitlines()
    assert header.split() == ["NAME", "DISTRIBUTION", "VERSION", "CAPABILITIES", "ALIASES"]
    return {row.split()[0]: row.split() for row in rows}


def test_table_lists_installed_drivers_with_distribution_and_version(capsys, clean_env):
    assert main(["drivers"]) == 0
    out, err = capsys.readouterr()
    rows = table_rows(out)
    for name, dist in INSTALLED.items():
        assert rows[name][1:3] == [dist, md.version(dist)]
    assert "org.apache.rocketmq.tieredstore.provider.PosixFileSegment" in rows["posix"][4]
    # sqlite stores atomically, posix may leave a prefix: the listing tells them apart.
    assert "atomic_write" in rows["sqlite"][3].split(",")
    assert "atomic_write" not in rows["posix"][3].split(",")
    assert err == ""


def test_json_is_a_list_of_driver_objects(capsys, clean_env):
    assert main(["drivers", "--json"]) == 0
    out, err = capsys.readouterr()
    listed = {d["name"]: d for d in json.loads(out)}
    registry = Registry(strict=True).load()
    for name, dist in INSTALLED.items():
        entry = listed[name]
        cls = registry.drivers[name].cls
        assert entry["distribution"] == dist and entry["version"] == md.version(dist)
        assert entry["aliases"] == list(cls.aliases)
        expected = cls.capabilities.as_dict()
        expected.pop("overridden")
        assert entry["capabilities"] == expected
        assert entry["options"] == cls.option_names()
    assert set(listed) == set(registry.drivers)
    assert err == ""


def test_broken_plugin_is_reported_once_on_stderr_and_listing_goes_on(capsys, broken_plugin):
    assert main(["drivers"]) == 0
    out, err = capsys.readouterr()
    assert set(INSTALLED) <= set(table_rows(out))
    assert BROKEN_DIST not in out
    assert err.count(BROKEN_DIST) == 1
    assert "needs libfoo >= 2" in err and "brokendemo" in err


def test_broken_plugin_with_json_keeps_stdout_parseable(capsys, broken_plugin):
    assert main(["drivers", "--json"]) == 0
    out, err = capsys.readouterr()
    assert {d["name"] for d in json.loads(out)} >= set(INSTALLED)
    assert BROKEN_DIST in err


def test_strict_mode_turns_a_broken_plugin_into_an_error(capsys, broken_plugin, monkeypatch):
    monkeypatch.setenv("TIERED_STRICT_PLUGINS", "1")
    assert main(["drivers"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "PLUGIN_LOAD" in err and BROKEN_DIST in err


def test_disabled_plugins_are_not_listed(capsys, monkeypatch, clean_env):
    monkeypatch.setenv("TIERED_DISABLE_PLUGINS", "sqlite")
    assert main(["drivers", "--json"]) == 0
    names = {d["name"] for d in json.loads(capsys.readouterr().out)}
    assert "sqlite" not in names and {"memory", "posix"} <= names


def test_capability_summary_lists_what_a_driver_has():
    caps = Capabilities(conditional_append=True, seal=False, list=True, persistent=False,
                        survives_process_exit=False, concurrent_paths=False, atomic_write=False,
                        max_write_size=4096).as_dict()
    assert capability_summary(caps) == "conditional_append,list,max_write_size=4096"
    nothing = dict.fromkeys(Capabilities.fields(), False)
    assert capability_summary(nothing) == "-"


def test_empty_registry_says_so():
    assert "no drivers installed" in format_table([])


def test_console_script():
    """The installed ``tiered`` script, as a user runs it."""
    script = pathlib.Path(sys.executable).parent / "tiered"
    assert script.exists(), f"console script missing: {script} (run `make setup`)"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERED_")}
    table = subprocess.run([str(script), "drivers"], env=env, capture_output=True, text=True, timeout=120)
    assert table.returncode == 0, table.stderr
    rows = table_rows(table.stdout)
    for name, dist in INSTALLED.items():
        assert rows[name][1:3] == [dist, md.version(dist)]
    listed = subprocess.run([str(script), "drivers", "--json"], env=env, capture_output=True, text=True,
                            timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert {d["name"] for d in json.loads(listed.stdout)} >= set(INSTALLED)


def test_console_script_reports_broken_plugin_from_pythonpath(tmp_path):
    site = tmp_path / "site"
    info = site / "tiered_driver_broken_demo-0.9.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {BROKEN_DIST}\nVersion: 0.9\n")
    (info / "entry_points.txt").write_text("[tiered_core]\nbrokendemo = tiered_cli_broken_demo_sub\n")
    (site / "tiered_cli_broken_demo_sub.py").write_text(textwrap.dedent("""
        from tiered_core import hookimpl

        @hookimpl
        def tiered_register_drivers(register):
            raise RuntimeError("misconfigured")
    """))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERED_")}
    env["PYTHONPATH"] = str(site)
    script = pathlib.Path(sys.executable).parent / "tiered"
    result = subprocess.run([str(script), "drivers"], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0
    assert set(INSTALLED) <= set(table_rows(result.stdout))
    # Reported once (not again as a Python warning or a log line).
    assert result.stderr.count(BROKEN_DIST) == 1 and "misconfigured" in result.stderr
