"""The conformance suite, by subclassing DriverConformance, for the posix driver.

Opened through the registry (its entry point), exactly as a user's config would.
"""

from __future__ import annotations

import pytest

from tiered_conformance import DriverConformance
from tiered_core.plugins import open_driver


class TestPosixConformance(DriverConformance):
    @pytest.fixture
    def driver(self, tmp_path):
        drv = open_driver("posix", root=str(tmp_path / "root"))
        yield drv
        drv.close()
