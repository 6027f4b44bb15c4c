"""The whole conformance suite (tiered_conformance) against the gcs driver on fake-gcs-server.

The emulator's gap is declared, not hidden: it does not enforce ``ifGenerationMatch``, so
the driver instance reports ``conditional_append=False`` with that reason and exactly the
suite cases needing it skip, saying why.
"""

from __future__ import annotations

import uuid

import pytest

from tiered_conformance import DriverConformance
from tiered_core.spi import Capabilities
from tiered_driver_gcs import EMULATOR_GAP, GcsDriver
from tiered_driver_gcs.testing import GCS_BUCKET


class TestGcsConformance(DriverConformance):
    @pytest.fixture
    def driver(self, fake_gcs):
        drv = GcsDriver(**fake_gcs.driver_options(GCS_BUCKET, f"conformance-{uuid.uuid4().hex[:8]}"))
        yield drv
        drv.close()

    @pytest.fixture
    def capabilities(self, driver) -> Capabilities:
        caps = driver.capabilities
        assert caps.overridden.get("conditional_append") == EMULATOR_GAP
        return caps
