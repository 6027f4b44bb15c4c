"""The conformance suite, by subclassing DriverConformance, for the example third-party drivers.

Drivers are opened through the registry (entry points), exactly as a user's config
would: ``sqlite`` and ``minimal`` are the third-party example packages
(examples/tiered-driver-sqlite, examples/tiered-driver-minimal -- the latter with no
input checks or retries of its own), which ``make test`` installs. If one is missing its
class is skipped locally and fails under ``CI=true``. The first-party drivers run the
suite in their own distributions: drivers/<name>/tests.
"""

from __future__ import annotations

import uuid

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


class TestMinimalConformance(DriverConformance):
    @pytest.fixture
    def driver(self):
        _require_installed("minimal", "pip install -e examples/tiered-driver-minimal")
        store = f"first-party-{uuid.uuid4().hex}"
        drv = open_driver("minimal", store=store)
        yield drv
        drv.close()
        type(drv.innermost).drop(store)
