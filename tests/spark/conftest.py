"""One local-mode SparkSession for every Spark test of a run, and small stores written through the flat API."""

from __future__ import annotations

import os
import sys

import pytest

from tiered_conformance.testing import ci_mode


def _unavailable(reason: str):
    # Under CI a missing Java or pyspark is a failure, never a skip.
    if ci_mode():
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def spark():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        _unavailable(f"Spark tests need pyspark and pyarrow (pip install -e '.[dev]'): {exc}")
    from tiered_core.errors import ConfigError
    from tiered_core.spark import check_java, get_session

    try:
        check_java()
    except ConfigError as exc:
        _unavailable(str(exc))
    session = get_session("local[2]", app_name="tiered-tests", conf={"spark.sql.shuffle.partitions": "4"})
    yield session
    session.stop()
