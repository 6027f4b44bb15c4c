"""The conformance suite against the minimal driver, and proof that its checks and
retries come from the layers, not from the driver.

Or, with no file at all: ``pytest --pyargs tiered_conformance --tiered-driver minimal``.
"""

import uuid

import pytest

from tiered_conformance import DriverConformance
from tiered_conformance.faults import Fault, FaultLayer
from tiered_core.errors import DriverError, IllegalParam, InvalidPath, SegmentClosed
from tiered_core.plugins import open_driver
from tiered_core.spi.layer import RetryPolicy, ValidatingLayer, backend_of, layered
from tiered_driver_minimal import MinimalDriver


@pytest.fixture
def store():
    name = f"test-{uuid.uuid4().hex}"
    yield name
    MinimalDriver.drop(name)


class TestMinimalConformance(DriverConformance):
    @pytest.fixture
    def driver(self, store):
        # Constructed directly, with no layers: the suite wraps it in the standard ones,
        # exactly as open_driver would.
        drv = MinimalDriver(store=store)
        yield drv
        drv.close()

    def test_the_suite_runs_the_driver_in_the_standard_layers(self, driver):
        assert isinstance(driver, ValidatingLayer) and isinstance(backend_of(driver), MinimalDriver)


def test_the_driver_checks_nothing_the_layers_do(store):
    raw = MinimalDriver(store=store)
    raw.write("../outside", 0, b"the raw driver takes anything")
    raw.read("../outside", 0, 3)
    drv = open_driver("minimal", store=store)
    assert backend_of(drv).store == store
    with pytest.raises(InvalidPath):
        drv.write("../outside", 0, b"x")
    with pytest.raises(IllegalParam):
        drv.read("fine", -1, 3)
    drv.close()
    with pytest.raises(SegmentClosed):
        drv.size("fine")


def test_the_layers_retry_for_the_driver(store):
    faults = FaultLayer(MinimalDriver(store=store))  # a backend that fails now and then
    drv = layered(faults, RetryPolicy(retries=2, base_delay=0.001))
    drv.write("seg", 0, b"abc")
    faults.inject(Fault.before(op="read"), Fault.before(op="read"))
    assert drv.read("seg", 0, 3) == b"abc"
    faults.inject(Fault.after())
    with pytest.raises(DriverError):
        drv.write("seg", 3, b"def")  # writes are never resent ...
    assert drv.size("seg") == 6  # ... so the bytes are there once
