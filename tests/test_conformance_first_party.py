"""The conformance suite, by subclassing DriverConformance, for the drivers in this repo.

Drivers are opened through the registry (entry points), exactly as a user's config
would; ``sqlite`` is the third-party example package (examples/tiered-driver-sqlite),
which ``make test`` installs. If it is missing the class is skipped locally and fails
under ``CI=true``.
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


class TestMemoryConformance(DriverConformance):
    @pytest.fixture
    def driver(self):
        namespace = f"first-party-{uuid.uuid4().hex}"
        drv = open_driver("memory", namespace=namespace)
        yield drv
        drv.close()
        type(drv).drop_namespace(namespace)


class TestPosixConformance(DriverConformance):
    @pytest.fixture
    def driver(self, tmp_path):
        drv = open_driver("posix", root=str(tmp_path / "root"))
        yield drv
        drv.close()


class TestSqliteConformance(DriverConformance):
    @pytest.fixture
    def driver(self, tmp_path):
        _require_installed("sqlite", "pip install -e examples/tiered-driver-sqlite")
        drv = open_driver("sqlite", database=str(tmp_path / "segments.sqlite3"))
        yield drv
        drv.close()
