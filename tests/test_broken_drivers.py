"""The conformance suite must be able to fail: run it against deliberately broken drivers.

Each run is the real command a third party uses (``python -m pytest --pyargs
tiered_conformance --tiered-driver module:Class``) in a child process; outcomes come
from its JUnit XML. A broken driver must make the run fail *and* fail the tests aimed
at its bug; the memory driver, run the same way, must pass, which proves the harness.
"""

from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

#: Broken driver class in tests/broken_drivers.py -> tests that must fail for it. An
#: entry without "[...]" matches any parametrization of that test.
EXPECTED_FAILURES = {
    "IgnoresPositionDriver": {
        "test_write_at_wrong_position_raises[ahead]",
        "test_write_at_wrong_position_raises[behind]",
        "test_conditional_append_race",
        "test_commit_fails_when_backend_object_changed",
    },
    "StaleSizeDriver": {
        "test_size_after_every_write",
        "test_1000_small_writes",
        "test_round_trip_single_write",
        "test_segment_state_machine",
    },
    "ReadsPastEndDriver": {
        "test_read_past_end_raises[at-end]",
        "test_read_past_end_raises[straddles-end]",
        "test_read_of_empty_object_raises",
    },
    "NoopSealDriver": {
        "test_write_after_seal_raises",
        "test_seal_empty_object",
        "test_seal_reaches_backend",
    },
    "LosesTailDriver": {
        "test_round_trip_single_write[7B]",
        "test_round_trip_many_unaligned_writes",
        "test_64_mib_over_many_writes",
        "test_commit_makes_bytes_readable_in_order",
        "test_segment_state_machine",
    },
}

#: Keeps each run short; the stateful test still runs.
HYPOTHESIS_EXAMPLES = "10"


@dataclass
class SuiteRun:
    returncode: int
    outcomes: dict[str, str]  # "Class::test[param]" -> passed / failed / skipped
    output: str

    def with_outcome(self, outcome: str) -> set[str]:
        return {name for name, got in self.outcomes.items() if got == outcome}

    def failed_names(self) -> set[str]:
        return {name.split("::", 1)[1] for name in self.with_outcome("failed")}


def _outcomes(junit: Path) -> dict[str, str]:
    out = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        tags = {child.tag for child in case}
        if tags & {"failure", "error"}:
            out[name] = "failed"
        elif "skipped" in tags:
            out[name] = "skipped"
        else:
            out[name] = "passed"
    return out


@pytest.fixture
def run_suite(tmp_path, subprocess_env, python_exe):
    """Run the whole suite against a driver in a child pytest; return a SuiteRun."""

    def run(driver: str) -> SuiteRun:
        junit = tmp_path / "junit.xml"
        proc = subprocess.run(
            [python_exe, "-m", "pytest", "--pyargs", "tiered_conformance", "--tiered-driver", driver,
             "-q", "-p", "no:cacheprovider", "--tiered-hypothesis-examples", HYPOTHESIS_EXAMPLES,
             "-o", "faulthandler_timeout=120",
             f"--junitxml={junit}"],
            cwd=tmp_path, env=subprocess_env, capture_output=True, text=True, timeout=600,
        )
        output = proc.stdout + proc.stderr
        assert junit.exists(), f"the suite did not run for {driver}:\n{output[-3000:]}"
        return SuiteRun(proc.returncode, _outcomes(junit), output)

    return run


@pytest.mark.parametrize("broken", sorted(EXPECTED_FAILURES))
def test_suite_catches_broken_driver(run_suite, broken):
    run = run_suite(f"tests.broken_drivers:{broken}")
    assert run.returncode == 1, f"the suite must fail for {broken}:\n{run.output[-3000:]}"
    failed = run.failed_names()
    for expected in EXPECTED_FAILURES[broken]:
        if "[" in expected:
            hit = expected in {name.split("::")[-1] for name in failed}
        else:
            hit = any(name.split("::")[-1].split("[")[0] == expected for name in failed)
        assert hit, f"{broken}: {expected} should have failed; failed were {sorted(failed)}"
    # The suite pinpoints the bug rather than crashing wholesale.
    assert run.with_outcome("passed"), f"{broken}: nothing passed:\n{run.output[-3000:]}"


def test_suite_passes_for_memory_driver(run_suite):
    run = run_suite("memory")
    assert run.returncode == 0, run.output[-3000:]
    assert not run.with_outcome("failed")
    assert len(run.with_outcome("passed")) >= 40
    areas = {name.split("::")[0] for name in run.with_outcome("passed")}
    assert areas >= {"TestDriverContract", "TestFileSegment", "TestFaults", "TestSegmentStateMachine"}
