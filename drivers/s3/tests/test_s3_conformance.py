"""The whole conformance suite (tiered_conformance) against the s3 driver on moto's server.

moto 5.2.5 enforces every precondition the driver's guarantees rest on, so the instance
opened with ``emulated=True`` declares no gap and every case runs: the contract, the
fault suite and the state machine.
"""

from __future__ import annotations

import uuid

import pytest

from tiered_conformance import DriverConformance
from tiered_core.spi import Capabilities
from tiered_driver_s3 import EMULATOR_GAP, S3Driver
from tiered_driver_s3.testing import S3_BUCKET


class TestS3Conformance(DriverConformance):
    @pytest.fixture
    def driver(self, moto_s3):
        drv = S3Driver(**moto_s3.driver_options(S3_BUCKET, f"conformance-{uuid.uuid4().hex[:8]}"))
        yield drv
        drv.close()

    @pytest.fixture
    def capabilities(self, driver) -> Capabilities:
        caps = driver.capabilities
        assert EMULATOR_GAP is None and not caps.overridden, "moto enforces every precondition: no gap"
        assert caps.conditional_append and caps.create_if_absent and caps.atomic_write
        return caps
