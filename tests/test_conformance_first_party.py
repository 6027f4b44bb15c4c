"""The conformance suite, by subclassing DriverConformance, for the example third-party driver.

``sqlite`` (examples/tiered-driver-sqlite, which ``make test`` installs) is opened through
the registry (its entry point), exactly as a user's config would. If it is missing the
class is skipped locally and fails under ``CI=true``. The first-party drivers run the
suite in their own distributions: drivers/<name>/tests.
"""

from __future__ import annotations

import pytest

from tiered_conformance import DriverConformance
from tiered_core.plugins import get_registry, open_driver
from tiered_conformance.testing import ci_mode


def _require_installed(name: str, hint: str) -> None:
    if name in get_registry().drivers:
        return
    message = f"driver {name!r} is not installed ({hint})"
    if ci_mode():
        pytest.fail(message + "; CI=true requires it", pytrace=False)
    pytest.skip(message)


class TestSqliteConformance(DriverConformance):
    @pytest.fixture
    def driver(self, tmp_path):
        _require_installed("sqlite", "pip install -e examples/tiered-driver-sqlite")
        drv = open_driver("sqlite", database=str(tmp_path / "segments.sqlite3"))
        yield drv
        drv.close()
