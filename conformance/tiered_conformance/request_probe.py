"""Counting and intercepting a driver's backend requests: :class:`RequestProbe`.

HTTP-backed drivers (gcs, azure, s3) pass every request attempt through their
:class:`~tiered_core.spi.transport.RequestHookPoint` (``driver.transport``). The probe is
what tests and benchmarks install there: it counts the attempts (``requests``: the
benchmarks' requests per MiB, a test's "every attempt is counted") and hands each to the
test's own :attr:`RequestProbe.hook`, whose verdict the driver acts on (see
:data:`~tiered_core.spi.transport.RequestHook`)::

    probe = RequestProbe.install(driver)
    probe.hook = lambda method, what: 503 if what.startswith("compose") else None
    ...
    assert probe.requests - before == 2
    probe.uninstall()

A probe counts only what is sent while it is installed; installing a second one on the
same driver replaces the first.
"""

from __future__ import annotations

import threading
from typing import Any

from tiered_core.spi.transport import RequestHook, RequestHookPoint


class RequestProbe:
    """Counts the requests passing a driver's hook point and runs the test hook on each.

    Guarantees: every call of the point's ``before`` while installed is counted once, before
    the test hook runs (a request the hook fails or whose answer it loses counts too).
    Thread-safe. :meth:`install` raises ``TypeError`` naming the driver when it has no
    request hook point.
    """

    def __init__(self, point: RequestHookPoint) -> None:
        self.point = point
        #: The test's hook (None: let every request through).
        self.hook: RequestHook | None = None
        self._sent = 0
        self._lock = threading.Lock()
        point.hook = self._before

    @classmethod
    def install(cls, driver: Any) -> "RequestProbe":
        """A probe on ``driver.transport`` (the raw driver's, or the innermost one under layers)."""
        point = getattr(driver, "transport", None)
        inner = driver
        while point is None and getattr(inner, "inner", None) is not None:
            inner = inner.inner
            point = getattr(inner, "transport", None)
        if not isinstance(point, RequestHookPoint):
            raise TypeError(f"driver {type(driver).__name__} has no request hook point (driver.transport)")
        return cls(point)

    @property
    def requests(self) -> int:
        """Requests sent (or failed by the hook) since this probe was installed."""
        with self._lock:
            return self._sent

    def uninstall(self) -> None:
        """Take the probe off its hook point (if it is still the one installed)."""
        if self.point.hook == self._before:
            self.point.hook = None

    def _before(self, method: str, what: str) -> int | str | None:
        with self._lock:
            self._sent += 1
        hook = self.hook
        return None if hook is None else hook(method, what)


__all__ = ["RequestProbe"]
