"""The request hook point (spi) and the test kit's RequestProbe installed on it.

The drivers' own tests prove the probe on real requests against the emulators; these pin
the split: the production point only forwards to what is installed, counting is the
kit's, and the probe finds the point of a driver wrapped in the standard layers.
"""

from __future__ import annotations

import threading
import uuid

import pytest

from tiered_conformance.request_probe import RequestProbe
from tiered_core.errors import DriverError
from tiered_core.spi.layer import RetryPolicy, layered
from tiered_core.spi.transport import LOST_ANSWER, RequestHookPoint
from tiered_driver_memory import MemoryDriver


class _Hooked:
    """A stand-in for an HTTP driver: it owns a hook point and sends one request per call."""

    def __init__(self) -> None:
        self.transport = RequestHookPoint()

    def send(self, what: str) -> int | str | None:
        return self.transport.before("GET", what)


class _HookedMemory(MemoryDriver):
    """The memory backend with each read passing a hook point, as an HTTP driver's GET does."""

    def __init__(self, **options) -> None:
        super().__init__(**options)
        self.transport = RequestHookPoint()

    def read(self, path: str, position: int, length: int) -> bytes:
        verdict = self.transport.before("GET", f"read {path!r}")
        if verdict is not None:
            raise DriverError(f"memory: read {path!r} failed: HTTP {verdict}", retryable=True, status=verdict)
        return super().read(path, position, length)


def test_the_point_forwards_to_the_installed_hook_and_counts_nothing():
    point = RequestHookPoint()
    assert point.before("GET", "x") is None
    assert not hasattr(point, "requests") and not hasattr(point, "__dict__"), "counting is the test kit's"
    point.hook = lambda method, what: 503 if what == "bad" else None
    assert point.before("GET", "bad") == 503 and point.before("GET", "ok") is None
    assert isinstance(RequestHookPoint.answer_lost(), ConnectionResetError)


def test_the_probe_counts_every_request_and_runs_the_test_hook():
    driver = _Hooked()
    probe = RequestProbe.install(driver)
    assert driver.send("a") is None and probe.requests == 1
    probe.hook = lambda method, what: LOST_ANSWER if what == "b" else 500
    assert driver.send("b") == LOST_ANSWER and driver.send("c") == 500
    assert probe.requests == 3, "failed and lost requests count too"
    probe.uninstall()
    assert driver.send("d") is None and probe.requests == 3 and driver.transport.hook is None


def test_the_probe_counts_exactly_from_many_threads():
    driver = _Hooked()
    probe = RequestProbe.install(driver)
    threads = [threading.Thread(target=lambda: [driver.send("x") for _ in range(500)]) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert probe.requests == 8 * 500


def test_the_probe_finds_the_point_under_the_standard_layers_and_sees_their_retries():
    namespace = f"probe-{uuid.uuid4().hex}"
    driver = _HookedMemory(namespace=namespace)
    try:
        stack = layered(driver, RetryPolicy(retries=3, base_delay=0.001, max_delay=0.002))
        probe = RequestProbe.install(stack)
        assert probe.point is driver.transport
        stack.write("seg", 0, b"abc")
        failures = iter([503, 503])
        probe.hook = lambda method, what: next(failures, None)
        assert stack.read("seg", 0, 3) == b"abc"
        assert probe.requests == 3, "two failed attempts retried by the layer, then the one that read"
    finally:
        MemoryDriver.drop_namespace(namespace)


def test_a_driver_without_a_hook_point_is_refused_by_name():
    namespace = f"probe-{uuid.uuid4().hex}"
    try:
        with pytest.raises(TypeError, match="MemoryDriver has no request hook point"):
            RequestProbe.install(MemoryDriver(namespace=namespace))
    finally:
        MemoryDriver.drop_namespace(namespace)
