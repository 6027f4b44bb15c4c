"""The whole conformance suite (tiered_conformance) against the azure driver on Azurite.

Azurite enforces append positions and seals like the service, so no capability is
overridden: every suite case runs.
"""

from __future__ import annotations

import uuid

import pytest

from tiered_conformance import DriverConformance
from tiered_driver_azure import AzureDriver
from tiered_driver_azure.testing import AZURE_CONTAINER


class TestAzureConformance(DriverConformance):
    @pytest.fixture
    def driver(self, azurite):
        drv = AzureDriver(**azurite.driver_options(AZURE_CONTAINER, f"conformance-{uuid.uuid4().hex[:8]}"))
        yield drv
        drv.close()
