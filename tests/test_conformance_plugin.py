"""The tiered_conformance pytest plugin: options, errors, capability overrides, harmlessness.

Each case runs a child pytest, as a user would, from a scratch directory.
"""

from __future__ import annotations

import subprocess
import textwrap

import pytest


@pytest.fixture
def pytest_run(tmp_path, subprocess_env, python_exe):
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([python_exe, "-m", "pytest", "-p", "no:cacheprovider", *args],
                              cwd=tmp_path, env=subprocess_env, capture_output=True, text=True, timeout=600)

    return run


def test_suite_without_driver_is_a_usage_error(pytest_run):
    proc = pytest_run("--pyargs", "tiered_conformance", "-q")
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR
    assert "pass --tiered-driver NAME" in proc.stderr


def test_unknown_driver_is_a_usage_error_listing_installed(pytest_run):
    proc = pytest_run("--pyargs", "tiered_conformance", "--tiered-driver", "no-such-driver", "-q")
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR
    assert "no-such-driver" in proc.stderr and "memory" in proc.stderr


def test_unknown_driver_option_is_named(pytest_run):
    proc = pytest_run("--pyargs", "tiered_conformance", "--tiered-driver", "memory",
                      "--tiered-option", "colour=blue", "-q")
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR
    assert "'colour'" in proc.stderr


def test_bad_capability_override_is_named(pytest_run):
    proc = pytest_run("--pyargs", "tiered_conformance", "--tiered-driver", "memory",
                      "--tiered-capability", "teleport=true", "-q")
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR
    assert "teleport" in proc.stderr


def test_capability_override_skips_with_recorded_reason(pytest_run):
    proc = pytest_run("--pyargs", "tiered_conformance", "--tiered-driver", "memory",
                      "--tiered-capability", "conditional_append=false:emulator ignores preconditions",
                      "-k", "conditional_append_race", "-q", "-rs")
    assert proc.returncode == 0, proc.stdout
    assert "1 skipped" in proc.stdout
    assert "needs capability 'conditional_append'" in proc.stdout
    assert "overridden: emulator ignores preconditions" in proc.stdout


def test_user_option_overrides_environment(pytest_run, tmp_path):
    root = tmp_path / "chosen-root"
    proc = pytest_run("--pyargs", "tiered_conformance", "--tiered-driver", "posix",
                      "--tiered-option", f"root={root}", "--tiered-option", "fsync=false",
                      "-k", "test_fresh_instance_sees_same_bytes", "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout
    assert root.is_dir(), "the driver must have used the --tiered-option root"


def test_subclass_without_driver_fixture_errors_clearly(pytest_run, tmp_path):
    (tmp_path / "test_mine.py").write_text(textwrap.dedent("""
        from tiered_conformance import DriverConformance

        class TestMine(DriverConformance):
            pass
    """))
    proc = pytest_run("test_mine.py", "-q", "-k", "test_read_returns_bytes")
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED
    assert "pass --tiered-driver NAME" in proc.stdout


def test_plugin_is_harmless_for_unrelated_projects(pytest_run, tmp_path):
    # A project with its own `driver` and `capabilities` fixtures is not affected.
    (tmp_path / "conftest.py").write_text(textwrap.dedent("""
        import pytest

        @pytest.fixture
        def driver():
            return "selenium-ish"

        @pytest.fixture
        def capabilities():
            return {"browser": "none"}
    """))
    (tmp_path / "test_other.py").write_text(textwrap.dedent("""
        def test_own_fixtures(driver, capabilities):
            assert driver == "selenium-ish" and capabilities == {"browser": "none"}
    """))
    proc = pytest_run("-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout
    assert "tiered-conformance" not in proc.stdout
