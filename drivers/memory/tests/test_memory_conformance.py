"""The conformance suite, by subclassing DriverConformance, for the memory driver.

Opened through the registry (its entry point), exactly as a user's config would.
"""

from __future__ import annotations

import uuid

import pytest

from tiered_conformance import DriverConformance
from tiered_core.plugins import open_driver


class TestMemoryConformance(DriverConformance):
    @pytest.fixture
    def driver(self):
        namespace = f"first-party-{uuid.uuid4().hex}"
        drv = open_driver("memory", namespace=namespace)
        yield drv
        drv.close()
        type(drv.innermost).drop_namespace(namespace)
