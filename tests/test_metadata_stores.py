"""The metadata store contract (tiered_conformance.MetadataStoreConformance, the suite a
third-party store runs too) against every built-in store, SQLite and JSON.

The stores are looked up by name through the plugin registry, so these tests also show
that the core's built-in plugin registers them; the last tests run the shipped suite the
way a third party does, through the pytest plugin, and check that it can fail.
"""

from __future__ import annotations

import subprocess
import textwrap

import pytest

from tiered_conformance import MetadataStoreConformance


class TestSqliteStore(MetadataStoreConformance):
    store_name = "sqlite"


class TestJsonStore(MetadataStoreConformance):
    store_name = "json"


# -- the suite as a third party runs it ---------------------------------------------------


@pytest.fixture
def pytest_run(tmp_path, subprocess_env, python_exe):
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([python_exe, "-m", "pytest", "-p", "no:cacheprovider", *args],
                              cwd=tmp_path, env=subprocess_env, capture_output=True, text=True, timeout=600)

    return run


@pytest.mark.parametrize("store", ["sqlite", "DefaultMetadataStore"])  # a name, an alias declared by the store
def test_suite_runs_by_name_through_the_pytest_plugin(pytest_run, store):
    proc = pytest_run("--pyargs", "tiered_conformance", "--tiered-metadata-store", store,
                      "-k", "reopen_reads_back or unknown_options", "-q", "-rs")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout
    assert "deselected" in proc.stdout  # the driver suite was not asked for


def test_unknown_metadata_store_is_a_usage_error(pytest_run):
    proc = pytest_run("--pyargs", "tiered_conformance", "--tiered-metadata-store", "redis", "-q")
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR
    assert "no metadata store named 'redis'" in proc.stderr and "sqlite" in proc.stderr


BROKEN_STORE = '''
from tiered_core.metadata import JsonMetadataStore


class OffByOneStore(JsonMetadataStore):
    """Hands out topic ids from 1 (the contract says 0)."""

    name = "off-by-one"

    def add_topic(self, topic, reserve_time=-1):
        if self.max_topic_id < 0:
            self.set_max_topic_id(0)
        return super().add_topic(topic, reserve_time)
'''


def test_suite_catches_a_broken_store_given_as_module_class(pytest_run, tmp_path):
    (tmp_path / "broken_meta_store.py").write_text(BROKEN_STORE)
    proc = pytest_run("--pyargs", "tiered_conformance", "--tiered-metadata-store", "broken_meta_store:OffByOneStore",
                      "-k", "topic_ids_start_at_zero or reopen_reads_back", "-q", "--rootdir", str(tmp_path))
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED, proc.stdout + proc.stderr
    assert "1 failed, 1 passed" in proc.stdout
    assert "test_topic_ids_start_at_zero_and_add_returns_the_existing_entry" in proc.stdout


def test_subclass_without_a_store_fails_clearly(pytest_run, tmp_path):
    (tmp_path / "test_mine.py").write_text(textwrap.dedent("""
        from tiered_conformance import MetadataStoreConformance

        class TestMine(MetadataStoreConformance):
            pass
    """))
    proc = pytest_run("test_mine.py", "-q", "-k", "test_reopen_reads_back_everything")
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED
    assert "pass --tiered-metadata-store NAME" in proc.stdout
