"""The whole conformance suite (tiered_conformance) against the azure driver on Azurite.

Azurite enforces append positions and seals like the service, so no capability is
overridden: every suite case runs.
"""

from __future__ import annotations

import uuid

import pytest

from tiered_conformance import DriverConformance
from tiered_core.testing.pytest_emulators import AZURE_CONTAINER, azurite  # noqa: F401  (fixture)
from tiered_driver_azure import AzureDriver


class TestAzureConformance(DriverConformance):
    @pytest.fixture
    def driver(self, azurite):  # noqa: F811
        drv = AzureDriver(container=AZURE_CONTAINER, prefix=f"conformance-{uuid.uuid4().hex[:8]}",
                          connection_string=azurite.connection_string)
        yield drv
        drv.close()
