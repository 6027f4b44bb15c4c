"""A driver wrapper for the message-store tests: random write faults and write announcements.

:class:`FlakyDriver` opens a real driver by name (``inner`` + ``inner_options``) and
forwards every call to it. With ``write_failure_rate`` > 0 it fails that share of
writes, choosing at random (seeded) how:

* ``before`` - nothing lands, a retryable :class:`~tiered_core.errors.DriverError`;
* ``after`` - every byte lands, then the answer is lost (retryable DriverError);
* ``partial`` - a strict prefix lands (through the inner driver's own ``write``), then
  a retryable DriverError.

Bytes always land through the inner driver, so what ``size`` reports afterwards is the
backend's real state. With ``announce_writes`` every successful write prints a line
``write <n>`` to stdout (flushed), so that a parent process can kill a child at a
chosen point of a dispatch. Because its options are ``__init__`` keyword parameters,
a :class:`~tiered_core.config.StoreConfig` opens it as ``driver="store_faults:FlakyDriver"``
(with this directory on ``sys.path``, as it is under pytest).
"""

from __future__ import annotations

import random
import sys
import threading
from collections import Counter
from typing import Any, Iterator

from tiered_core.errors import DriverError
from tiered_core.plugins import open_driver
from tiered_core.spi.driver import SegmentDriver

FAULT_KINDS = ("before", "after", "partial")
SPEC = "store_faults:FlakyDriver"


class FlakyDriver(SegmentDriver):
    """Forwards to a real driver, failing ``write_failure_rate`` of writes (see the module doc).

    Thread-safe. ``faults`` counts the injected faults by kind, ``writes`` and ``reads``
    the calls; set ``fail_reads`` to make every read raise a retryable DriverError.
    """

    name = "test-flaky"
    #: the inner driver's options may hold credentials (e.g. a connection string)
    secret_options = frozenset({"inner_options"})

    def __init__(self, *, inner: str = "memory", inner_options: dict | None = None,
                 write_failure_rate: float = 0.0, seed: int = 0, announce_writes: bool = False) -> None:
        if not 0.0 <= write_failure_rate < 1.0:
            raise ValueError(f"write_failure_rate must be in [0, 1), got {write_failure_rate}")
        self.inner = open_driver(inner, **dict(inner_options or {}))
        self.write_failure_rate = write_failure_rate
        self.announce_writes = announce_writes
        self.fail_reads = False
        self.faults: Counter[str] = Counter()
        self.writes = 0
        self.reads = 0
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    @property  # type: ignore[override]
    def capabilities(self):  # noqa: D401 - mirrors the inner driver's
        return self.inner.capabilities

    def _pick_fault(self) -> str | None:
        with self._lock:
            self.writes += 1
            if self._rng.random() >= self.write_failure_rate:
                return None
            kind = self._rng.choice(FAULT_KINDS)
            self.faults[kind] += 1
            return kind

    def write(self, path: str, position: int, data: bytes | memoryview) -> None:
        path = self.check_path(path)
        kind = self._pick_fault()
        if kind is None:
            self.inner.write(path, position, data)
            if self.announce_writes:
                with self._lock:
                    sys.stdout.write(f"write {self.writes}\n")
                    sys.stdout.flush()
            return
        data = bytes(data)
        if kind == "after":
            self.inner.write(path, position, data)
        elif kind == "partial" and len(data) > 1:
            self.inner.write(path, position, data[:max(1, len(data) // 3)])
        raise DriverError(f"injected fault ({kind}) writing {len(data)} bytes at {position} of {path!r}",
                          retryable=True, path=path, position=position, injected=kind)

    def read(self, path: str, position: int, length: int) -> bytes:
        with self._lock:
            self.reads += 1
        if self.fail_reads:
            raise DriverError(f"injected read fault for {path!r}", retryable=True, path=path)
        return self.inner.read(path, position, length)

    def size(self, path: str) -> int:
        return self.inner.size(path)

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def create(self, path: str) -> None:
        self.inner.create(path)

    def seal(self, path: str) -> None:
        self.inner.seal(path)

    def is_sealed(self, path: str) -> bool:
        return self.inner.is_sealed(path)

    def delete(self, path: str) -> None:
        self.inner.delete(path)

    def list(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        return self.inner.list(prefix)

    def close(self) -> None:
        self.inner.close()

    def describe(self) -> dict[str, Any]:
        out = self.inner.describe()
        out["wrapped_by"] = type(self).__name__
        return out
