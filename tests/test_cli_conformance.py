"""``tiered conformance NAME``: the per-area table and the exit status."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest


@pytest.fixture
def tiered(tmp_path, subprocess_env, python_exe):
    exe = Path(python_exe).with_name("tiered")

    def run(*args: str) -> subprocess.CompletedProcess:
        cmd = [str(exe)] if exe.exists() else [python_exe, "-c", "import sys; from tiered_core.cli import main; sys.exit(main())"]
        return subprocess.run([*cmd, "conformance", *args], cwd=tmp_path, env=subprocess_env,
                              capture_output=True, text=True, timeout=600)

    return run


def _table(stdout: str) -> dict[str, tuple[int, int, int]]:
    rows = {}
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("area "))
    for line in lines[start + 1:]:
        parts = line.rsplit(None, 3)
        if len(parts) != 4 or not all(p.isdigit() for p in parts[1:]):
            break
        rows[parts[0].strip()] = tuple(int(p) for p in parts[1:])
    return rows


def test_memory_passes_with_a_row_per_area(tiered):
    proc = tiered("memory", "--hypothesis-examples", "10")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    rows = _table(proc.stdout)
    for area in ("raw driver contract", "FileSegment", "faults", "stateful"):
        passed, failed, _ = rows[area]
        assert passed > 0 and failed == 0, (area, rows[area])
    assert rows["total"][0] >= 40
    assert "result: PASS" in proc.stdout


def test_broken_driver_exits_1_naming_failures(tiered):
    proc = tiered("tests.broken_drivers:NoopSealDriver", "-k", "seal")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr
    rows = _table(proc.stdout)
    assert rows["raw driver contract"][1] > 0
    assert "FAILED test_driver_contract.py::TestDriverContract::test_write_after_seal_raises" in proc.stdout
    assert "result: FAIL" in proc.stdout


def test_capability_override_is_reported(tiered):
    proc = tiered("memory", "--capability", "seal=false:pretend gap", "-k", "test_write_after_seal_raises")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert "capability seal=False overridden: pretend gap" in proc.stdout
    assert _table(proc.stdout)["raw driver contract"] == (0, 0, 1)


@pytest.mark.parametrize("args, needle", [
    (("no-such-driver",), "no driver named 'no-such-driver'"),
    (("memory", "--option", "colour=blue"), "'colour'"),
    (("memory", "--capability", "seal=perhaps"), "'seal'"),
])
def test_bad_input_exits_2(tiered, args, needle):
    proc = tiered(*args)
    assert proc.returncode == 2
    assert needle in proc.stderr


@pytest.mark.parametrize("option", ["root=", "root=  "])
def test_an_empty_option_value_is_refused_before_the_suite_runs(tiered, option):
    """Issue 18: `--option root=` ran the suite and reported 117 failures."""
    proc = tiered("posix", "--option", option, "--json")
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    error = json.loads(proc.stdout)["error"]
    assert (error["code"], error["option"]) == ("INVALID_OPTION", "root")
    assert "--option root= has an empty value" in error["message"]
    assert "passed" not in proc.stderr and "failed" not in proc.stderr  # pytest never started
