"""``tiered conformance NAME --option <location>`` refuses a location that holds a store.

An operator drill: ``tiered conformance posix -o root=<a live store's tier prefix>`` ran and
wrote its test objects (and left empty directories) into the store's own prefix. The
location is looked at through the driver's ``list`` before the suite runs: an owner record
at or below it, or in a parent of it (the location lies inside a store's prefix), is
refused with exit 2 and nothing is written.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tiered_core.cli import main
from tiered_core.flat.ownership import OWNER_DIR


def snapshot(root: Path) -> set[str]:
    """Every file and directory under ``root``."""
    return {os.path.relpath(os.path.join(d, n), root) for d, dirs, files in os.walk(root) for n in dirs + files}


@pytest.fixture
def live_store(tmp_path, monkeypatch) -> tuple[Path, Path]:
    """``(store_path, tier prefix directory)`` of a store holding one dispatched message."""
    monkeypatch.chdir(tmp_path)
    conf = tmp_path / "t.toml"
    conf.write_text(f'[tiered]\nstore_path = "{tmp_path / "s"}"\n')
    assert main(["put", "--config", str(conf), "--topic", "t", "--body", "x", "--dispatch"]) == 0
    prefix = next(Path(d) for d, dirs, _ in os.walk(tmp_path / "s" / "tiered") if OWNER_DIR in dirs)
    return tmp_path / "s", prefix


@pytest.mark.parametrize("where", ["prefix", "tier root", "store_path", "inside the prefix", "deep inside"])
def test_a_location_holding_or_inside_a_store_is_refused(live_store, capsys, where):
    store_path, prefix = live_store
    location = {"prefix": prefix, "tier root": store_path / "tiered", "store_path": store_path,
                "inside the prefix": prefix / "sub", "deep inside": prefix / "a" / "b"}[where]
    before = snapshot(store_path)
    capsys.readouterr()
    assert main(["conformance", "posix", "--option", f"root={location}", "-k", "write", "--json"]) == 2
    out = capsys.readouterr()
    error = json.loads(out.out)["error"]
    assert error["code"] == "INVALID_PATH" and error["option"] == "--option", error
    assert OWNER_DIR in error["message"] and str(location) in error["message"]
    assert "lies inside" in error["message"] if "inside" in where else "holds a store's owner record" in error["message"]
    assert snapshot(store_path) == before  # nothing written: no tiered-conformance directory
    assert "passed" not in out.err  # pytest never started


def test_the_refusal_in_text_mode_names_the_location(live_store, capsys):
    _, prefix = live_store
    assert main(["conformance", "posix", "-o", f"root={prefix}", "-k", "write"]) == 2
    err = capsys.readouterr().err
    assert "[INVALID_PATH]" in err and str(prefix) in err and "nothing was written" in err


def test_an_empty_location_next_to_a_store_still_runs(live_store, tmp_path, subprocess_env, python_exe):
    """A sibling of the store (and the suite's own throw-away location) are not refused."""
    store_path, _ = live_store
    before = snapshot(store_path)
    exe = Path(python_exe).with_name("tiered")
    cmd = [str(exe)] if exe.exists() else [python_exe, "-c", "import sys; from tiered_core.cli import main; sys.exit(main())"]
    proc = subprocess.run([*cmd, "conformance", "posix", "-o", f"root={tmp_path / 'elsewhere'}", "-k",
                           "test_write_after_seal_raises"], cwd=tmp_path, env=subprocess_env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "result: PASS" in proc.stdout
    assert snapshot(store_path) == before


def test_parent_locations_of_object_store_prefixes_and_urls():
    from tiered_core.cli.conformance import _parent_locations

    class Bucketed:
        location_options = ("bucket", "prefix")

    class Url:
        location_options = ("url",)

    got = [o["prefix"] for o in _parent_locations(Bucketed, {"bucket": "b", "prefix": "c/broker-a/sub/"})]
    assert got == ["c/broker-a", "c", ""]
    got = [o["url"] for o in _parent_locations(Url, {"url": "s3://bkt/c/broker-a/sub"})]
    assert got == ["s3://bkt/c/broker-a", "s3://bkt/c", "s3://bkt"]
