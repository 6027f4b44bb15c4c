"""What HTTP-backed drivers share: which statuses are transient, and one request probe.

Retrying is not a driver's business: the retry layer (:mod:`tiered_core.spi.layer`)
retries a failed *operation* when it is safe to. A driver only says whether a failure
may pass (``DriverError(retryable=...)``); :func:`is_transient` is the one rule for HTTP
statuses.

:class:`RequestProbe` is the one place a driver's individual backend requests can be
seen from outside: it counts them (benchmarks report requests per MiB) and lets a test
intercept each one *inside* an operation -- fail it with a status, cut the connection,
or let the backend carry it out and lose the answer. Operation-level faults need no
probe (``tiered_conformance.faults.FaultLayer`` injects them around any driver); the
probe is for what only the transport can stage: a lost answer of one request among the
several an operation sends (a GCS compose, one Azure append block), or killing an
emulator while a chosen request is in flight.
"""

from __future__ import annotations

import threading
from typing import Callable

#: HTTP statuses that may pass: timeouts, throttling and server-side failures.
TRANSIENT_HTTP_STATUS = frozenset({408, 429, 500, 502, 503, 504})

#: What a probe hook returns to have a request carried out and its answer lost.
LOST_ANSWER = "lost-answer"

#: ``hook(method, what)`` -> None (send it), an HTTP status (fail it with that status
#: without sending it), :data:`LOST_ANSWER`, or raises (a connection failure).
#: ``what`` is the driver's description of the request (GCS: the operation and object,
#: e.g. ``"compose 'seg'"``; Azure: the URL path and its ``comp=`` operation).
RequestHook = Callable[[str, str], "int | str | None"]


def is_transient(status: int) -> bool:
    """Whether a request that got HTTP ``status`` may succeed when the operation is repeated."""
    return status in TRANSIENT_HTTP_STATUS


class RequestProbe:
    """Counts a driver's backend requests and runs the test hook (if any) on each.

    A driver calls :meth:`before` once per request it is about to send and acts on the
    answer; :meth:`answer_lost` is the exception to raise once a request marked
    :data:`LOST_ANSWER` was carried out. Thread-safe.
    """

    def __init__(self) -> None:
        self.hook: RequestHook | None = None
        self._sent = 0
        self._lock = threading.Lock()

    @property
    def requests(self) -> int:
        """Requests sent (or failed by the hook) since this probe was made."""
        with self._lock:
            return self._sent

    def before(self, method: str, what: str) -> int | str | None:
        """Count one request; the hook's verdict (None when there is no hook)."""
        with self._lock:
            self._sent += 1
        hook = self.hook
        return None if hook is None else hook(method, what)

    @staticmethod
    def answer_lost() -> ConnectionResetError:
        return ConnectionResetError("injected: answer lost after the request was carried out")


__all__ = ["LOST_ANSWER", "TRANSIENT_HTTP_STATUS", "RequestHook", "RequestProbe", "is_transient"]
