"""The standard driver layers (tiered_core.spi.layer): what open_driver wraps every driver in.

The conformance suite proves them per driver (validation in the contract tests, retries
over a failing backend in the fault tests); these tests pin the layers' own rules: the
stack open_driver builds, the retry policy (attempts, budget, jitter), what is retried
and what never is, the closed state, counting, and reopen keeping the stack.
"""

from __future__ import annotations

import array
import uuid

import pytest

from tiered_conformance.faults import Fault, FaultLayer
from tiered_core.errors import DriverError, IllegalParam, InvalidPath, NotFound, SegmentClosed
from tiered_core.plugins import open_driver
from tiered_core.spi.layer import (
    CountingLayer, DriverLayer, RetryLayer, RetryPolicy, ValidatingLayer, backend_of, find_layer, layered,
)
from tiered_driver_memory import MemoryDriver

QUICK = RetryPolicy(retries=3, base_delay=0.001, max_delay=0.002)


@pytest.fixture
def memory():
    namespace = f"layers-{uuid.uuid4().hex}"
    drv = MemoryDriver(namespace=namespace)
    yield drv
    MemoryDriver.drop_namespace(namespace)


@pytest.fixture
def failing(memory):
    """(faults, stack): a fault layer on the memory driver, in the standard layers."""
    faults = FaultLayer(memory)
    return faults, layered(faults, QUICK)


def test_open_driver_wraps_every_driver_in_validation_then_retry(tmp_path):
    for name, options in (("memory", {"namespace": uuid.uuid4().hex}), ("posix", {"root": str(tmp_path)}),
                          ("sqlite", {"database": str(tmp_path / "s.db")})):
        drv = open_driver(name, **options)
        assert type(drv) is ValidatingLayer and type(drv.inner) is RetryLayer
        assert drv.innermost is drv.inner.inner and not isinstance(drv.innermost, DriverLayer)
        assert drv.name == name and drv.capabilities == drv.innermost.capabilities
        assert drv.describe()["layers"] == ["ValidatingLayer", "RetryLayer"]
        assert layered(drv) is drv, "wrapping twice would retry twice"
        drv.close()


def test_the_driver_needs_no_checks_of_its_own(memory):
    memory.write("../escape", 0, b"the raw driver takes anything")  # the memory driver checks nothing
    drv = layered(memory)
    for call in (lambda: drv.write("../escape", 0, b"x"), lambda: drv.size("/abs"), lambda: drv.read("a/./b", 0, 1),
                 lambda: drv.exists(""), lambda: list(drv.list("../")), lambda: drv.write_if_absent("d/", b"x")):
        with pytest.raises(InvalidPath):
            call()
    with pytest.raises(IllegalParam):
        drv.write("ok", -1, b"x")
    with pytest.raises(IllegalParam):
        drv.read("ok", 0, 0)
    with pytest.raises(IllegalParam, match="bytes-like"):
        drv.write("ok", 0, "text is not bytes")  # type: ignore[arg-type]
    with pytest.raises(IllegalParam, match="needs data"):
        drv.write_if_absent("ok", b"")


def test_paths_are_normalized_and_any_byte_buffer_is_written(memory):
    drv = layered(memory)
    drv.write("a//b", 0, memoryview(b"..xy..")[2:4])
    drv.write("a/b", 2, bytearray(b"z"))
    drv.write("a/b", 3, array.array("H", [0x4141]))  # two bytes, one element
    assert memory.read("a/b", 0, 5) == b"xyzAA"
    assert drv.read("a//b", 0, 5) == b"xyzAA"


def test_closed_driver_refuses_calls_and_closes_once(memory):
    counting = CountingLayer(memory)
    closes = []
    memory.close = lambda: closes.append(1)  # type: ignore[method-assign]
    drv = layered(counting)
    drv.write("x", 0, b"1")
    drv.close()
    drv.close()
    assert closes == [1]
    for call in (lambda: drv.size("x"), lambda: drv.write("x", 1, b"2"), lambda: list(drv.list(""))):
        with pytest.raises(SegmentClosed):
            call()
    assert counting.calls["write"] == 1 and "size" not in counting.calls


def test_idempotent_calls_are_retried_with_backoff(failing):
    faults, stack = failing
    stack.write("seg", 0, b"abc")
    faults.inject(Fault.before(op="read"), Fault.before(op="read"), Fault.after(op="seal"))
    assert stack.read("seg", 0, 3) == b"abc"
    stack.seal("seg")
    assert stack.is_sealed("seg") and faults.pending == 0


def test_retries_stop_at_the_attempt_count_and_say_so(failing):
    faults, stack = failing
    stack.write("seg", 0, b"abc")
    faults.inject(*[Fault.before(op="size")] * 10)
    with pytest.raises(DriverError) as info:
        stack.size("seg")
    assert faults.pending == 10 - (QUICK.retries + 1)
    assert info.value.attempts == QUICK.retries + 1 and "gave up after 4 attempts" in str(info.value)


def test_retries_stop_within_the_time_budget(memory):
    faults = FaultLayer(memory, unavailable={"exists"})
    slept: list[float] = []
    stack = RetryLayer(faults, RetryPolicy(retries=100, base_delay=1.0, max_delay=4.0, budget=10.0),
                       sleep=slept.append, clock=lambda: sum(slept))  # time passes only while sleeping
    with pytest.raises(DriverError) as info:
        stack.exists("x")
    assert 2 <= len(slept) < 10 and sum(slept) <= 10.0
    assert info.value.attempts == len(slept) + 1


def test_backoff_is_exponential_jittered_and_capped():
    policy = RetryPolicy(base_delay=0.1, max_delay=1.0)
    assert policy.delay(1, 0.0) == pytest.approx(0.05) and policy.delay(1, 0.999) < 0.1
    assert policy.delay(3, 0.0) == pytest.approx(0.2)
    assert policy.delay(30, 0.999) < 1.0
    with pytest.raises(ValueError):
        RetryPolicy(retries=-1)


def test_permanent_failures_and_typed_errors_are_not_retried(failing):
    faults, stack = failing
    faults.inject(Fault.before(op="size", retryable=False), Fault.before(op="size"))
    with pytest.raises(DriverError):
        stack.size("seg")
    assert faults.pending == 1
    faults.clear()
    counting = CountingLayer(faults)
    with pytest.raises(NotFound):
        layered(counting, QUICK).read("absent", 0, 1)
    assert counting.calls["read"] == 1


def test_a_write_is_never_sent_twice(failing):
    faults, stack = failing
    faults.inject(Fault.before(), Fault.after())
    with pytest.raises(DriverError):
        stack.write("seg", 0, b"first")
    assert stack.size("seg") == 0 and faults.pending == 1, "a failed write is handed back, not retried"
    with pytest.raises(DriverError):
        stack.write("seg", 0, b"first")
    assert stack.read("seg", 0, stack.size("seg")) == b"first"


def test_write_if_absent_after_a_lost_answer_is_true_only_for_its_own_bytes(failing):
    faults, stack = failing
    faults.inject(Fault.after(op="write_if_absent"))
    assert stack.write_if_absent("claim", b"store-1") is True
    stack.write("taken", 0, b"store-2")
    faults.inject(Fault.after(op="write_if_absent"))  # lands nothing: the object is there already
    assert stack.write_if_absent("taken", b"store-1") is False
    assert stack.write_if_absent("claim", b"store-1") is False  # no failure: a plain refusal


def test_the_driver_names_its_retry_policy(memory):
    own = RetryPolicy(retries=1, base_delay=0.0)
    memory.retry_policy = own
    stack = layered(CountingLayer(memory))
    assert stack.retry_policy is own and find_layer(stack, RetryLayer).policy is own
    assert layered(MemoryDriver(namespace=memory.namespace), QUICK).retry_policy is QUICK


def test_counting_layer_counts_calls_errors_and_bytes(memory):
    counting = CountingLayer(memory)
    drv = layered(counting)
    drv.write("a", 0, b"12345")
    drv.write("a", 5, memoryview(b"678"))
    assert drv.read("a", 2, 4) == b"3456"
    with pytest.raises(NotFound):
        drv.read("b", 0, 1)
    assert counting.snapshot() == {"calls": {"write": 2, "read": 2}, "errors": {"read": 1},
                                   "bytes": {"write": 8, "read": 4}}
    counting.reset()
    assert counting.snapshot() == {"calls": {}, "errors": {}, "bytes": {}}


def test_reopen_keeps_the_layers(memory):
    stack = layered(CountingLayer(memory), QUICK)
    stack.write("x", 0, b"shared")
    again = stack.reopen()
    assert [type(d).__name__ for d in _stack(again)] == ["ValidatingLayer", "RetryLayer", "CountingLayer",
                                                         "MemoryDriver"]
    assert find_layer(again, RetryLayer).policy is QUICK
    assert backend_of(again) is not memory and again.read("x", 0, 6) == b"shared"
    stack.close()
    assert again.size("x") == 6, "the reopened stack is open on its own"


def _stack(driver):
    while True:
        yield driver
        if not isinstance(driver, DriverLayer):
            return
        driver = driver.inner


class _BackendWithAToken(MemoryDriver):
    """A driver drill's broken drivers, in one: its errors quote its secret option, a read of
    ``short`` returns fewer bytes than asked, a size of ``raw`` raises a bare KeyError."""

    name = "layers-test-token"
    secret_options = frozenset({"token"})

    def __init__(self, *, namespace: str = "default", token: str = "") -> None:
        super().__init__(namespace=namespace)
        self.token = token

    def read(self, path, position, length):
        if path == "short":
            return b"abc"
        raise DriverError(f"HTTP 403 from https://backend/?token={self.token}: denied", retryable=False, path=path,
                          url=f"https://backend/?token={self.token}")

    def size(self, path):
        if path == "raw":
            raise KeyError(path)
        return super().size(path)


def test_a_secret_in_a_drivers_error_is_replaced_and_the_error_says_so():
    """A driver drill: `tiered put --dispatch` printed a driver's error that quoted its
    declared secret option, while `tiered drivers --config` showed it as ***."""
    drv = layered(_BackendWithAToken(namespace=f"layers-{uuid.uuid4().hex}", token="SECRET-TOKEN-123"), QUICK)
    with pytest.raises(DriverError) as info:
        drv.read("seg", 0, 5)
    text = f"{info.value} {info.value!r} {info.value.context}"
    assert "SECRET-TOKEN-123" not in text and "token=***" in str(info.value)
    assert info.value.secrets_redacted is True and info.value.__cause__ is None


def test_a_short_read_and_a_raw_exception_are_named_as_the_drivers_bugs():
    """A driver drill: a read returning fewer bytes than asked was blamed on another store
    taking the prefix over, and a driver's KeyError was printed as a bug of tiered-store."""
    drv = layered(_BackendWithAToken(namespace=f"layers-{uuid.uuid4().hex}"), QUICK)
    with pytest.raises(DriverError, match=r"read of 'short' at 0 returned 3 of the 5 bytes asked") as info:
        drv.read("short", 0, 5)
    assert info.value.retryable is False
    with pytest.raises(DriverError, match=r"driver 'layers-test-token': size of 'raw' raised KeyError: 'raw'") as info:
        drv.size("raw")
    assert info.value.retryable is False and "tiered conformance layers-test-token" in str(info.value)
    assert drv.size("other") == 0  # the rest of the driver still answers
