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


class TestGcsConformance(DriverConformance):
    @pytest.fixture
    def driver(self, fake_gcs):
        # A bucket per test: fake-gcs-server walks the whole bucket on each listing, so the
        # objects of the module's earlier tests would slow every later one (a listing of 20
        # objects: 0.85 ms of server CPU alone, 5.95 ms beside 2,000 others).
        bucket = f"conformance-{uuid.uuid4().hex[:12]}"
        fake_gcs.create_bucket(bucket)
        drv = GcsDriver(**fake_gcs.driver_options(bucket, "conformance"))
        yield drv
        drv.close()

    @pytest.fixture
    def capabilities(self, driver) -> Capabilities:
        caps = driver.capabilities
        assert caps.overridden.get("conditional_append") == EMULATOR_GAP
        return caps
