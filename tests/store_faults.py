"""A driver for the message-store tests: a real driver under the fault and counting layers.

:class:`FlakyDriver` opens a real driver by name (``inner`` + ``inner_options``) and
stacks ``CountingLayer(FaultLayer(driver))`` on it -- the one fault layer of
:mod:`tiered_conformance.faults` and the counting layer of :mod:`tiered_core.spi.layer`.
Opened by a store, it is itself wrapped in the standard layers, so the faults play a
failing backend *under* the retry layer, as a real one would fail. With
``write_failure_rate`` > 0 the fault layer fails that share of writes (and of
``write_if_absent`` calls), choosing at random (seeded) how:

* ``before`` - nothing lands, a retryable :class:`~tiered_core.errors.DriverError`;
* ``after`` - every byte lands, then the answer is lost (retryable DriverError);
* ``partial`` - a strict prefix lands (through the inner driver's own ``write``), then
  a retryable DriverError.

Bytes always land through the inner driver, so what ``size`` reports afterwards is the
backend's real state. The counts (``calls``, ``errors``, ``bytes``) include the failed
calls. With ``announce_writes`` every successful write prints a line ``write <n>`` to
stdout (flushed), so that a parent process can kill a child at a chosen point of a
dispatch. Because its options are ``__init__`` keyword parameters, a
:class:`~tiered_core.config.StoreConfig` opens it as ``driver="store_faults:FlakyDriver"``
(with this directory on ``sys.path``, as it is under pytest); a test finds it in the
store's driver stack with :func:`flaky_of`.
"""

from __future__ import annotations

import sys
import threading

from tiered_conformance.faults import RANDOM_KINDS, FaultLayer
from tiered_core.plugins import driver_class
from tiered_core.spi.layer import CountingLayer, RetryPolicy, find_layer

FAULT_KINDS = RANDOM_KINDS
SPEC = "store_faults:FlakyDriver"


class FlakyDriver(CountingLayer):
    """``CountingLayer(FaultLayer(<inner driver>))``, opened from options (see the module doc).

    ``faults`` is the fault layer (``faults.counts`` by kind; ``faults.unavailable.add("read")``
    makes every read fail). Retries above it are quick, so that a test of a lasting
    failure does not wait for the production backoff.
    """

    name = "test-flaky"
    #: the inner driver's options may hold credentials (e.g. a connection string)
    secret_options = frozenset({"inner_options"})
    retry_policy = RetryPolicy(retries=3, base_delay=0.001, max_delay=0.01)

    def __init__(self, *, inner: str = "memory", inner_options: dict | None = None,
                 write_failure_rate: float = 0.0, seed: int = 0, announce_writes: bool = False) -> None:
        cls = driver_class(inner)
        backend = cls(**cls.coerce_options(dict(inner_options or {})))
        self.faults = FaultLayer(backend, write_failure_rate=write_failure_rate, seed=seed, close_inner=True)
        super().__init__(self.faults)
        self.announce_writes = announce_writes
        self._announced = 0
        self._announce_lock = threading.Lock()

    @classmethod
    def location(cls, options):
        """The inner driver's: the faults do not move the data (a store opened with and without
        them is the same store)."""
        inner = driver_class(options.get("inner") or "memory")
        return inner.location(dict(options.get("inner_options") or {}))

    def write(self, path: str, position: int, data: bytes | memoryview) -> None:
        super().write(path, position, data)
        if self.announce_writes:
            with self._announce_lock:
                self._announced += 1
                sys.stdout.write(f"write {self._announced}\n")
                sys.stdout.flush()


def flaky_of(driver) -> FlakyDriver:
    """The :class:`FlakyDriver` in ``driver``'s stack (a store's ``driver``)."""
    found = find_layer(driver, FlakyDriver)
    assert found is not None, f"no FlakyDriver under {driver!r}"
    return found
